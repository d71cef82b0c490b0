// Two fake devices (FAKE_CUDA_DEVICES=2, set by CTest): the poller queries each stream's
// events and runs its callbacks with that stream's device current, and events are used
// only on the device they were created on (the fake refuses a record across devices).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "fake_kernel.hpp"
#include "flowlane/flowlane.h"

namespace {

int run_add(const void* const* a) {
  auto* p = *static_cast<std::atomic<int>* const*>(a[0]);
  p->fetch_add(*static_cast<const int*>(a[1]));  // the two devices' kernels may overlap
  return 0;
}
const fake::Kernel kAdd{2, {sizeof(void*), sizeof(int)}, &run_add};

// kAdd once the flag it is given is set (bounded: 60 s), so that the test can let go of an
// object before the kernel using it completes.
std::atomic<bool> g_go{false};
int run_add_when_let_go(const void* const* a) {
  for (int i = 0; i < 600'000 && !g_go.load(); ++i) std::this_thread::sleep_for(std::chrono::microseconds(100));
  return run_add(a);
}
const fake::Kernel kAddWhenLetGo{2, {sizeof(void*), sizeof(int)}, &run_add_when_let_go};

struct Seen {
  std::atomic<int> release_device{-1};
  std::atomic<int> cleanup_device{-1};
};

TEST(FakeMultiDevice, CallbacksOfDeviceWorkRunWithItsDeviceCurrent) {
  int n = 0;
  ASSERT_EQ(fl_cuda_device_count(&n), FL_OK);
  ASSERT_EQ(n, 2) << "run with FAKE_CUDA_DEVICES=2";
  fl_engine_t* e = nullptr;
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = 2;
  ASSERT_EQ(fl_engine_create(&d, &e), FL_OK);
  Seen seen;
  fl_object_t* o = nullptr;
  ASSERT_EQ(fl_object_create(e, &seen,
                             [](void* u) {
                               int dev = -1;
                               cudaGetDevice(&dev);
                               static_cast<Seen*>(u)->release_device.store(dev);
                             },
                             &o),
            FL_OK);
  fl_stream_t* s0 = nullptr;
  fl_stream_t* s1 = nullptr;
  ASSERT_EQ(fl_stream_get(e, 1, fl_device_t{FL_DEVICE_CUDA, 0}, FL_STREAM_COMPUTE, &s0), FL_OK);
  ASSERT_EQ(fl_stream_get(e, 2, fl_device_t{FL_DEVICE_CUDA, 1}, FL_STREAM_COMPUTE, &s1), FL_OK);
  std::atomic<int> x{0};
  std::atomic<int>* p = &x;
  int one = 1;
  const void* args[2] = {&p, &one};
  uint64_t sizes[2] = {sizeof(void*), sizeof(int)};
  fl_kernel_instr_t k = FL_KERNEL_INSTR_INIT;
  k.func = &kAdd;
  k.args = args;
  k.arg_sizes = sizes;
  k.num_args = 2;
  ASSERT_EQ(fl_submit_kernel(s0, &k, nullptr), FL_OK);  // device 0 work first: the poller knows both
  fl_operand_t w{o, FL_WRITE, 0};
  k.operands = &w;
  k.num_operands = 1;
  k.func = &kAddWhenLetGo;  // completes only after the release below, so the poller runs it
  g_go = false;
  ASSERT_EQ(fl_submit_kernel(s1, &k, nullptr), FL_OK) << fl_last_error_message();
  fl_device_instr_t di = FL_DEVICE_INSTR_INIT;
  di.fn = [](fl_instr_ctx_t*, void*, void*) -> fl_status_t { return FL_OK; };
  di.cleanup = [](void* u) {
    int dev = -1;
    cudaGetDevice(&dev);
    static_cast<Seen*>(u)->cleanup_device.store(dev);
  };
  di.user_data = &seen;
  ASSERT_EQ(fl_submit_device(s1, &di, nullptr), FL_OK);
  // Its release callback runs once the device-1 kernel completed, on the poller. (Had the
  // kernel completed first, this call, the last reference, would run it on this thread.)
  fl_object_release(o);
  g_go = true;
  ASSERT_EQ(fl_engine_synchronize(e), FL_OK) << fl_last_error_message();
  EXPECT_EQ(x.load(), 2);
  EXPECT_EQ(seen.release_device.load(), 1) << "a release callback of device-1 work saw another device current";
  EXPECT_EQ(seen.cleanup_device.load(), 1) << "a cleanup of device-1 work saw another device current";
  fl_engine_destroy(e);
}

}  // namespace
