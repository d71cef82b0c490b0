// GPU backend tests (gpu/README.md). Every test that needs a device skips cleanly when
// cudaGetDeviceCount finds none (build machines and CI have the toolkit but no GPU).
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.hpp"

namespace {

using namespace fltest;

// Each ncclGetUniqueId starts a bootstrap thread that lives until a communicator uses the
// id: the id REQUIRE_NCCL made to probe for NCCL is kept for the next communicator.
bool g_spare_id_set = false;
fl_comm_unique_id_t g_spare_id;

fl_comm_unique_id_t take_id() {
  fl_comm_unique_id_t id;
  if (g_spare_id_set) {
    g_spare_id_set = false;
    return g_spare_id;
  }
  EXPECT_EQ(fl_comm_get_unique_id(FL_COMM_NCCL, &id), FL_OK) << fl_last_error_message();
  return id;
}

#define REQUIRE_NCCL()                                                                          \
  do {                                                                                          \
    REQUIRE_GPU();                                                                              \
    if (!g_spare_id_set) {                                                                      \
      if (fl_comm_get_unique_id(FL_COMM_NCCL, &g_spare_id) == FL_ERR_UNSUPPORTED) {            \
        if (gpu_required()) FAIL() << "NCCL unavailable: " << fl_last_error_message();         \
        GTEST_SKIP() << "built without NCCL: " << fl_last_error_message();                      \
      }                                                                                         \
      g_spare_id_set = true;                                                                    \
    }                                                                                           \
  } while (0)

// ---------------------------------------------------------------------------------------
// Without a device (these run everywhere in a CUDA build).

TEST(GpuNoDevice, DeviceCountAndStreamsAgreeWithCuda) {
  int32_t n = -1;
  ASSERT_FL_OK(fl_cuda_device_count(&n));
  EXPECT_EQ(n, visible_devices());
  Engine eng;
  fl_stream_t* s = nullptr;
  EXPECT_FL_ERR(fl_stream_get(eng.e, 0, fl_device_t{FL_DEVICE_CUDA, n}, FL_STREAM_COMPUTE, &s), FL_ERR_NO_DEVICE,
                "does not exist");
  EXPECT_EQ(s, nullptr);
  int32_t least = 0, greatest = 0;
  EXPECT_FL_ERR(fl_cuda_priority_range(n, &least, &greatest), FL_ERR_NO_DEVICE, "does not exist");
}

// ---------------------------------------------------------------------------------------

TEST(Gpu, KernelsWriteWhatTheyShould) {
  REQUIRE_GPU();
  Engine eng;
  constexpr int n = 1000;
  DevBuf buf(n);
  PinnedBuf host(n);  // pageable memory is refused for copies
  fl_object_t* obj = eng.object();
  fl_object_t* hobj = eng.object();
  fl_stream_t* s = eng.stream(1, kGpu0, FL_STREAM_COMPUTE);
  int* p = buf.p;
  int value = 7;
  int count = n;
  ASSERT_FL_OK(Kernel(fltest::fill_kernel(), "fill", (n + 127) / 128, 128).arg(p).arg(value).arg(count)
                   .op(obj, FL_WRITE).submit(s));
  value = 1000;  // the argument bytes were copied at submit: this must not matter
  int inc = 5;
  ASSERT_FL_OK(Kernel(fltest::add_kernel(), "add", (n + 127) / 128, 128).arg(p).arg(inc).arg(count)
                   .op(obj, FL_READ_WRITE).submit(s));
  fl_stream_t* d2h = eng.stream(1, kGpu0, FL_STREAM_D2H);
  ASSERT_FL_OK(memcpy_instr(d2h, FL_MEMCPY_D2H, host.p, p, n * sizeof(int),
                            {{obj, FL_READ, 0}, {hobj, FL_WRITE, 0}}, "d2h"));
  ASSERT_FL_OK(fl_object_wait(hobj, FL_READ));
  for (int k = 0; k < n; ++k) ASSERT_EQ(host.p[k], 12) << "at " << k;
  ASSERT_FL_OK(fl_engine_synchronize(eng.e));
  fl_object_release(obj);
  fl_object_release(hobj);
}

TEST(Gpu, MemsetAndDeviceFunctionRunTheirCleanupAfterTheGpuWork) {
  REQUIRE_GPU();
  Engine eng;
  constexpr int n = 256;
  DevBuf buf(n);
  std::vector<int> host(n, 0);
  fl_object_t* obj = eng.object();
  fl_stream_t* s = eng.stream(2, kGpu0, FL_STREAM_COMPUTE);
  fl_memcpy_instr_t m = FL_MEMCPY_INSTR_INIT;
  m.kind = FL_MEMSET;
  m.value = 0x01;
  m.dst = buf.p;
  m.bytes = n * sizeof(int);
  fl_operand_t w{obj, FL_WRITE, 0};
  m.operands = &w;
  m.num_operands = 1;
  ASSERT_FL_OK(fl_submit_memcpy(s, &m, nullptr));

  struct Ctx {
    int* dev;
    int* host;
    std::atomic<int> cleanups{0};
    std::atomic<int> seen{0};
  } ctx{buf.p, host.data()};
  fl_device_instr_t d = FL_DEVICE_INSTR_INIT;
  d.fn = [](fl_instr_ctx_t*, void* stream, void* u) -> fl_status_t {
    auto* c = static_cast<Ctx*>(u);
    return cudaMemcpyAsync(c->host, c->dev, n * sizeof(int), cudaMemcpyDeviceToHost,
                           static_cast<cudaStream_t>(stream)) == cudaSuccess
               ? FL_OK
               : FL_ERR_CUDA;
  };
  d.cleanup = [](void* u) {
    auto* c = static_cast<Ctx*>(u);
    c->seen.store(c->host[n - 1], std::memory_order_relaxed);  // the copy has completed
    c->cleanups.fetch_add(1);
  };
  d.user_data = &ctx;
  fl_operand_t r{obj, FL_READ, 0};
  d.operands = &r;
  d.num_operands = 1;
  d.name = "d2h-by-device-fn";
  ASSERT_FL_OK(fl_submit_device(s, &d, nullptr));
  ASSERT_FL_OK(fl_engine_synchronize(eng.e));
  EXPECT_EQ(ctx.cleanups.load(), 1);
  EXPECT_EQ(ctx.seen.load(), 0x01010101);
  fl_object_release(obj);
}

// P (lane 1) spins on a device flag that only Q sets; S (lane 2, another stream) reads
// P's output; Q is queued on lane 2 *behind* S, on a third CUDA stream. If S's launch
// waited on the host for P's completion, lane 2 would never reach Q: P would time out.
TEST(Gpu, CrossStreamChainNeverWaitsOnTheHost) {
  REQUIRE_GPU();
  Engine eng;
  DevBuf flag(1), x(1), out(1);
  ASSERT_EQ(cudaMemset(flag.p, 0, sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMemset(out.p, 0, sizeof(int)), cudaSuccess);
  // cudaMemset runs on the legacy stream, which the engine's non-blocking streams do not
  // wait for.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  fl_object_t* ox = eng.object();
  fl_object_t* oout = eng.object();
  fl_object_t* oflag = eng.object();
  int* fp = flag.p;
  int* xp = x.p;
  int* op = out.p;
  int forty_two = 42;
  unsigned long long timeout = 5'000'000'000ull;  // 5 s
  ASSERT_FL_OK(Kernel(fltest::wait_flag_then_write_kernel(), "P").arg(fp).arg(xp).arg(forty_two).arg(timeout)
                   .op(ox, FL_WRITE).submit(eng.stream(1, kGpu0, FL_STREAM_COMPUTE)));
  int one = 1;
  ASSERT_FL_OK(Kernel(fltest::copy_kernel(), "S").arg(op).arg(xp).arg(one)
                   .op(ox, FL_READ).op(oout, FL_WRITE).submit(eng.stream(2, kGpu0, FL_STREAM_COMPUTE)));
  ASSERT_FL_OK(Kernel(fltest::set_flag_kernel(), "Q").arg(fp).op(oflag, FL_WRITE)
                   .submit(eng.stream(2, kGpu0, FL_STREAM_H2D)));
  ASSERT_FL_OK(fl_object_wait(oout, FL_READ));
  int result = 0;
  ASSERT_EQ(cudaMemcpy(&result, out.p, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(result, 42) << "-1 means P timed out: S's launch waited for P on the host";
  ASSERT_FL_OK(fl_engine_synchronize(eng.e));
  fl_object_release(ox);
  fl_object_release(oout);
  fl_object_release(oflag);
}

TEST(Gpu, DeviceToHostThenHostInstructionReads) {
  REQUIRE_GPU();
  Engine eng;
  constexpr int n = 4096;
  DevBuf buf(n);
  int* pinned = nullptr;
  ASSERT_FL_OK(fl_host_alloc_pinned(n * sizeof(int), reinterpret_cast<void**>(&pinned)));
  std::memset(pinned, 0, n * sizeof(int));
  fl_object_t* dev = eng.object();
  fl_object_t* hst = eng.object();
  int* p = buf.p;
  int v = 3, count = n;
  ASSERT_FL_OK(Kernel(fltest::fill_kernel(), "fill", n / 256, 256).arg(p).arg(v).arg(count).op(dev, FL_WRITE)
                   .submit(eng.stream(1, kGpu0, FL_STREAM_COMPUTE)));
  ASSERT_FL_OK(memcpy_instr(eng.stream(1, kGpu0, FL_STREAM_D2H), FL_MEMCPY_D2H, pinned, p, n * sizeof(int),
                            {{dev, FL_READ, 0}, {hst, FL_WRITE, 0}}, "d2h"));
  struct Sum {
    const int* h;
    long total = -1;
  } sum{pinned};
  fl_host_instr_t h = FL_HOST_INSTR_INIT;
  h.fn = [](fl_instr_ctx_t*, void* u) -> fl_status_t {
    auto* s = static_cast<Sum*>(u);
    long t = 0;
    for (int k = 0; k < n; ++k) t += s->h[k];
    s->total = t;
    return FL_OK;
  };
  h.user_data = &sum;
  fl_operand_t r{hst, FL_READ, 0};
  h.operands = &r;
  h.num_operands = 1;
  // The same lane as the GPU work: a host successor of a same-lane device instruction
  // still waits for its GPU completion.
  ASSERT_FL_OK(fl_submit_host(eng.stream(1, kCpu, FL_STREAM_HOST), &h, nullptr));
  ASSERT_FL_OK(fl_engine_synchronize(eng.e));
  EXPECT_EQ(sum.total, 3L * n);
  fl_object_release(dev);
  fl_object_release(hst);
  ASSERT_FL_OK(fl_host_free_pinned(pinned));
}

TEST(Gpu, ObjectIsReleasedOnlyAfterTheGpuUsedIt) {
  REQUIRE_GPU();
  Engine eng;
  int* flag = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&flag), sizeof(int), cudaHostAllocMapped), cudaSuccess);
  *flag = 0;
  int* dflag = nullptr;
  ASSERT_EQ(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dflag), flag, 0), cudaSuccess);
  struct Rel {
    volatile int* flag;
    std::atomic<int> calls{0};
    std::atomic<int> seen{-1};
  } rel{flag};
  fl_object_t* o = eng.object(&rel, [](void* u) {
    auto* r = static_cast<Rel*>(u);
    r->seen.store(*r->flag);
    r->calls.fetch_add(1);
  });
  unsigned long long ns = 50'000'000ull;  // 50 ms of GPU time
  ASSERT_FL_OK(Kernel(fltest::sleep_then_set_kernel(), "slow-user").arg(dflag).arg(ns).op(o, FL_READ_WRITE)
                   .submit(eng.stream(1, kGpu0, FL_STREAM_COMPUTE)));
  ASSERT_FL_OK(fl_object_release(o));  // the caller's reference goes while the GPU still uses it
  ASSERT_FL_OK(fl_engine_synchronize(eng.e));
  EXPECT_EQ(rel.calls.load(), 1);
  EXPECT_EQ(rel.seen.load(), 1) << "release ran before the kernel using the object completed";
  cudaFreeHost(flag);
}

TEST(Gpu, BadLaunchConfigurationFailsTheInstructionByName) {
  REQUIRE_GPU();
  Engine eng;
  DevBuf buf(1);
  fl_object_t* o = eng.object();
  int* p = buf.p;
  int v = 1, count = 1;
  Kernel bad(fltest::fill_kernel(), "too-many-threads", 1, 1);
  bad.k.block = {4096, 1, 1};  // over the 1024 threads per block limit
  ASSERT_FL_OK(bad.arg(p).arg(v).arg(count).op(o, FL_WRITE).submit(eng.stream(1, kGpu0, FL_STREAM_COMPUTE)));
  std::atomic<int> ran{0};
  fl_host_instr_t h = FL_HOST_INSTR_INIT;
  h.fn = [](fl_instr_ctx_t*, void* u) -> fl_status_t {
    static_cast<std::atomic<int>*>(u)->fetch_add(1);
    return FL_OK;
  };
  h.user_data = &ran;
  fl_operand_t r{o, FL_READ, 0};
  h.operands = &r;
  h.num_operands = 1;
  ASSERT_FL_OK(fl_submit_host(eng.stream(2, kCpu, FL_STREAM_HOST), &h, nullptr));
  EXPECT_FL_ERR(fl_engine_synchronize(eng.e), FL_ERR_CUDA, "too-many-threads");
  EXPECT_EQ(ran.load(), 0) << "a reader of a poisoned object must be skipped";
  EXPECT_FL_ERR(fl_object_wait(o, FL_READ), FL_ERR_CUDA, "cudaLaunchKernel");
  // The engine keeps working after a launch error (it is not sticky). (The skipped host
  // reader is still in the engine's failure ledger: only this stream is synchronized.)
  fl_stream_t* s = eng.stream(1, kGpu0, FL_STREAM_COMPUTE);
  ASSERT_FL_OK(Kernel(fltest::fill_kernel(), "ok").arg(p).arg(v).arg(count).submit(s));
  ASSERT_FL_OK(fl_stream_synchronize(s));
  fl_object_release(o);
}

// Run in a child process: an illegal address corrupts the CUDA context for good.
TEST(GpuChild, IllegalAddressFailsWithCudaError) {
  if (std::getenv("FL_GPU_CHILD") == nullptr) GTEST_SKIP() << "runs only as the child of IllegalAddressInAChild";
  REQUIRE_GPU();
  int code = 10;
  {
    Engine eng;
    fl_object_t* o = eng.object();
    int* fine = nullptr;  // allocated before the fault: nothing can be allocated after it
    if (cudaMalloc(&fine, sizeof(int)) != cudaSuccess) std::_Exit(13);
    int* bad = reinterpret_cast<int*>(uintptr_t(0x10));
    if (Kernel(fltest::write_to_kernel(), "wild-write").arg(bad).op(o, FL_WRITE)
            .submit(eng.stream(1, kGpu0, FL_STREAM_COMPUTE)) == FL_OK) {
      fl_status_t st = fl_engine_synchronize(eng.e);
      std::string msg = fl_last_error_message();
      std::fprintf(stderr, "child: %s: %s\n", fl_status_name(st), msg.c_str());
      code = (st == FL_ERR_CUDA && msg.find("wild-write") != std::string::npos) ? 0 : 11;
      // A later launch (of a kernel that would be fine) fails on the broken context and names
      // the instruction that broke it.
      if (code == 0) {
        fl_status_t st2 = Kernel(fltest::write_to_kernel(), "after-the-fault").arg(fine)
                              .submit(eng.stream(1, kGpu0, FL_STREAM_COMPUTE));
        if (st2 == FL_OK) st2 = fl_engine_synchronize(eng.e);
        std::string msg2 = fl_last_error_message();
        std::fprintf(stderr, "child, later: %s: %s\n", fl_status_name(st2), msg2.c_str());
        if (st2 == FL_OK || msg2.find("earlier fault") == std::string::npos ||
            msg2.find("wild-write") == std::string::npos)
          code = 12;
      }
    }
    std::fflush(stderr);
  }
  std::_Exit(code);  // after the engine's destroy (which must not hang on a dead context)
}

TEST(Gpu, IllegalAddressInAChild) {
  REQUIRE_GPU();
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv("FL_GPU_CHILD", "1", 1);
    execl("/proc/self/exe", "flowlane_gpu_tests", "--gtest_filter=GpuChild.IllegalAddressFailsWithCudaError",
          static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child died by a signal";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: not submitted, 11: wrong status or message, 12: a later failure does "
                                       "not name the faulting instruction, 13: cudaMalloc failed (see the child's stderr)";
}

// print(loss) must not wait for backward: waiting for the loss copy returns while a long
// kernel on another lane (that the loss does not depend on) is still running.
TEST(Gpu, WaitingForTheLossDoesNotWaitForBackward) {
  REQUIRE_GPU();
  Engine eng;
  int* done = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&done), sizeof(int), cudaHostAllocMapped), cudaSuccess);
  *done = 0;
  int* ddone = nullptr;
  ASSERT_EQ(cudaHostGetDevicePointer(reinterpret_cast<void**>(&ddone), done, 0), cudaSuccess);
  fl_object_t* grads = eng.object();
  fl_object_t* loss_dev = eng.object();
  fl_object_t* loss_host = eng.object();
  DevBuf loss(1);            // allocated before "backward" spins: an allocation may wait for it
  int* host_loss = nullptr;  // pinned: the copy is truly asynchronous
  ASSERT_FL_OK(fl_host_alloc_pinned(sizeof(int), reinterpret_cast<void**>(&host_loss)));
  *host_loss = 0;
  unsigned long long ns = 1'000'000'000ull;  // "backward": 1 s of GPU time
  ASSERT_FL_OK(Kernel(fltest::sleep_then_set_kernel(), "backward").arg(ddone).arg(ns).op(grads, FL_WRITE)
                   .submit(eng.stream(1, kGpu0, FL_STREAM_COMPUTE)));
  int* lp = loss.p;
  int v = 17, one = 1;
  ASSERT_FL_OK(Kernel(fltest::fill_kernel(), "loss").arg(lp).arg(v).arg(one).op(loss_dev, FL_WRITE)
                   .submit(eng.stream(2, kGpu0, FL_STREAM_COMPUTE)));
  ASSERT_FL_OK(memcpy_instr(eng.stream(2, kGpu0, FL_STREAM_D2H), FL_MEMCPY_D2H, host_loss, lp, sizeof(int),
                            {{loss_dev, FL_READ, 0}, {loss_host, FL_WRITE, 0}}, "loss-d2h"));
  ASSERT_FL_OK(fl_object_wait(loss_host, FL_READ));
  EXPECT_EQ(*host_loss, 17);
  EXPECT_EQ(*static_cast<volatile int*>(done), 0) << "the wait for the loss waited for backward";
  ASSERT_FL_OK(fl_engine_synchronize(eng.e));
  EXPECT_EQ(*static_cast<volatile int*>(done), 1);
  fl_object_release(grads);
  fl_object_release(loss_dev);
  fl_object_release(loss_host);
  cudaFreeHost(done);
  fl_host_free_pinned(host_loss);
}

TEST(Gpu, PriorityIsClampedAndRefusedAfterFirstUse) {
  REQUIRE_GPU();
  Engine eng;
  int32_t least = 0, greatest = 0;
  ASSERT_FL_OK(fl_cuda_priority_range(0, &least, &greatest));
  EXPECT_LE(greatest, least);
  fl_stream_t* s = eng.stream(3, kGpu0, FL_STREAM_COMPUTE);
  int32_t applied = 1;
  ASSERT_FL_OK(fl_stream_set_priority(s, -1000, &applied));
  EXPECT_EQ(applied, greatest);
  DevBuf buf(1);
  int* p = buf.p;
  int v = 1, one = 1;
  ASSERT_FL_OK(Kernel(fltest::fill_kernel(), "first").arg(p).arg(v).arg(one).submit(s));
  EXPECT_FL_ERR(fl_stream_set_priority(s, 0, nullptr), FL_ERR_INVALID_ARGUMENT, "before the first");
  ASSERT_FL_OK(fl_engine_synchronize(eng.e));
}

TEST(Gpu, ManyCrossStreamStepsAndEngineDestroyDrains) {
  REQUIRE_GPU();
  constexpr int kSteps = 2000;
  DevBuf buf(1);
  int result = 0;
  {
    Engine eng;
    fl_object_t* o = eng.object();
    int* p = buf.p;
    int zero = 0, one = 1;
    ASSERT_FL_OK(Kernel(fltest::fill_kernel(), "init").arg(p).arg(zero).arg(one).op(o, FL_WRITE)
                     .submit(eng.stream(1, kGpu0, FL_STREAM_COMPUTE)));
    for (int k = 0; k < kSteps; ++k) {
      uint32_t lane = 1 + uint32_t(k % 3);  // alternate lanes (and CUDA streams)
      ASSERT_FL_OK(Kernel(fltest::add_kernel(), "step").arg(p).arg(one).arg(one).op(o, FL_READ_WRITE)
                       .submit(eng.stream(lane, kGpu0, FL_STREAM_COMPUTE)));
    }
    fl_object_release(o);
  }  // destroy drains the GPU work
  ASSERT_EQ(cudaMemcpy(&result, buf.p, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(result, kSteps);
}

// ---------------------------------------------------------------------------------------
// The hardening of the backend, on a real device (each has a fake-runtime twin in
// tests/gpu/fake/fake_hardening_test.cpp).

// A mapped pinned int: the host reads what kernels write, kernels read what the host writes.
struct MappedInt {
  int* h = nullptr;
  int* d = nullptr;
  MappedInt() {
    EXPECT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&h), sizeof(int), cudaHostAllocMapped), cudaSuccess);
    if (h == nullptr) return;
    *h = 0;
    EXPECT_EQ(cudaHostGetDevicePointer(reinterpret_cast<void**>(&d), h, 0), cudaSuccess);
  }
  ~MappedInt() { cudaFreeHost(h); }
  int get() const { return *static_cast<volatile int*>(h); }
  void set(int v) { *static_cast<volatile int*>(h) = v; }
};

TEST(Gpu, PageableCopiesAreRefusedAtSubmit) {
  REQUIRE_GPU();
  Engine eng;
  constexpr int n = 64;
  DevBuf buf(n);
  std::vector<int> pageable(n, 5);
  const uint64_t bytes = n * sizeof(int);
  EXPECT_FL_ERR(memcpy_instr(eng.stream(1, kGpu0, FL_STREAM_H2D), FL_MEMCPY_H2D, buf.p, pageable.data(), bytes, {},
                             "h2d-pageable"),
                FL_ERR_INVALID_ARGUMENT, "fl_host_alloc_pinned");
  EXPECT_FL_ERR(memcpy_instr(eng.stream(1, kGpu0, FL_STREAM_D2H), FL_MEMCPY_D2H, pageable.data(), buf.p, bytes, {},
                             "d2h-pageable"),
                FL_ERR_INVALID_ARGUMENT, "cudaHostRegister");
  // The same memory once registered is accepted, and the copies arrive.
  ASSERT_EQ(cudaHostRegister(pageable.data(), bytes, cudaHostRegisterDefault), cudaSuccess);
  fl_object_t* o = eng.object();
  ASSERT_FL_OK(memcpy_instr(eng.stream(1, kGpu0, FL_STREAM_H2D), FL_MEMCPY_H2D, buf.p, pageable.data(), bytes,
                            {{o, FL_WRITE, 0}}, "h2d-registered"));
  ASSERT_FL_OK(fl_object_wait(o, FL_READ));
  std::vector<int> back(n, 0);
  ASSERT_EQ(cudaMemcpy(back.data(), buf.p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, pageable);
  ASSERT_FL_OK(fl_engine_synchronize(eng.e));
  fl_object_release(o);
  EXPECT_EQ(cudaHostUnregister(pageable.data()), cudaSuccess);
}

TEST(Gpu, KernelParametersUpTo32764BytesArriveIntact) {
  REQUIRE_GPU();
  Engine eng;
  constexpr int n = 8189;
  DevBuf out(n);
  auto big = std::make_unique<fltest::BigArg>();
  big->set_out(out.p);
  for (int k = 0; k < n; ++k) big->v[k] = k * 7 + 3;
  fl_object_t* o = eng.object();
  ASSERT_FL_OK(Kernel(fltest::echo_big_kernel(), "echo-32764", 1, 256).arg(*big).op(o, FL_WRITE)
                   .submit(eng.stream(1, kGpu0, FL_STREAM_COMPUTE)));
  std::memset(big->v, 0, sizeof(big->v));  // the bytes were copied at submit
  ASSERT_FL_OK(fl_object_wait(o, FL_READ));
  std::vector<int> back(n, -1);
  ASSERT_EQ(cudaMemcpy(back.data(), out.p, n * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  for (int k = 0; k < n; ++k) ASSERT_EQ(back[k], k * 7 + 3) << "at " << k;
  // One byte more is refused at submit, naming the limit.
  std::vector<unsigned char> extra(1, 0);
  Kernel over(fltest::echo_big_kernel(), "echo-32765", 1, 256);
  over.arg(*big);
  over.args.push_back(extra.data());
  over.sizes.push_back(1);
  EXPECT_FL_ERR(over.submit(eng.stream(1, kGpu0, FL_STREAM_COMPUTE)), FL_ERR_OUT_OF_RANGE, "32764");
  ASSERT_FL_OK(fl_engine_synchronize(eng.e));
  fl_object_release(o);
}

// A callback that leaves a (non-sticky) CUDA error on its worker thread, as a failed call of
// the user's would: the next launch on that thread must not be blamed for it.
TEST(Gpu, AStaleErrorOfTheWorkerThreadDoesNotFailTheNextLaunch) {
  REQUIRE_GPU();
  Engine eng(1);  // one worker: the callback and the launch run on the same thread
  DevBuf buf(1);
  fl_host_instr_t h = FL_HOST_INSTR_INIT;
  static std::atomic<int> left{-1};
  h.fn = [](fl_instr_ctx_t*, void*) -> fl_status_t {
    int n = 0;
    (void)cudaGetDeviceCount(&n);
    (void)cudaSetDevice(n + 7);  // cudaErrorInvalidDevice, left as the thread's last error
    left.store(int(cudaPeekAtLastError()));
    return FL_OK;
  };
  ASSERT_FL_OK(fl_submit_host(eng.stream(1, kCpu, FL_STREAM_HOST), &h, nullptr));
  int* p = buf.p;
  int v = 11, one = 1;
  ASSERT_FL_OK(Kernel(fltest::fill_kernel(), "innocent").arg(p).arg(v).arg(one)
                   .submit(eng.stream(1, kGpu0, FL_STREAM_COMPUTE)));
  EXPECT_FL_OK(fl_engine_synchronize(eng.e));
  int result = 0;
  ASSERT_EQ(cudaMemcpy(&result, buf.p, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(result, 11);
  EXPECT_NE(left.load(), int(cudaSuccess)) << "the callback left no error: the test proved nothing";
}

// P spins on the GPU until a host probe (queued on the same lane after a later instruction L
// of P's stream) releases it. L fails without running (skipped: its input is poisoned). The
// probe sees both P and L pending: L must not complete before P, the earlier work of its
// stream, and a synchronize must not return while P runs.
TEST(Gpu, ASkippedInstructionCompletesAfterTheEarlierWorkOfItsStream) {
  REQUIRE_GPU();
  Engine eng;
  MappedInt release_p;
  DevBuf out(1), buf(1);
  fl_object_t* bad = eng.object();
  fl_host_instr_t fail = FL_HOST_INSTR_INIT;
  fail.fn = [](fl_instr_ctx_t*, void*) -> fl_status_t { return FL_ERR_INSTRUCTION_FAILED; };
  fl_operand_t w{bad, FL_WRITE, 0};
  fail.operands = &w;
  fail.num_operands = 1;
  ASSERT_FL_OK(fl_submit_host(eng.stream(2, kCpu, FL_STREAM_HOST), &fail, nullptr));
  (void)fl_engine_synchronize(eng.e);  // the failure is recorded (and returned here)
  fl_stream_t* s = eng.stream(1, kGpu0, FL_STREAM_COMPUTE);
  int* flag = release_p.d;
  int* op = out.p;
  int seven = 7;
  unsigned long long timeout = 10'000'000'000ull;  // 10 s
  fl_instr_id p_id = 0, l_id = 0;
  ASSERT_FL_OK(Kernel(fltest::wait_flag_then_write_kernel(), "P").arg(flag).arg(op).arg(seven).arg(timeout)
                   .submit(s, &p_id));
  int* bp = buf.p;
  int v = 1, one = 1;
  ASSERT_FL_OK(Kernel(fltest::fill_kernel(), "L-skipped").arg(bp).arg(v).arg(one).op(bad, FL_READ).submit(s, &l_id));
  struct Probe {
    fl_stream_t* s;
    fl_instr_id p, l;
    MappedInt* flag;
    uint32_t p_state = 99, l_state = 99;
  } probe{s, p_id, l_id, &release_p};
  fl_host_instr_t h = FL_HOST_INSTR_INIT;
  h.fn = [](fl_instr_ctx_t*, void* u) -> fl_status_t {
    auto* pr = static_cast<Probe*>(u);
    fl_instr_query(pr->s, pr->p, &pr->p_state);
    fl_instr_query(pr->s, pr->l, &pr->l_state);
    pr->flag->set(1);  // now let P finish
    return FL_OK;
  };
  h.user_data = &probe;
  ASSERT_FL_OK(fl_submit_host(eng.stream(1, kCpu, FL_STREAM_HOST), &h, nullptr));
  (void)fl_stream_synchronize(s);  // returns the skipped instruction's failure
  uint32_t st = 99;
  ASSERT_FL_OK(fl_instr_query(s, p_id, &st));
  EXPECT_EQ(st, uint32_t(FL_INSTR_DONE)) << "the synchronize returned while P still ran";
  (void)fl_engine_synchronize(eng.e);
  EXPECT_EQ(probe.p_state, uint32_t(FL_INSTR_PENDING)) << "P was reported completed while it spun";
  EXPECT_EQ(probe.l_state, uint32_t(FL_INSTR_PENDING)) << "L completed before P, the earlier work of its stream";
  ASSERT_FL_OK(fl_instr_query(s, l_id, &st));
  EXPECT_EQ(st, uint32_t(FL_INSTR_SKIPPED));
  int result = 0;
  ASSERT_EQ(cudaMemcpy(&result, out.p, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(result, 7) << "-1: P timed out";
  fl_object_release(bad);
}

// A device function that enqueued GPU work and then failed: its cleanup (and its readers'
// skip) come only after that work completed.
TEST(Gpu, ADeviceFunctionFailingAfterEnqueuingCompletesAfterItsWork) {
  REQUIRE_GPU();
  Engine eng;
  struct Ctx {
    MappedInt done;
    std::atomic<int> cleanups{0};
    int done_at_cleanup = -1;
  } ctx;
  fl_device_instr_t d = FL_DEVICE_INSTR_INIT;
  d.fn = [](fl_instr_ctx_t*, void* stream, void* u) -> fl_status_t {
    auto* c = static_cast<Ctx*>(u);
    int* flag = c->done.d;
    unsigned long long ns = 200'000'000ull;  // 200 ms of GPU time
    void* args[2] = {&flag, &ns};
    if (cudaLaunchKernel(fltest::sleep_then_set_kernel(), dim3(1), dim3(1), args, 0,
                         static_cast<cudaStream_t>(stream)) != cudaSuccess)
      return FL_ERR_CUDA;
    return FL_ERR_INSTRUCTION_FAILED;  // ... and then fails
  };
  d.cleanup = [](void* u) {
    auto* c = static_cast<Ctx*>(u);
    c->done_at_cleanup = c->done.get();
    c->cleanups.fetch_add(1);
  };
  d.user_data = &ctx;
  d.name = "enqueues-then-fails";
  fl_object_t* o = eng.object();
  fl_operand_t w{o, FL_WRITE, 0};
  d.operands = &w;
  d.num_operands = 1;
  ASSERT_FL_OK(fl_submit_device(eng.stream(1, kGpu0, FL_STREAM_COMPUTE), &d, nullptr));
  EXPECT_FL_ERR(fl_engine_synchronize(eng.e), FL_ERR_INSTRUCTION_FAILED, "enqueues-then-fails");
  EXPECT_EQ(ctx.cleanups.load(), 1);
  EXPECT_EQ(ctx.done_at_cleanup, 1) << "cleanup ran while the enqueued kernel still ran";
  fl_object_release(o);
}

}  // namespace

namespace {

// NCCL: one rank (NCCL cannot put two ranks of one communicator on one GPU; multi-rank
// needs separate processes and is not tested here).
TEST(GpuNccl, OneRankAllReduceRunsOnTheCollectiveStream) {
  REQUIRE_NCCL();
  fl_comm_unique_id_t id = take_id();
  Engine eng;
  fl_comm_desc_t d = FL_COMM_DESC_INIT;
  d.nranks = 1;
  d.rank = 0;
  d.device = 0;
  d.lane = 3;
  d.backend = FL_COMM_NCCL;
  fl_comm_t* comm = nullptr;
  ASSERT_FL_OK(fl_comm_create(eng.e, &d, &id, &comm));
  constexpr int n = 64;
  DevBuf send(n), recv(n);
  fl_object_t* os = eng.object();
  fl_object_t* orv = eng.object();
  int* sp = send.p;
  int v = 9, count = n;
  ASSERT_FL_OK(Kernel(fltest::fill_kernel(), "fill", 1, 64).arg(sp).arg(v).arg(count).op(os, FL_WRITE)
                   .submit(eng.stream(1, kGpu0, FL_STREAM_COMPUTE)));
  fl_coll_part_t part{};
  part.op = FL_COLL_ALL_REDUCE;
  part.dtype = FL_DTYPE_INT32;
  part.redop = FL_REDOP_SUM;
  part.sendbuf = send.p;
  part.recvbuf = recv.p;
  part.count = n;
  fl_operand_t ops[2] = {{os, FL_READ, 0}, {orv, FL_WRITE, 0}};
  fl_collective_instr_t c = FL_COLLECTIVE_INSTR_INIT;
  c.parts = &part;
  c.num_parts = 1;
  c.operands = ops;
  c.num_operands = 2;
  c.name = "allreduce";
  EXPECT_FL_ERR(fl_submit_collective(eng.stream(3, kGpu0, FL_STREAM_COMPUTE), comm, &c, nullptr),
                FL_ERR_INVALID_ARGUMENT, "COLLECTIVE stream");
  ASSERT_FL_OK(fl_submit_collective(eng.stream(3, kGpu0, FL_STREAM_COLLECTIVE), comm, &c, nullptr));
  PinnedBuf host(n);
  ASSERT_FL_OK(memcpy_instr(eng.stream(3, kGpu0, FL_STREAM_D2H), FL_MEMCPY_D2H, host.p, recv.p, n * sizeof(int),
                            {{orv, FL_READ, 0}}, "d2h"));
  ASSERT_FL_OK(fl_engine_synchronize(eng.e));
  for (int k = 0; k < n; ++k) ASSERT_EQ(host.p[k], 9) << "at " << k;
  ASSERT_FL_OK(fl_comm_destroy(comm));
  EXPECT_FL_ERR(fl_comm_destroy(comm), FL_ERR_INVALID_HANDLE, "stale");
  fl_object_release(os);
  fl_object_release(orv);
}

}  // namespace

namespace {

// NCCL, one rank per communicator (NCCL refuses two ranks of one communicator on one GPU;
// multi-rank behaviour is tested against the fake NCCL in tests/gpu/fake). Each test
// skips without a device or without NCCL.
struct NcclComm1 {
  fl_comm_t* comm = nullptr;
  NcclComm1(fl_engine_t* e, uint32_t lane) {
    fl_comm_unique_id_t id = take_id();
    fl_comm_desc_t d = FL_COMM_DESC_INIT;
    d.nranks = 1;
    d.lane = lane;
    d.backend = FL_COMM_NCCL;
    EXPECT_EQ(fl_comm_create(e, &d, &id, &comm), FL_OK) << fl_last_error_message();
  }
};


fl_coll_part_t nccl_part(uint32_t op, const void* send, void* recv, uint64_t count, uint32_t peer = 0) {
  return fltest::coll_part(op, FL_DTYPE_INT32, send, recv, count, FL_REDOP_SUM, peer);
}

fl_status_t nccl_submit(Engine& eng, uint32_t lane, fl_comm_t* c, std::vector<fl_coll_part_t> parts,
                        std::vector<fl_operand_t> ops, const char* name) {
  fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
  in.parts = parts.data();
  in.num_parts = parts.size();
  in.operands = ops.empty() ? nullptr : ops.data();
  in.num_operands = ops.size();
  in.name = name;
  return fl_submit_collective(eng.stream(lane, kGpu0, FL_STREAM_COLLECTIVE), c, &in, nullptr);
}

// Every collective kind on real NCCL, from two communicators on two lanes (one engine-wide
// order): values read back through D2H copies.
TEST(GpuNccl, EveryCollectiveKindOnTwoCommunicators) {
  REQUIRE_NCCL();
  Engine eng;
  NcclComm1 x(eng.e, 3), y(eng.e, 4);
  ASSERT_NE(x.comm, nullptr);
  ASSERT_NE(y.comm, nullptr);
  constexpr int n = 32;
  DevBuf src(n), a(n), b(n), c(n), d(n), f(n);
  fl_object_t* os = eng.object();
  fl_object_t* out[5];
  for (auto& o : out) o = eng.object();
  int* sp = src.p;
  int v = 5, count = n;
  ASSERT_FL_OK(Kernel(fltest::fill_kernel(), "fill", 1, 64).arg(sp).arg(v).arg(count).op(os, FL_WRITE)
                   .submit(eng.stream(1, kGpu0, FL_STREAM_COMPUTE)));
  ASSERT_FL_OK(nccl_submit(eng, 3, x.comm, {nccl_part(FL_COLL_ALL_REDUCE, src.p, a.p, n)}, {{os, FL_READ, 0}, {out[0], FL_WRITE, 0}}, "ar"));
  ASSERT_FL_OK(nccl_submit(eng, 4, y.comm, {nccl_part(FL_COLL_ALL_GATHER, src.p, b.p, n)}, {{os, FL_READ, 0}, {out[1], FL_WRITE, 0}}, "ag"));
  ASSERT_FL_OK(nccl_submit(eng, 3, x.comm, {nccl_part(FL_COLL_REDUCE_SCATTER, src.p, c.p, n)}, {{os, FL_READ, 0}, {out[2], FL_WRITE, 0}}, "rs"));
  ASSERT_FL_OK(nccl_submit(eng, 4, y.comm, {nccl_part(FL_COLL_BROADCAST, src.p, d.p, n)}, {{os, FL_READ, 0}, {out[3], FL_WRITE, 0}}, "bc"));
  ASSERT_FL_OK(nccl_submit(eng, 3, x.comm, {nccl_part(FL_COLL_SEND, src.p, nullptr, n), nccl_part(FL_COLL_RECV, nullptr, f.p, n)},
                           {{os, FL_READ, 0}, {out[4], FL_WRITE, 0}}, "sendrecv to self"));
  PinnedBuf host(5 * n);
  int* dev[5] = {a.p, b.p, c.p, d.p, f.p};
  for (int k = 0; k < 5; ++k)
    ASSERT_FL_OK(memcpy_instr(eng.stream(5, kGpu0, FL_STREAM_D2H), FL_MEMCPY_D2H, host.p + k * n, dev[k],
                              n * sizeof(int), {{out[k], FL_READ, 0}}, "d2h"));
  ASSERT_FL_OK(fl_engine_synchronize(eng.e));
  for (int k = 0; k < 5; ++k)
    for (int i = 0; i < n; ++i) ASSERT_EQ(host.p[k * n + i], 5) << "collective " << k << " at " << i;
  EXPECT_FL_OK(fl_comm_destroy(x.comm));
  EXPECT_FL_OK(fl_comm_destroy(y.comm));
  fl_object_release(os);
  for (auto& o : out) fl_object_release(o);
}

// fl_comm_destroy while collectives are queued behind a producer that has not run: the
// communicator is aborted and they fail with FL_ERR_CANCELLED when their turn comes.
TEST(GpuNccl, DestroyWithCollectivesQueuedCancelsThem) {
  REQUIRE_NCCL();
  Engine eng;
  NcclComm1 x(eng.e, 3);
  ASSERT_NE(x.comm, nullptr);
  DevBuf buf(16);
  fl_object_t* in = eng.object();
  fl_object_t* out = eng.object();
  fltest::Gate gate;
  fltest::submit(eng.stream(2, kCpu, FL_STREAM_HOST), [&gate] { return gate.wait() ? FL_OK : FL_ERR_TIMEOUT; },
                 {fltest::W(in)}, "gate");
  for (int k = 0; k < 10; ++k)
    ASSERT_FL_OK(nccl_submit(eng, 3, x.comm, {nccl_part(FL_COLL_ALL_REDUCE, buf.p, buf.p, 16)},
                             {{in, FL_READ, 0}, {out, FL_WRITE, 0}}, "queued"));
  ASSERT_FL_OK(fl_comm_destroy(x.comm));
  gate.open = true;
  EXPECT_FL_ERR(fl_object_wait(out, FL_READ), FL_ERR_CANCELLED, "fl_comm_destroy");
  (void)fl_engine_synchronize(eng.e);
  fl_object_release(in);
  fl_object_release(out);
}

// A collective skipped for a poisoned input never reaches NCCL; the rank's later
// collectives would pair with its peers' earlier ones, so they are refused.
TEST(GpuNccl, SkippedCollectiveBreaksTheCommunicator) {
  REQUIRE_NCCL();
  Engine eng;
  NcclComm1 x(eng.e, 3);
  ASSERT_NE(x.comm, nullptr);
  DevBuf buf(16);
  fl_object_t* in = eng.object();
  fl_object_t* out = eng.object();
  fltest::submit(eng.stream(2, kCpu, FL_STREAM_HOST), [] { return FL_ERR_INSTRUCTION_FAILED; }, {fltest::W(in)}, "fails");
  ASSERT_FL_OK(nccl_submit(eng, 3, x.comm, {nccl_part(FL_COLL_ALL_REDUCE, buf.p, buf.p, 16)},
                           {{in, FL_READ, 0}, {out, FL_WRITE, 0}}, "skipped"));
  EXPECT_FL_ERR(fl_object_wait(out, FL_READ), FL_ERR_DEPENDENCY_FAILED, "skipped");
  ASSERT_FL_OK(nccl_submit(eng, 3, x.comm, {nccl_part(FL_COLL_ALL_REDUCE, buf.p, buf.p, 16)}, {{out, FL_WRITE, 0}}, "after"));
  EXPECT_FL_ERR(fl_object_wait(out, FL_READ), FL_ERR_CANCELLED, "seq 1");
  (void)fl_engine_synchronize(eng.e);
  EXPECT_FL_OK(fl_comm_destroy(x.comm));
  fl_object_release(in);
  fl_object_release(out);
}

// Engine destroy with collectives in flight returns (they complete or are cancelled).
TEST(GpuNccl, EngineDestroyWithCollectivesInFlightReturns) {
  REQUIRE_NCCL();
  fl_comm_t* comm = nullptr;
  {
    Engine eng;
    NcclComm1 x(eng.e, 3);
    ASSERT_NE(x.comm, nullptr);
    comm = x.comm;
    DevBuf buf(1024);
    for (int k = 0; k < 200; ++k)
      ASSERT_FL_OK(nccl_submit(eng, 3, x.comm, {nccl_part(FL_COLL_ALL_REDUCE, buf.p, buf.p, 1024)}, {}, "ar"));
    ASSERT_FL_OK(fl_engine_destroy(eng.e));
    eng.e = nullptr;
  }
  fl_status_t st = fl_comm_destroy(comm);
  EXPECT_TRUE(st == FL_OK || st == FL_ERR_INVALID_HANDLE) << fl_status_name(st) << ": " << fl_last_error_message();
}

TEST(GpuNccl, ErrorPaths) {
  REQUIRE_NCCL();
  Engine eng;
  fl_comm_unique_id_t host_id;
  ASSERT_FL_OK(fl_comm_get_unique_id(FL_COMM_HOST_FAKE, &host_id));
  fl_comm_desc_t d = FL_COMM_DESC_INIT;
  d.nranks = 1;
  d.lane = 1;
  d.backend = FL_COMM_NCCL;
  fl_comm_t* c = nullptr;
  EXPECT_FL_ERR(fl_comm_create(eng.e, &d, &host_id, &c), FL_ERR_INVALID_ARGUMENT, "FL_COMM_HOST_FAKE");
  d.device = uint64_t(visible_devices());
  fl_comm_unique_id_t id = take_id();
  EXPECT_FL_ERR(fl_comm_create(eng.e, &d, &id, &c), FL_ERR_NO_DEVICE, "does not exist");
  g_spare_id = id;  // refused before NCCL saw it: still unused
  g_spare_id_set = true;
  NcclComm1 x(eng.e, 1);
  ASSERT_NE(x.comm, nullptr);
  DevBuf buf(4);
  fl_coll_part_t bad = nccl_part(FL_COLL_ALL_REDUCE, buf.p, buf.p, 4);
  bad.dtype = 42;
  EXPECT_FL_ERR(nccl_submit(eng, 1, x.comm, {bad}, {}, "bad"), FL_ERR_INVALID_ARGUMENT, "dtype 42");
  EXPECT_FL_ERR(nccl_submit(eng, 2, x.comm, {nccl_part(FL_COLL_ALL_REDUCE, buf.p, buf.p, 4)}, {}, "lane"),
                FL_ERR_INVALID_ARGUMENT, "lane 1");
  EXPECT_FL_OK(fl_comm_destroy(x.comm));
  EXPECT_FL_ERR(fl_comm_destroy(x.comm), FL_ERR_INVALID_HANDLE, "stale");
}

}  // namespace
