// Caller-side cost of fl_submit_kernel measured without a GPU: the CUDA runtime is the
// host-thread fake of tests/gpu/fake (the launches happen on the engine's workers and the
// fake's stream threads, not in the caller), so only flowlane's submission path is timed:
// argument copy, dependency recording, lane hand-off. Beside it, fl_submit_host on the same
// engine as a floor. Each round submits kBatch instructions (timed), then synchronizes
// (not timed); the median of the rounds is printed. Built in CUDA builds with tests (target
// flowlane_fake_submit_cost, defined in tests/CMakeLists.txt next to the fake); on the GPU
// host bench/gpu's BM_FlowlaneSubmitKernel measures the same thing against real CUDA.
//   build/tests/flowlane_fake_submit_cost [rounds [workers]]   (workers 0: one per core)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fake_kernel.hpp"
#include "flowlane/flowlane.h"

// From the fake runtime; calling it also keeps the fake linked ahead of libcudart.
extern "C" long fake_cudart_event_records();

namespace {

constexpr int kBatch = 2000;

int run_nothing(const void* const*) { return 0; }
const fake::Kernel kTwoArgs{2, {sizeof(void*), sizeof(int)}, &run_nothing};
fl_status_t noop(fl_instr_ctx_t*, void*) { return FL_OK; }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class Submit>
double ns_per_submit(fl_engine_t* e, int rounds, Submit submit) {
  std::vector<double> ns;
  for (int r = 0; r < rounds; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < kBatch; ++k) {
      if (submit() != FL_OK) {
        std::fprintf(stderr, "submit failed: %s\n", fl_last_error_message());
        std::exit(1);
      }
    }
    auto t1 = std::chrono::steady_clock::now();
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / kBatch);
    if (fl_engine_synchronize(e) != FL_OK) {
      std::fprintf(stderr, "synchronize failed: %s\n", fl_last_error_message());
      std::exit(1);
    }
  }
  return median(ns);
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 21;
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = argc > 2 ? uint64_t(std::max(0, std::atoi(argv[2]))) : 0;
  d.inflight_limit = 4 * kBatch;  // never blocks on the window
  fl_engine_t* e = nullptr;
  if (fl_engine_create(&d, &e) != FL_OK) {
    std::fprintf(stderr, "engine: %s\n", fl_last_error_message());
    return 1;
  }
  fl_stream_t* gpu = nullptr;
  fl_stream_t* host = nullptr;
  if (fl_stream_get(e, 1, fl_device_t{FL_DEVICE_CUDA, 0}, FL_STREAM_COMPUTE, &gpu) != FL_OK ||
      fl_stream_get(e, 2, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST, &host) != FL_OK) {
    std::fprintf(stderr, "streams: %s (is the fake CUDA runtime linked?)\n", fl_last_error_message());
    return 1;
  }
  fl_object_t* o = nullptr;
  fl_object_create(e, nullptr, nullptr, &o);
  fl_operand_t op{o, FL_READ_WRITE, 0};
  void* ptr = nullptr;
  int value = 1;
  const void* args[] = {&ptr, &value};
  const uint64_t sizes[] = {sizeof(ptr), sizeof(value)};
  auto kernel = [&] {
    fl_kernel_instr_t k = FL_KERNEL_INSTR_INIT;
    k.func = &kTwoArgs;
    k.args = args;
    k.arg_sizes = sizes;
    k.num_args = 2;
    k.operands = &op;
    k.num_operands = 1;
    return fl_submit_kernel(gpu, &k, nullptr);
  };
  auto host_instr = [&] {
    fl_host_instr_t h = FL_HOST_INSTR_INIT;
    h.fn = noop;
    h.operands = &op;
    h.num_operands = 1;
    return fl_submit_host(host, &h, nullptr);
  };
  (void)ns_per_submit(e, 3, kernel);  // warm-up: record pools, events, streams
  const long records = fake_cudart_event_records();
  double k_ns = ns_per_submit(e, rounds, kernel);
  const long recorded = fake_cudart_event_records() - records;
  double h_ns = ns_per_submit(e, rounds, host_instr);
  std::printf("caller-side submit, median of %d rounds of %d (fake CUDA runtime, %llu workers):\n", rounds, kBatch,
              static_cast<unsigned long long>(d.num_workers));
  std::printf("  fl_submit_kernel (2 args, 1 operand)  %8.1f ns\n", k_ns);
  std::printf("  fl_submit_host   (1 operand)          %8.1f ns\n", h_ns);
  std::printf("  kernel / host                         %8.2f\n", k_ns / h_ns);
  std::printf("  cudaEventRecord per kernel            %8.3f\n", double(recorded) / (double(rounds) * kBatch));
  fl_object_release(o);
  fl_engine_destroy(e);
  return 0;
}
