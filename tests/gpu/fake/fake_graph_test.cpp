// Capture and replay of device work against the fake CUDA runtime (fake_cudart.cpp with
// fake_graph.cpp): kernels, copies and memsets become CUDA graphs, one cudaGraphLaunch per
// unit per launch; host instructions split device work into units and wait for it; device
// functions run at every launch; failures; launches on host and on CUDA streams. Runs with
// two fake devices (FAKE_CUDA_DEVICES=2). Says nothing about real GPUs.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fake_kernel.hpp"
#include "flowlane/flowlane.h"
#include "test_util.hpp"

extern "C" long fake_cudart_graph_launches();
extern "C" long fake_cudart_graph_nodes_launched();
extern "C" long fake_cudart_graphs_alive();
extern "C" void fake_cudart_fail_graph_launches(int n);
extern "C" long fake_cudart_last_graph_edges();
extern "C" void fake_cudart_reset_sticky();

namespace {

// x = x * a + b (order-sensitive: a wrong order gives another value).
int run_affine(const void* const* args) {
  long* x = *static_cast<long* const*>(args[0]);
  const long a = *static_cast<const long*>(args[1]);
  const long b = *static_cast<const long*>(args[2]);
  *x = *x * a + b;
  return 0;
}
const fake::Kernel kAffine{3, {sizeof(long*), sizeof(long), sizeof(long)}, &run_affine};

int run_fault(const void* const*) { return 1; }
const fake::Kernel kFault{0, {}, &run_fault};

constexpr fl_device_t kGpu0{FL_DEVICE_CUDA, 0};
constexpr fl_device_t kGpu1{FL_DEVICE_CUDA, 1};

struct Eng : EngineFixture {
  Eng() : EngineFixture(4, 8) {}
  fl_stream_t* s(uint32_t lane, fl_device_t dev, fl_stream_kind_t k) const {
    fl_stream_t* out = nullptr;
    EXPECT_EQ(fl_stream_get(engine, lane, dev, k, &out), FL_OK) << fl_last_error_message();
    return out;
  }
  fl_stream_t* gpu(uint32_t lane, fl_device_t dev = kGpu0) const { return s(lane, dev, FL_STREAM_COMPUTE); }
};

fl_status_t affine(fl_stream_t* s, long* x, long a, long b, std::vector<fl_operand_t> ops, const char* name = nullptr) {
  const void* args[3] = {&x, &a, &b};
  const uint64_t sizes[3] = {sizeof(long*), sizeof(long), sizeof(long)};
  fl_kernel_instr_t ki = FL_KERNEL_INSTR_INIT;
  ki.func = &kAffine;
  ki.args = args;
  ki.arg_sizes = sizes;
  ki.num_args = 3;
  ki.operands = ops.empty() ? nullptr : ops.data();
  ki.num_operands = ops.size();
  ki.name = name;
  return fl_submit_kernel(s, &ki, nullptr);
}

fl_program_t* end(fl_engine_t* e) {
  fl_program_t* p = nullptr;
  EXPECT_EQ(fl_capture_end(e, &p), FL_OK) << fl_last_error_message();
  return p;
}

fl_program_info_t info(fl_program_t* p) {
  fl_program_info_t in = FL_PROGRAM_INFO_INIT;
  EXPECT_EQ(fl_program_info(p, &in), FL_OK) << fl_last_error_message();
  return in;
}

fl_instr_id launch(fl_program_t* p, fl_stream_t* s) {
  fl_instr_id id = 0;
  EXPECT_EQ(fl_program_launch(p, s, 0, &id), FL_OK) << fl_last_error_message();
  return id;
}

TEST(FakeGraph, AKernelChainIsOneGraphLaunchedOncePerLaunch) {
  const long graphs_before = fake_cudart_graphs_alive();
  long x = 0;
  {
    Eng f;
    fl_object_t* X = fltest::make_obj(f.engine);
    ASSERT_FL_OK(fl_capture_begin(f.engine, nullptr));
    for (int k = 0; k < 100; ++k) ASSERT_FL_OK(affine(f.gpu(1), &x, 1, 1, {fltest::RW(X)}));
    fl_program_t* p = end(f.engine);
    EXPECT_EQ(x, 0) << "nothing runs while capturing";
    fl_program_info_t in = info(p);
    EXPECT_EQ(in.instructions, 100u);
    EXPECT_EQ(in.host_instructions, 0u);
    EXPECT_EQ(in.device_graphs, 1u);
    EXPECT_EQ(fake_cudart_last_graph_edges(), 99) << "stream order: one edge per kernel after the first";
    EXPECT_EQ(fake_cudart_graphs_alive(), graphs_before + 2) << "the graph and its instance";
    const long launches = fake_cudart_graph_launches(), nodes = fake_cudart_graph_nodes_launched();
    for (int l = 0; l < 3; ++l) launch(p, f.host(0));  // on a host stream: the program's own CUDA stream
    ASSERT_FL_OK(fl_engine_synchronize(f.engine));
    EXPECT_EQ(x, 300);
    EXPECT_EQ(fake_cudart_graph_launches() - launches, 3);
    EXPECT_EQ(fake_cudart_graph_nodes_launched() - nodes, 300);
    // A program with device work only may be launched on a CUDA stream of its device.
    for (int l = 0; l < 2; ++l) launch(p, f.gpu(2));
    ASSERT_FL_OK(fl_object_wait(X, FL_READ));
    EXPECT_EQ(x, 500);
    EXPECT_EQ(fake_cudart_graph_launches() - launches, 5);
    ASSERT_FL_OK(fl_program_destroy(p));
    EXPECT_EQ(fake_cudart_graphs_alive(), graphs_before);
    ASSERT_FL_OK(fl_object_release(X));
  }
}

TEST(FakeGraph, CrossStreamEdgesKeepTheEagerOrder) {
  long eager = 1, replayed = 1;
  Eng f;
  fl_object_t* X = fltest::make_obj(f.engine);
  for (int k = 0; k < 40; ++k) ASSERT_FL_OK(affine(f.gpu(1 + k % 2), &eager, 3, k, {fltest::RW(X)}));
  ASSERT_FL_OK(fl_object_wait(X, FL_READ));
  ASSERT_FL_OK(fl_capture_begin(f.engine, nullptr));
  for (int k = 0; k < 40; ++k) ASSERT_FL_OK(affine(f.gpu(1 + k % 2), &replayed, 3, k, {fltest::RW(X)}));
  fl_program_t* p = end(f.engine);
  EXPECT_EQ(info(p).device_graphs, 1u) << "two streams, one graph, the cross-stream edges inside";
  launch(p, f.host(0));
  ASSERT_FL_OK(fl_object_wait(X, FL_READ));
  EXPECT_EQ(replayed, eager);
  ASSERT_FL_OK(fl_program_destroy(p));
  ASSERT_FL_OK(fl_object_release(X));
}

TEST(FakeGraph, HostInstructionsSplitDeviceWorkAndWaitForIt) {
  Eng f;
  fl_object_t* X = fltest::make_obj(f.engine);
  long x = 0;
  std::vector<long> seen;
  ASSERT_FL_OK(fl_capture_begin(f.engine, nullptr));
  ASSERT_FL_OK(affine(f.gpu(1), &x, 1, 1, {fltest::RW(X)}));  // x += 1
  fltest::submit(f.host(2), [&] {
    seen.push_back(x);  // reads the device result: waits for the first graph
    return FL_OK;
  }, {fltest::R(X)});
  ASSERT_FL_OK(affine(f.gpu(1), &x, 10, 0, {fltest::RW(X)}));  // x *= 10, after the host read
  fl_program_t* p = end(f.engine);
  EXPECT_EQ(info(p).device_graphs, 2u) << "the host instruction separates the two kernels";
  launch(p, f.host(0));
  launch(p, f.host(3));
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(seen, (std::vector<long>{1, 11}));
  EXPECT_EQ(x, 110);
  ASSERT_FL_OK(fl_program_destroy(p));
  ASSERT_FL_OK(fl_object_release(X));
}

TEST(FakeGraph, CopiesAndMemsetsAreGraphNodes) {
  Eng f;
  void* pinned = nullptr;
  ASSERT_FL_OK(fl_host_alloc_pinned(64, &pinned));
  std::vector<unsigned char> dev(64, 0), dev2(64, 0);  // the fake takes unknown memory for device memory
  fl_object_t* A = fltest::make_obj(f.engine);
  fl_object_t* B = fltest::make_obj(f.engine);
  fl_object_t* H = fltest::make_obj(f.engine);
  auto copy = [&](uint32_t kind, void* dst, const void* src, uint64_t bytes, uint32_t value,
                  std::vector<fl_operand_t> ops) {
    fl_memcpy_instr_t mi = FL_MEMCPY_INSTR_INIT;
    mi.kind = kind;
    mi.value = value;
    mi.dst = dst;
    mi.src = src;
    mi.bytes = bytes;
    mi.operands = ops.data();
    mi.num_operands = ops.size();
    return fl_submit_memcpy(f.s(1, kGpu0, FL_STREAM_COMPUTE), &mi, nullptr);
  };
  ASSERT_FL_OK(fl_capture_begin(f.engine, nullptr));
  ASSERT_FL_OK(copy(FL_MEMSET, dev.data(), nullptr, 64, 7, {fltest::W(A)}));
  ASSERT_FL_OK(copy(FL_MEMSET, dev.data(), nullptr, 0, 9, {fltest::W(A)}));  // 0 bytes: an empty node
  ASSERT_FL_OK(copy(FL_MEMCPY_D2D, dev2.data(), dev.data(), 64, 0, {fltest::R(A), fltest::W(B)}));
  ASSERT_FL_OK(copy(FL_MEMCPY_D2H, pinned, dev2.data(), 64, 0, {fltest::R(B), fltest::W(H)}));
  fl_program_t* p = end(f.engine);
  EXPECT_EQ(info(p).device_graphs, 1u);
  launch(p, f.host(0));
  ASSERT_FL_OK(fl_object_wait(H, FL_READ));
  for (int k = 0; k < 64; ++k) ASSERT_EQ(static_cast<unsigned char*>(pinned)[k], 7) << k;
  ASSERT_FL_OK(fl_program_destroy(p));
  for (fl_object_t* o : {A, B, H}) ASSERT_FL_OK(fl_object_release(o));
  ASSERT_FL_OK(fl_host_free_pinned(pinned));
}

struct DevFn {
  long* x;
  std::atomic<int> calls{0};
  std::atomic<int> cleanups{0};
};

TEST(FakeGraph, DeviceFunctionsRunAtEveryLaunchOnTheProgramsStream) {
  Eng f;
  fl_object_t* X = fltest::make_obj(f.engine);
  long x = 0;
  DevFn fn{&x};
  ASSERT_FL_OK(fl_capture_begin(f.engine, nullptr));
  ASSERT_FL_OK(affine(f.gpu(1), &x, 1, 1, {fltest::RW(X)}));  // x += 1
  fl_device_instr_t di = FL_DEVICE_INSTR_INIT;
  di.fn = [](fl_instr_ctx_t* ctx, void* cuda_stream, void* ud) -> fl_status_t {
    auto* d = static_cast<DevFn*>(ud);
    d->calls.fetch_add(1);
    if (fl_instr_get_lane(ctx) != 1) return FL_ERR_INSTRUCTION_FAILED;  // its context works
    long a = 2, b = 0;
    void* args[3] = {&d->x, &a, &b};
    return cudaLaunchKernel(&kAffine, dim3(1), dim3(1), args, 0, static_cast<cudaStream_t>(cuda_stream)) ==
                   cudaSuccess
               ? FL_OK
               : FL_ERR_CUDA;  // x *= 2, enqueued on the stream it is given
  };
  di.cleanup = [](void* ud) { static_cast<DevFn*>(ud)->cleanups.fetch_add(1); };
  di.user_data = &fn;
  fl_operand_t rw = fltest::RW(X);
  di.operands = &rw;
  di.num_operands = 1;
  ASSERT_FL_OK(fl_submit_device(f.gpu(1), &di, nullptr));
  ASSERT_FL_OK(affine(f.gpu(1), &x, 1, 5, {fltest::RW(X)}));  // x += 5
  fl_program_t* p = end(f.engine);
  EXPECT_EQ(fn.calls.load(), 0);
  EXPECT_EQ(info(p).device_graphs, 2u) << "the device function separates two graphs";
  launch(p, f.host(0));
  ASSERT_FL_OK(fl_object_wait(X, FL_READ));
  EXPECT_EQ(x, 7);
  launch(p, f.gpu(3));  // on a CUDA stream: every unit in order on that stream
  ASSERT_FL_OK(fl_object_wait(X, FL_READ));
  EXPECT_EQ(x, 21);
  EXPECT_EQ(fn.calls.load(), 2);
  EXPECT_EQ(fn.cleanups.load(), 0);
  ASSERT_FL_OK(fl_program_destroy(p));
  EXPECT_EQ(fn.cleanups.load(), 1);
  ASSERT_FL_OK(fl_object_release(X));
}

TEST(FakeGraph, AFailedGraphLaunchFailsTheLaunchAndSkipsItsReaders) {
  Eng f;
  fl_object_t* X = fltest::make_obj(f.engine);
  long x = 0;
  std::atomic<int> read{0};
  ASSERT_FL_OK(fl_capture_begin(f.engine, nullptr));
  ASSERT_FL_OK(affine(f.gpu(1), &x, 1, 1, {fltest::W(X)}, "writer"));
  fltest::submit(f.host(2), [&] {
    read.fetch_add(1);
    return FL_OK;
  }, {fltest::R(X)}, "reader");
  fl_program_t* p = end(f.engine);
  fake_cudart_fail_graph_launches(1);
  fl_instr_id id = launch(p, f.host(0));
  fl_status_t st = fl_instr_wait_for(f.host(0), id, FL_WAIT_FOREVER);
  std::string msg = fl_last_error_message();
  EXPECT_EQ(st, FL_ERR_CUDA) << msg;
  EXPECT_NE(msg.find("inner instruction 'writer'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cudaGraphLaunch"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1 inner instruction was skipped"), std::string::npos) << msg;
  EXPECT_EQ(read.load(), 0);
  // The next launch writes X afresh (write-only) and runs whole.
  id = launch(p, f.host(0));
  EXPECT_FL_OK(fl_instr_wait_for(f.host(0), id, FL_WAIT_FOREVER));
  EXPECT_EQ(read.load(), 1);
  EXPECT_EQ(x, 1);
  ASSERT_FL_OK(fl_program_destroy(p));
  ASSERT_FL_OK(fl_object_release(X));
}

TEST(FakeGraph, AnInputPoisonedBeforeTheLaunchSkipsTheWholeGraph) {
  Eng f;
  fl_object_t* A = fltest::make_obj(f.engine);
  fl_object_t* X = fltest::make_obj(f.engine);
  fl_object_t* Y = fltest::make_obj(f.engine);
  long x = 0, y = 0;
  ASSERT_FL_OK(fl_capture_begin(f.engine, nullptr));
  ASSERT_FL_OK(affine(f.gpu(1), &x, 1, 1, {fltest::R(A), fltest::W(X)}));
  ASSERT_FL_OK(affine(f.gpu(2), &y, 1, 1, {fltest::W(Y)}));  // independent, but in the same graph
  fl_program_t* p = end(f.engine);
  fltest::submit(f.host(3), [] { return FL_ERR_INSTRUCTION_FAILED; }, {fltest::W(A)}, "poisoner");
  fl_instr_id id = launch(p, f.host(0));
  EXPECT_FL_ERR(fl_instr_wait_for(f.host(0), id, FL_WAIT_FOREVER), FL_ERR_DEPENDENCY_FAILED, "poisoner");
  EXPECT_EQ(x, 0);
  EXPECT_EQ(y, 0) << "a graph runs whole or not at all";
  EXPECT_FL_OK(fl_engine_synchronize(f.engine));
  ASSERT_FL_OK(fl_program_destroy(p));
  for (fl_object_t* o : {A, X, Y}) ASSERT_FL_OK(fl_object_release(o));
}

TEST(FakeGraph, RefusalsOfDevicePrograms) {
  Eng f;
  long x = 0;
  fl_object_t* X = fltest::make_obj(f.engine);
  ASSERT_FL_OK(fl_capture_begin(f.engine, nullptr));
  ASSERT_FL_OK(affine(f.gpu(1), &x, 1, 1, {fltest::RW(X)}));
  EXPECT_FL_ERR(affine(f.gpu(2, kGpu1), &x, 1, 1, {fltest::RW(X)}), FL_ERR_UNSUPPORTED, "one device");
  fl_program_t* device_only = end(f.engine);
  EXPECT_EQ(info(device_only).instructions, 1u) << "the refused submission left the capture as it was";
  EXPECT_FL_ERR(fl_program_launch(device_only, f.gpu(2, kGpu1), 0, nullptr), FL_ERR_INVALID_ARGUMENT, "device 1");
  EXPECT_FL_ERR(fl_program_launch(device_only, f.gpu(2), FL_SUBMIT_INLINE, nullptr), FL_ERR_INVALID_ARGUMENT,
                "FL_SUBMIT_INLINE");
  ASSERT_FL_OK(fl_capture_begin(f.engine, nullptr));
  ASSERT_FL_OK(affine(f.gpu(1), &x, 1, 1, {fltest::RW(X)}));
  fltest::submit(f.host(1), [] { return FL_OK; });
  fl_program_t* mixed = end(f.engine);
  EXPECT_FL_ERR(fl_program_launch(mixed, f.gpu(2), 0, nullptr), FL_ERR_INVALID_ARGUMENT, "host instructions");
  ASSERT_FL_OK(fl_capture_begin(f.engine, nullptr));
  fl_program_t* empty = end(f.engine);
  EXPECT_FL_ERR(fl_program_launch(empty, f.gpu(2), 0, nullptr), FL_ERR_INVALID_ARGUMENT, "no device work");
  launch(device_only, f.host(0));
  launch(mixed, f.host(0));
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(x, 2);
  for (fl_program_t* p : {device_only, mixed, empty}) ASSERT_FL_OK(fl_program_destroy(p));
  ASSERT_FL_OK(fl_object_release(X));
}

TEST(FakeGraph, LaunchesAmongEagerDeviceWorkFromOtherThreadsAreSerializable) {
  Eng f;
  fl_object_t* X = fltest::make_obj(f.engine);
  long x = 0;
  ASSERT_FL_OK(fl_capture_begin(f.engine, nullptr));
  for (int k = 0; k < 3; ++k) ASSERT_FL_OK(affine(f.gpu(1), &x, 1, 1, {fltest::RW(X)}));
  fl_program_t* p = end(f.engine);
  const int rounds = int(fl_scaled(60, 20));
  std::thread launcher([&] {
    for (int r = 0; r < rounds; ++r) launch(p, f.host(uint32_t(r % 2)));
  });
  std::thread eager([&] {
    for (int r = 0; r < rounds; ++r) EXPECT_FL_OK(affine(f.gpu(2), &x, 1, 1000, {fltest::RW(X)}));
  });
  launcher.join();
  eager.join();
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(x, long(rounds) * 3 + long(rounds) * 1000);
  ASSERT_FL_OK(fl_program_destroy(p));
  ASSERT_FL_OK(fl_object_release(X));
}

// Last: a fault breaks the (fake) CUDA context until the test resets it.
TEST(FakeGraph, AnAsynchronousFaultInAGraphFailsTheLaunch) {
  {
    Eng f;
    fl_object_t* X = fltest::make_obj(f.engine);
    std::atomic<int> read{0};
    ASSERT_FL_OK(fl_capture_begin(f.engine, nullptr));
    fl_kernel_instr_t ki = FL_KERNEL_INSTR_INIT;
    ki.func = &kFault;
    fl_operand_t w = fltest::W(X);
    ki.operands = &w;
    ki.num_operands = 1;
    ki.name = "faulty";
    ASSERT_FL_OK(fl_submit_kernel(f.gpu(1), &ki, nullptr));
    fltest::submit(f.host(2), [&] {
      read.fetch_add(1);
      return FL_OK;
    }, {fltest::R(X)});
    fl_program_t* p = end(f.engine);
    fl_instr_id id = launch(p, f.host(0));
    EXPECT_FL_ERR(fl_instr_wait_for(f.host(0), id, FL_WAIT_FOREVER), FL_ERR_CUDA, "inner instruction 'faulty'");
    EXPECT_EQ(read.load(), 0);
    ASSERT_FL_OK(fl_program_destroy(p));
    ASSERT_FL_OK(fl_object_release(X));
    fake_cudart_reset_sticky();
  }
}

}  // namespace
