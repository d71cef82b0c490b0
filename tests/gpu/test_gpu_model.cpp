// Randomized cross-stream work against a sequential model on a real GPU (the twin of the
// fake runtime's FakeGpu.RandomCrossStreamWorkMatchesSequentialExecution), with event edges
// and with value edges (FLOWLANE_GPU_VALUE_EDGES=1, read when an engine starts), and the
// value edges' own checks: a consumer issued before its producer, a skipped producer that
// releases its consumer (gpu/README.md, "Value edges").
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "gpu/gpu_test_util.hpp"
#include "gpu/random_model.hpp"

namespace {

using namespace fltest;

// Mapped pinned ints: kernels and host instructions both read and write them.
struct MappedInts {
  int* h = nullptr;
  int* d = nullptr;
  explicit MappedInts(size_t n) {
    EXPECT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&h), n * sizeof(int), cudaHostAllocMapped), cudaSuccess);
    if (h != nullptr) {
      EXPECT_EQ(cudaHostGetDevicePointer(reinterpret_cast<void**>(&d), h, 0), cudaSuccess);
    }
  }
  ~MappedInts() { cudaFreeHost(h); }
};

// Sets an environment variable for the engines created while it lives.
struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};

// A host instruction that holds its lane until `open` (20 s at most).
struct Gate {
  std::atomic<int> open{0};
  fl_status_t submit(Engine& eng, uint32_t lane) {
    fl_host_instr_t h = FL_HOST_INSTR_INIT;
    h.fn = [](fl_instr_ctx_t*, void* u) -> fl_status_t {
      auto* g = static_cast<Gate*>(u);
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (g->open.load() == 0 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
      return FL_OK;
    };
    h.user_data = this;
    h.name = "gate";
    return fl_submit_host(eng.stream(lane, kCpu, FL_STREAM_HOST), &h, nullptr);
  }
};

// The randomized cross-stream model test's work (randmodel::random_plan, the same as the
// fake runtime's) on the GPU: the objects must end with the sequential model's values.
void random_work(uint32_t seed, int ops, bool gates) {
  const randmodel::Plan plan = randmodel::random_plan(seed, ops, gates);
  MappedInts vals(randmodel::kObjects);
  for (int k = 0; k < randmodel::kObjects; ++k) vals.h[k] = plan.initial[size_t(k)];
  std::vector<std::unique_ptr<Gate>> held;
  {
    Engine eng;
    std::vector<fl_object_t*> objs;
    for (int k = 0; k < randmodel::kObjects; ++k) objs.push_back(eng.object());
    struct HostMix {
      int* dst;
      const int* src;
      int c;
    };
    std::vector<HostMix> host_args;
    host_args.reserve(plan.steps.size());
    for (const randmodel::Step& st : plan.steps) {
      if (st.hold) {
        held.push_back(std::make_unique<Gate>());
        ASSERT_FL_OK(held.back()->submit(eng, st.lane));
      }
      std::vector<fl_operand_t> opnds = {{objs[st.dst], FL_READ_WRITE, 0}};
      if (st.src != st.dst) opnds.push_back({objs[st.src], FL_READ, 0});
      if (st.host) {
        host_args.push_back({&vals.h[st.dst], &vals.h[st.src], st.c});
        fl_host_instr_t h = FL_HOST_INSTR_INIT;
        h.fn = [](fl_instr_ctx_t*, void* u) -> fl_status_t {
          auto* m = static_cast<HostMix*>(u);
          const int s = *static_cast<const volatile int*>(m->src);
          const int d = *static_cast<volatile int*>(m->dst);
          *static_cast<volatile int*>(m->dst) = randmodel::mix(d, s, m->c);
          return FL_OK;
        };
        h.user_data = &host_args.back();
        h.operands = opnds.data();
        h.num_operands = opnds.size();
        ASSERT_FL_OK(fl_submit_host(eng.stream(st.lane, kCpu, FL_STREAM_HOST), &h, nullptr));
        continue;
      }
      int* pd = vals.d + st.dst;
      const int* ps = vals.d + st.src;
      const unsigned long long spin = st.dawdle ? 2000ull : 0ull;
      const fl_stream_kind_t kind = st.h2d ? FL_STREAM_H2D : FL_STREAM_COMPUTE;
      Kernel k(fltest::mix_kernel(), "mix");
      k.arg(pd).arg(ps).arg(st.c).arg(spin);
      for (const fl_operand_t& o : opnds) k.op(o.object, o.access);
      ASSERT_FL_OK(k.submit(eng.stream(st.lane, kGpu0, kind)));
      if (st.open >= 0) held[size_t(st.open)]->open.store(1);
    }
    for (auto& g : held) g->open.store(1);
    ASSERT_FL_OK(fl_engine_synchronize(eng.e));
    for (fl_object_t* o : objs) fl_object_release(o);
  }
  EXPECT_EQ(std::vector<int>(vals.h, vals.h + randmodel::kObjects), plan.model) << "seed " << seed;
}

TEST(GpuModel, RandomCrossStreamWorkMatchesSequentialExecution) {
  REQUIRE_GPU();
  for (uint32_t seed = 1; seed <= 4; ++seed) random_work(seed, 1500, false);
}

TEST(GpuModel, RandomCrossLaneWorkWithValueEdgesMatchesSequentialExecution) {
  REQUIRE_GPU();
  ScopedEnv on("FLOWLANE_GPU_VALUE_EDGES", "1");
  for (uint32_t seed = 1; seed <= 4; ++seed) random_work(seed, 1500, true);
}

// With value edges, a consumer on another lane is issued while its producer's lane is held:
// a host probe queued behind the consumer on the consumer's lane runs before the producer's
// lane is released (with an issue edge the consumer's lane would wait for the producer's
// launch, and the probe with it). Under CUDA_DEVICE_MAX_CONNECTIONS=1 value edges fall back
// to events and this fails (scripts/dev/gpu-check.sh's fallback control).
TEST(GpuModel, AValueEdgeConsumerIsIssuedBeforeItsProducer) {
  REQUIRE_GPU();
  ScopedEnv on("FLOWLANE_GPU_VALUE_EDGES", "1");
  DevBuf x(1), y(1);
  Engine eng;
  fl_object_t* ox = eng.object();
  fl_object_t* oy = eng.object();
  Gate gate;
  ASSERT_FL_OK(gate.submit(eng, 1));
  int* xp = x.p;
  int* yp = y.p;
  int five = 5, one = 1;
  ASSERT_FL_OK(Kernel(fltest::fill_kernel(), "producer").arg(xp).arg(five).arg(one).op(ox, FL_WRITE)
                   .submit(eng.stream(1, kGpu0, FL_STREAM_COMPUTE)));
  ASSERT_FL_OK(Kernel(fltest::copy_kernel(), "consumer").arg(yp).arg(xp).arg(one).op(ox, FL_READ).op(oy, FL_WRITE)
                   .submit(eng.stream(2, kGpu0, FL_STREAM_COMPUTE)));
  std::atomic<int> probe{0};
  fl_host_instr_t h = FL_HOST_INSTR_INIT;
  h.fn = [](fl_instr_ctx_t*, void* u) -> fl_status_t {
    static_cast<std::atomic<int>*>(u)->store(1);
    return FL_OK;
  };
  h.user_data = &probe;
  h.name = "probe";
  ASSERT_FL_OK(fl_submit_host(eng.stream(2, kCpu, FL_STREAM_HOST), &h, nullptr));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (probe.load() == 0 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  const bool ahead = probe.load() == 1;
  gate.open.store(1);
  ASSERT_FL_OK(fl_object_wait(oy, FL_READ));
  int result = 0;
  ASSERT_EQ(cudaMemcpy(&result, y.p, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(result, 5);
  EXPECT_TRUE(ahead) << "the consumer waited on the host for its producer's launch (value edges fell back to events)";
  ASSERT_FL_OK(fl_engine_synchronize(eng.e));
  fl_object_release(ox);
  fl_object_release(oy);
}

// A producer skipped after its consumer was issued still releases the consumer's value
// wait; the consumer (whose kernel then runs) and its own consumer are skipped.
TEST(GpuModel, AValueEdgeProducerThatIsSkippedReleasesItsConsumer) {
  REQUIRE_GPU();
  ScopedEnv on("FLOWLANE_GPU_VALUE_EDGES", "1");
  DevBuf x(1), y(1), z(1);
  Engine eng;
  fl_object_t* bad = eng.object();
  fl_object_t* ox = eng.object();
  fl_object_t* oy = eng.object();
  fl_object_t* oz = eng.object();
  Gate gate;
  ASSERT_FL_OK(gate.submit(eng, 1));
  fl_host_instr_t fail = FL_HOST_INSTR_INIT;
  fail.fn = [](fl_instr_ctx_t*, void*) -> fl_status_t { return FL_ERR_INSTRUCTION_FAILED; };
  fl_operand_t fop{bad, FL_WRITE, 0};
  fail.operands = &fop;
  fail.num_operands = 1;
  fail.name = "poisoner";
  ASSERT_FL_OK(fl_submit_host(eng.stream(1, kCpu, FL_STREAM_HOST), &fail, nullptr));
  int *xp = x.p, *yp = y.p, *zp = z.p;
  int five = 5, one = 1;
  ASSERT_FL_OK(Kernel(fltest::fill_kernel(), "producer").arg(xp).arg(five).arg(one).op(bad, FL_READ)
                   .op(ox, FL_WRITE).submit(eng.stream(1, kGpu0, FL_STREAM_COMPUTE)));
  ASSERT_FL_OK(Kernel(fltest::copy_kernel(), "consumer").arg(yp).arg(xp).arg(one).op(ox, FL_READ).op(oy, FL_WRITE)
                   .submit(eng.stream(2, kGpu0, FL_STREAM_COMPUTE)));
  ASSERT_FL_OK(Kernel(fltest::copy_kernel(), "consumer2").arg(zp).arg(yp).arg(one).op(oy, FL_READ).op(oz, FL_WRITE)
                   .submit(eng.stream(3, kGpu0, FL_STREAM_COMPUTE)));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // lanes 2 and 3 issue meanwhile
  gate.open.store(1);
  EXPECT_FL_ERR(fl_object_wait(oz, FL_READ), FL_ERR_DEPENDENCY_FAILED, "poisoner");
  while (fl_engine_synchronize(eng.e) != FL_OK) {
  }
  for (fl_object_t* o : {bad, ox, oy, oz}) fl_object_release(o);
}

}  // namespace
