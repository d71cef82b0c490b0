// Hardware queues (CTest runs this with CUDA_DEVICE_MAX_CONNECTIONS=2): the fake gives a
// device that many queues, and a wait at the head of one holds back every stream on it;
// the engine keeps its CUDA streams per device within the same budget.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "fake_kernel.hpp"
#include "flowlane/flowlane.h"

extern "C" long fake_cudart_streams_alive();

namespace {

int run_add(const void* const* a) {
  auto* p = *static_cast<std::atomic<int>* const*>(a[0]);
  p->fetch_add(*static_cast<const int*>(a[1]));
  return 0;
}
const fake::Kernel kAdd{2, {sizeof(void*), sizeof(int)}, &run_add};

int run_spin(const void* const* a) {
  auto* flag = *static_cast<std::atomic<int>* const*>(a[0]);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (flag->load() == 0 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  return 0;
}
const fake::Kernel kSpin{1, {sizeof(void*)}, &run_spin};

TEST(FakeQueues, AWaitAtTheHeadOfAQueueHoldsBackTheStreamsSharingIt) {
  // Three streams on two queues: the third shares a queue with one of the others.
  std::vector<cudaStream_t> s(3);
  for (auto& x : s) ASSERT_EQ(cudaStreamCreateWithPriority(&x, cudaStreamNonBlocking, 0), cudaSuccess);
  std::atomic<int> flag{0}, hits{0};
  std::atomic<int>* pf = &flag;
  std::atomic<int>* ph = &hits;
  int one = 1;
  void* spin_args[1] = {&pf};
  void* add_args[2] = {&ph, &one};
  ASSERT_EQ(cudaLaunchKernel(&kSpin, dim3(1), dim3(1), spin_args, 0, s[0]), cudaSuccess);
  ASSERT_EQ(cudaLaunchKernel(&kSpin, dim3(1), dim3(1), spin_args, 0, s[1]), cudaSuccess);
  ASSERT_EQ(cudaLaunchKernel(&kAdd, dim3(1), dim3(1), add_args, 0, s[2]), cudaSuccess);
  cudaEvent_t ev;
  ASSERT_EQ(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(ev, s[2]), cudaSuccess);
  // Both queues are blocked by a spinning kernel: the third stream's work cannot run.
  for (int k = 0; k < 1000; ++k) std::this_thread::yield();
  EXPECT_EQ(hits.load(), 0) << "a stream ran past the kernel at the head of its hardware queue";
  flag.store(1);
  while (cudaEventQuery(ev) == cudaErrorNotReady) std::this_thread::yield();
  EXPECT_EQ(hits.load(), 1);
  cudaEventDestroy(ev);
  for (auto& x : s) cudaStreamDestroy(x);
}

TEST(FakeQueues, AnEngineKeepsItsCudaStreamsWithinTheBudget) {
  const long before = fake_cudart_streams_alive();
  fl_engine_t* e = nullptr;
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = 2;
  d.max_lanes = 8;
  ASSERT_EQ(fl_engine_create(&d, &e), FL_OK);
  std::atomic<int> hits{0};
  std::atomic<int>* ph = &hits;
  int one = 1;
  const void* args[2] = {&ph, &one};
  uint64_t sizes[2] = {sizeof(void*), sizeof(int)};
  for (uint32_t lane = 1; lane <= 6; ++lane) {
    for (fl_stream_kind_t kind : {FL_STREAM_COMPUTE, FL_STREAM_H2D}) {
      fl_stream_t* s = nullptr;
      ASSERT_EQ(fl_stream_get(e, lane, fl_device_t{FL_DEVICE_CUDA, 0}, kind, &s), FL_OK) << fl_last_error_message();
      fl_kernel_instr_t k = FL_KERNEL_INSTR_INIT;
      k.func = &kAdd;
      k.args = args;
      k.arg_sizes = sizes;
      k.num_args = 2;
      ASSERT_EQ(fl_submit_kernel(s, &k, nullptr), FL_OK) << fl_last_error_message();
    }
  }
  ASSERT_EQ(fl_engine_synchronize(e), FL_OK) << fl_last_error_message();
  EXPECT_EQ(hits.load(), 12);
  EXPECT_LE(fake_cudart_streams_alive() - before, 2) << "more CUDA streams than CUDA_DEVICE_MAX_CONNECTIONS=2";
  fl_engine_destroy(e);
  EXPECT_EQ(fake_cudart_streams_alive(), before);
}

}  // namespace
