// What a first run on a real GPU would show, reproduced against the fake CUDA runtime
// (fake_cudart.cpp models each): pageable host memory, stale per-thread errors, device
// functions that enqueue work and then fail, completion order of skipped and launch-failed
// instructions, sticky faults, kernels of another runtime instance, the argument limit.
//
// Several tests use a host instruction on the lane that issued the device work as a
// probe: it runs once the lane went past that work, so it sees what the engine did with
// it at issue (and it then releases the spinning kernel).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fake_test_util.hpp"
#include "flowlane/flowlane.h"

extern "C" void fake_cudart_reset_sticky();
extern "C" void fake_cudart_set_last_error(cudaError_t e);
extern "C" void fake_cudart_register_pageable(const void* p, size_t n);
extern "C" void fake_cudart_unregister(const void* p);
extern "C" void fake_cudart_mark_foreign_kernel(const void* f);
extern "C" long fake_cudart_events_alive();
extern "C" long fake_cudart_streams_alive();

namespace {

constexpr fl_device_t kCpu{FL_DEVICE_CPU, 0};
constexpr fl_device_t kGpu{FL_DEVICE_CUDA, 0};

int run_add(const void* const* a) {
  int* p = *static_cast<int* const*>(a[0]);
  *p += *static_cast<const int*>(a[1]);
  return 0;
}
const fake::Kernel kAdd{2, {sizeof(int*), sizeof(int)}, &run_add};

// Spins until *flag, then sets *done. Bounded so that a broken engine fails, not hangs.
int run_spin(const void* const* a) {
  auto* flag = *static_cast<std::atomic<int>* const*>(a[0]);
  auto* done = *static_cast<std::atomic<int>* const*>(a[1]);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (flag->load() == 0 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  done->store(1);
  return 0;
}
const fake::Kernel kSpin{2, {sizeof(void*), sizeof(void*)}, &run_spin};

int run_fault(const void* const*) { return 1; }
const fake::Kernel kFault{0, {}, &run_fault};

int run_nothing(const void* const*) { return 0; }
const fake::Kernel kBigArg{1, {32764}, &run_nothing};
const fake::Kernel kTooBigArg{1, {32765}, &run_nothing};
const fake::Kernel kForeign{0, {}, &run_nothing};

// The shared engine of the fake tests (fake_test_util.hpp), with 2 workers here.
struct Eng : fakegpu::Eng {
  explicit Eng(uint32_t workers = 2) : fakegpu::Eng(workers) {}
};
using fakegpu::kernel;

// Submits a host instruction to `s` running `f` (a captureless-friendly std::function).
template <class F>
fl_status_t host(fl_stream_t* s, F* f, std::vector<fl_operand_t> ops = {}) {
  fl_host_instr_t h = FL_HOST_INSTR_INIT;
  h.fn = [](fl_instr_ctx_t*, void* u) -> fl_status_t { return (*static_cast<F*>(u))(); };
  h.user_data = f;
  h.operands = ops.data();
  h.num_operands = ops.size();
  return fl_submit_host(s, &h, nullptr);
}

// A host instruction on lane 2 that fails and poisons `o`.
void poison(Eng& g, fl_object_t* o) {
  static auto fail = []() -> fl_status_t { return FL_ERR_INSTRUCTION_FAILED; };
  ASSERT_EQ(host(g.s(2, kCpu, FL_STREAM_HOST), &fail, {{o, FL_WRITE, 0}}), FL_OK);
  fl_engine_synchronize(g.e);  // the failure is recorded; its error is returned here
}

uint32_t state(fl_stream_t* s, fl_instr_id id) {
  uint32_t st = 99;
  EXPECT_EQ(fl_instr_query(s, id, &st), FL_OK) << fl_last_error_message();
  return st;
}

// ---- pageable host memory ----------------------------------------------------------------

TEST(FakeGpuHardening, PageableHostMemoryIsRefusedAtSubmitNamingTheFix) {
  Eng g;
  std::vector<int> pageable(64, 1);
  fake_cudart_register_pageable(pageable.data(), pageable.size() * sizeof(int));
  std::vector<int> dev(64, 0);
  fl_memcpy_instr_t m = FL_MEMCPY_INSTR_INIT;
  m.kind = FL_MEMCPY_H2D;
  m.dst = dev.data();
  m.src = pageable.data();
  m.bytes = 64 * sizeof(int);
  EXPECT_EQ(fl_submit_memcpy(g.s(1, kGpu, FL_STREAM_H2D), &m, nullptr), FL_ERR_INVALID_ARGUMENT);
  std::string msg = fl_last_error_message();
  EXPECT_NE(msg.find("pageable"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fl_host_alloc_pinned"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cudaHostRegister"), std::string::npos) << msg;
  m.kind = FL_MEMCPY_D2H;
  m.dst = pageable.data();
  m.src = dev.data();
  EXPECT_EQ(fl_submit_memcpy(g.s(1, kGpu, FL_STREAM_D2H), &m, nullptr), FL_ERR_INVALID_ARGUMENT);
  // Pinned memory is accepted.
  void* pinned = nullptr;
  ASSERT_EQ(fl_host_alloc_pinned(64 * sizeof(int), &pinned), FL_OK);
  std::memset(pinned, 0, 64 * sizeof(int));
  m.dst = pinned;
  EXPECT_EQ(fl_submit_memcpy(g.s(1, kGpu, FL_STREAM_D2H), &m, nullptr), FL_OK) << fl_last_error_message();
  EXPECT_EQ(fl_engine_synchronize(g.e), FL_OK) << fl_last_error_message();
  fl_host_free_pinned(pinned);
  fake_cudart_unregister(pageable.data());
}

// ---- stale per-thread errors -------------------------------------------------------------

TEST(FakeGpuHardening, AStaleErrorOfTheWorkerThreadDoesNotFailTheNextLaunch) {
  Eng g(1);  // one worker: the host callback and the launch run on the same thread
  auto leave_error = []() -> fl_status_t {
    fake_cudart_set_last_error(cudaErrorNotReady);  // as a cudaStreamQuery of the user's would
    return FL_OK;
  };
  int x = 0;
  int* p = &x;
  int one = 1;
  ASSERT_EQ(host(g.s(1, kCpu, FL_STREAM_HOST), &leave_error), FL_OK);
  ASSERT_EQ(kernel(g.s(1, kGpu, FL_STREAM_COMPUTE), kAdd, {&p, &one}, {}, "innocent"), FL_OK);
  EXPECT_EQ(fl_engine_synchronize(g.e), FL_OK) << fl_last_error_message();
  EXPECT_EQ(x, 1);
}

// ---- completion order per stream ---------------------------------------------------------

struct Probe {
  fl_stream_t* s = nullptr;
  fl_instr_id first = 0, later = 0;
  std::atomic<int>* flag = nullptr;
  uint32_t first_state = 99, later_state = 99;
  fl_status_t operator()() {
    fl_instr_query(s, first, &first_state);
    fl_instr_query(s, later, &later_state);
    flag->store(1);  // now let the spinning kernel finish
    return FL_OK;
  }
};

void expect_in_order(bool launch_failure) {
  Eng g;
  fl_object_t* bad = g.obj();
  if (!launch_failure) poison(g, bad);
  std::atomic<int> flag{0}, done{0};
  auto* pf = &flag;
  auto* pd = &done;
  fl_stream_t* s = g.s(1, kGpu, FL_STREAM_COMPUTE);
  Probe probe;
  probe.s = s;
  probe.flag = &flag;
  ASSERT_EQ(kernel(s, kSpin, {&pf, &pd}, {}, "spinning", 1, &probe.first), FL_OK);
  int x = 0;
  int* p = &x;
  int one = 1;
  if (launch_failure) {
    ASSERT_EQ(kernel(s, kAdd, {&p, &one}, {}, "bad-config", 4096, &probe.later), FL_OK);
  } else {
    ASSERT_EQ(kernel(s, kAdd, {&p, &one}, {{bad, FL_READ, 0}}, "skipped", 1, &probe.later), FL_OK);
  }
  ASSERT_EQ(host(g.s(1, kCpu, FL_STREAM_HOST), &probe), FL_OK);
  fl_engine_synchronize(g.e);
  EXPECT_EQ(probe.first_state, uint32_t(FL_INSTR_PENDING)) << "the spinning kernel was reported completed";
  EXPECT_EQ(probe.later_state, uint32_t(FL_INSTR_PENDING))
      << "an instruction completed before an earlier one of its stream";
  EXPECT_EQ(done.load(), 1);
  EXPECT_EQ(state(s, probe.first), uint32_t(FL_INSTR_DONE));
  EXPECT_EQ(state(s, probe.later), uint32_t(launch_failure ? FL_INSTR_FAILED : FL_INSTR_SKIPPED));
  fl_object_release(bad);
}

TEST(FakeGpuHardening, ASkippedInstructionCompletesAfterTheEarlierWorkOfItsStream) { expect_in_order(false); }

TEST(FakeGpuHardening, ALaunchFailureCompletesAfterTheEarlierWorkOfItsStream) { expect_in_order(true); }

// ---- a device function that enqueued work and then failed --------------------------------

struct DevFn {
  std::atomic<int> flag{0}, done{0};
  std::atomic<bool> cleanup_ran{false};
  int done_at_cleanup = -1;
  bool cleanup_seen_by_probe = true;
};

TEST(FakeGpuHardening, AFailingDeviceFunctionCompletesAfterTheWorkItEnqueued) {
  Eng g;
  DevFn d;
  fl_device_instr_t di = FL_DEVICE_INSTR_INIT;
  di.fn = [](fl_instr_ctx_t*, void* cuda_stream, void* u) -> fl_status_t {
    auto* dd = static_cast<DevFn*>(u);
    std::atomic<int>* pf = &dd->flag;
    std::atomic<int>* pd = &dd->done;
    void* args[2] = {&pf, &pd};
    cudaLaunchKernel(&kSpin, dim3(1), dim3(1), args, 0, static_cast<cudaStream_t>(cuda_stream));
    return FL_ERR_INSTRUCTION_FAILED;  // ... and then fails
  };
  di.cleanup = [](void* u) {
    auto* dd = static_cast<DevFn*>(u);
    dd->done_at_cleanup = dd->done.load();
    dd->cleanup_ran.store(true);
  };
  di.user_data = &d;
  di.name = "enqueues-then-fails";
  fl_object_t* o = g.obj();
  fl_operand_t w{o, FL_WRITE, 0};
  di.operands = &w;
  di.num_operands = 1;
  ASSERT_EQ(fl_submit_device(g.s(1, kGpu, FL_STREAM_COMPUTE), &di, nullptr), FL_OK);
  // A reader on the same lane (lane order, no edge) must still be skipped.
  int x = 0;
  int* px = &x;
  int one = 1;
  fl_instr_id reader = 0;
  fl_stream_t* d2h = g.s(1, kGpu, FL_STREAM_D2H);
  ASSERT_EQ(kernel(d2h, kAdd, {&px, &one}, {{o, FL_READ, 0}}, "reader", 1, &reader), FL_OK);
  auto probe = [&d]() -> fl_status_t {
    d.cleanup_seen_by_probe = d.cleanup_ran.load();
    d.flag.store(1);
    return FL_OK;
  };
  ASSERT_EQ(host(g.s(1, kCpu, FL_STREAM_HOST), &probe), FL_OK);
  EXPECT_EQ(fl_engine_synchronize(g.e), FL_ERR_INSTRUCTION_FAILED);
  EXPECT_NE(std::string(fl_last_error_message()).find("enqueues-then-fails"), std::string::npos);
  EXPECT_FALSE(d.cleanup_seen_by_probe) << "its cleanup ran while the work it enqueued was still queued";
  EXPECT_EQ(d.done_at_cleanup, 1) << "cleanup before the enqueued kernel finished";
  EXPECT_EQ(x, 0) << "a reader of the failed device function's output ran";
  EXPECT_EQ(state(d2h, reader), uint32_t(FL_INSTR_SKIPPED));
  fl_object_release(o);
}

// ---- the engine's CUDA resources -------------------------------------------------------

TEST(FakeGpuHardening, EventsAndCudaStreamsAreDestroyedWithTheirEngine) {
  const long events = fake_cudart_events_alive(), streams = fake_cudart_streams_alive();
  {
    Eng g;
    fl_object_t* bad = g.obj();
    fl_object_t* ox = g.obj();
    poison(g, bad);
    int x = 0;
    int* p = &x;
    int one = 1;
    for (int k = 0; k < 64; ++k) {
      ASSERT_EQ(kernel(g.s(1 + k % 2, kGpu, FL_STREAM_COMPUTE), kAdd, {&p, &one}, {{ox, FL_READ_WRITE, 0}}, "add"),
                FL_OK);
      ASSERT_EQ(kernel(g.s(3, kGpu, FL_STREAM_D2H), kAdd, {&p, &one}, {{bad, FL_READ, 0}}, "skipped"), FL_OK);
    }
    fl_engine_synchronize(g.e);
    EXPECT_GT(fake_cudart_events_alive(), events);
    EXPECT_EQ(x, 64);
    fl_object_release(bad);
    fl_object_release(ox);
    // Not synchronized again: failures still in the ledger are recycled at destroy.
  }
  EXPECT_EQ(fake_cudart_events_alive(), events) << "events outlived their engine";
  EXPECT_EQ(fake_cudart_streams_alive(), streams) << "CUDA streams outlived their engine";
}

// ---- sticky faults, foreign kernels, the argument limit ----------------------------------

TEST(FakeGpuHardening, LaterFailuresNameTheInstructionThatBrokeTheContext) {
  {
    Eng g;
    fl_stream_t* s = g.s(1, kGpu, FL_STREAM_COMPUTE);
    ASSERT_EQ(kernel(s, kFault, {}, {}, "first-fault"), FL_OK);
    EXPECT_EQ(fl_engine_synchronize(g.e), FL_ERR_CUDA);
    int x = 0;
    int* p = &x;
    int one = 1;
    ASSERT_EQ(kernel(s, kAdd, {&p, &one}, {}, "innocent"), FL_OK);
    EXPECT_EQ(fl_engine_synchronize(g.e), FL_ERR_CUDA);
    std::string msg = fl_last_error_message();
    EXPECT_NE(msg.find("innocent"), std::string::npos) << msg;
    EXPECT_NE(msg.find("broken by an earlier fault in instruction 'first-fault'"), std::string::npos) << msg;
  }
  fake_cudart_reset_sticky();
}

TEST(FakeGpuHardening, AKernelOfAnotherRuntimeInstanceFailsSayingSo) {
  Eng g;
  fake_cudart_mark_foreign_kernel(&kForeign);
  ASSERT_EQ(kernel(g.s(1, kGpu, FL_STREAM_COMPUTE), kForeign, {}, {}, "foreign"), FL_OK);
  EXPECT_EQ(fl_engine_synchronize(g.e), FL_ERR_CUDA);
  std::string msg = fl_last_error_message();
  EXPECT_NE(msg.find("cudaErrorInvalidDeviceFunction"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not registered with the CUDA runtime libflowlane uses"), std::string::npos) << msg;
}

TEST(FakeGpuHardening, KernelArgumentsAreLimitedTo32764Bytes) {
  Eng g;
  std::vector<unsigned char> big(32765, 7);
  fl_stream_t* s = g.s(1, kGpu, FL_STREAM_COMPUTE);
  EXPECT_EQ(kernel(s, kBigArg, {big.data()}, {}, "fits"), FL_OK) << fl_last_error_message();
  EXPECT_EQ(kernel(s, kTooBigArg, {big.data()}, {}, "too-big"), FL_ERR_OUT_OF_RANGE);
  EXPECT_NE(std::string(fl_last_error_message()).find("32764"), std::string::npos) << fl_last_error_message();
  EXPECT_EQ(fl_engine_synchronize(g.e), FL_OK) << fl_last_error_message();
}

}  // namespace
