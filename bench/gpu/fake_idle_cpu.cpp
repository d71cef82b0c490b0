// The CPU an idle engine uses once its GPU work has completed, measured without a GPU: the
// CUDA runtime is the host-thread fake of tests/gpu/fake (its stream threads sleep when
// their queues are empty). An engine with CUDA streams on 4 lanes runs a few hundred
// kernels and waits for them; then, after the spins that follow work have ended (the
// poller's idle spin, the workers' spin before parking: well under 100 ms), the process's
// CPU time (user + system, getrusage) is read over an idle period. Goal: <= 1 % of one core
// (nothing spins when no GPU work is in flight). Built in CUDA builds with tests (target
// flowlane_fake_idle_cpu, tests/CMakeLists.txt); on the GPU host
// bench/gpu's BM_FlowlaneIdleEngineCpu measures the same against real CUDA.
//   build/tests/flowlane_fake_idle_cpu [idle_seconds [rounds]]   (default 2 s, 3 rounds)
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "fake_kernel.hpp"
#include "flowlane/flowlane.h"

// From the fake runtime; calling it also keeps the fake linked ahead of libcudart.
extern "C" long fake_cudart_event_records();

namespace {

int run_add(const void* const* a) {
  int* p = *static_cast<int* const*>(a[0]);
  *p += *static_cast<const int*>(a[1]);
  return 0;
}
const fake::Kernel kAdd{2, {sizeof(int*), sizeof(int)}, &run_add};

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

void check(fl_status_t st, const char* what) {
  if (st == FL_OK) return;
  std::fprintf(stderr, "%s: %s\n", what, fl_last_error_message());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  const double idle_s = argc > 1 ? std::max(0.2, std::atof(argv[1])) : 2.0;
  const int rounds = argc > 2 ? std::max(1, std::atoi(argv[2])) : 3;
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = 4;
  fl_engine_t* e = nullptr;
  check(fl_engine_create(&d, &e), "fl_engine_create");
  fl_object_t* o = nullptr;
  check(fl_object_create(e, nullptr, nullptr, &o), "fl_object_create");
  int value = 0, one = 1;
  int* p = &value;
  std::vector<double> percent;
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 400; ++k) {
      fl_stream_t* s = nullptr;
      check(fl_stream_get(e, 1 + uint32_t(k % 4), fl_device_t{FL_DEVICE_CUDA, 0}, FL_STREAM_COMPUTE, &s), "fl_stream_get");
      const void* args[] = {&p, &one};
      const uint64_t sizes[] = {sizeof(p), sizeof(one)};
      fl_kernel_instr_t ki = FL_KERNEL_INSTR_INIT;
      ki.func = &kAdd;
      ki.args = args;
      ki.arg_sizes = sizes;
      ki.num_args = 2;
      fl_operand_t op{o, FL_READ_WRITE, 0};
      ki.operands = &op;
      ki.num_operands = 1;
      check(fl_submit_kernel(s, &ki, nullptr), "fl_submit_kernel");
    }
    check(fl_object_wait(o, FL_READ), "fl_object_wait");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const double c0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(idle_s));
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    percent.push_back(100.0 * (cpu_seconds() - c0) / wall);
  }
  std::sort(percent.begin(), percent.end());
  std::printf("idle engine with CUDA streams on 4 lanes (fake runtime, %ld event records): CPU %.3f %% of one core "
              "over %.1f s (median of %d rounds; min %.3f, max %.3f); goal <= 1 %%\n",
              fake_cudart_event_records(), percent[percent.size() / 2], idle_s, rounds, percent.front(),
              percent.back());
  check(fl_object_release(o), "fl_object_release");
  fl_engine_destroy(e);
  return value == 400 * rounds ? 0 : 1;
}
