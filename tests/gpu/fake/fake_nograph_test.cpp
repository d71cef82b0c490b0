// Capture against a fake CUDA runtime without the graph calls (fake_cudart.cpp alone):
// device work is refused with FL_ERR_UNSUPPORTED naming what is missing; host work is
// captured and replayed as ever, and eager device work runs.
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "fake_kernel.hpp"
#include "flowlane/flowlane.h"
#include "test_util.hpp"

// A use of the fake, so that the linker keeps it (libflowlane finds the CUDA runtime the
// process already has: this fake).
extern "C" long fake_cudart_events_created();

namespace {

int run_inc(const void* const* a) {
  ++**static_cast<long* const*>(a[0]);
  return 0;
}
const fake::Kernel kInc{1, {sizeof(long*)}, &run_inc};

TEST(FakeNoGraph, DeviceWorkIsRefusedNamingTheMissingCallAndHostWorkIsCaptured) {
  ASSERT_GE(fake_cudart_events_created(), 0);
  EngineFixture f(2, 4);
  fl_stream_t* gpu = nullptr;
  ASSERT_FL_OK(fl_stream_get(f.engine, 1, fl_device_t{FL_DEVICE_CUDA, 0}, FL_STREAM_COMPUTE, &gpu));
  long x = 0;
  long* px = &x;
  const void* args[1] = {&px};
  const uint64_t sizes[1] = {sizeof(long*)};
  fl_kernel_instr_t ki = FL_KERNEL_INSTR_INIT;
  ki.func = &kInc;
  ki.args = args;
  ki.arg_sizes = sizes;
  ki.num_args = 1;
  std::atomic<int> ran{0};
  ASSERT_FL_OK(fl_capture_begin(f.engine, nullptr));
  EXPECT_FL_ERR(fl_submit_kernel(gpu, &ki, nullptr), FL_ERR_UNSUPPORTED, "cudaGraphCreate");
  fltest::submit(f.host(2), [&ran] {
    ran.fetch_add(1);
    return FL_OK;
  });
  fl_program_t* p = nullptr;
  ASSERT_FL_OK(fl_capture_end(f.engine, &p));
  ASSERT_FL_OK(fl_program_launch(p, f.host(0), 0, nullptr));
  ASSERT_FL_OK(fl_submit_kernel(gpu, &ki, nullptr));  // eager device work is unaffected
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(x, 1);
  ASSERT_FL_OK(fl_program_destroy(p));
}

}  // namespace
