// Device edges across lanes by stream memory operations (gpu/value_edges.hpp), against the
// fake CUDA runtime, whose value waits poll their slot on the stream's queue: a consumer
// issued before its producer; a producer that is skipped, cancelled, fails to launch or
// fails to write its value, and engine destroy, each releasing the consumer, which is then
// skipped; the walk of what waits for a callback following a value edge; randomized work
// against a sequential model; the fallback to event edges where streams would share
// hardware queues or the driver lacks the operations (in a child process, which reads its
// environment once). Each engine here is created with FLOWLANE_GPU_VALUE_EDGES=1.
#include <sys/wait.h>
#include <unistd.h>

#include "fake_test_util.hpp"

namespace {

using namespace fakegpu;

struct ValueEdges : ::testing::Test {
  FakeReset reset;
  ScopedEnv on{"FLOWLANE_GPU_VALUE_EDGES", "1"};
};

// The consumer, on another lane, is issued (its stream waits for the producer's value)
// while the producer's lane is still held; both run once it is released.
TEST_F(ValueEdges, AConsumerIsIssuedBeforeItsProducer) {
  Eng g;
  fl_object_t* o = g.obj();
  fl_object_t* out = g.obj();
  int x = 0, y = 0, one = 1, c = 3;
  int *xp = &x, *yp = &y;
  Gate gate;
  gate.submit(g, 1);
  ASSERT_EQ(kernel(g.gpu(1), kAdd, {&xp, &one}, {{o, FL_WRITE, 0}}, "producer"), FL_OK);
  const long waits0 = fake_cudart_value_waits();
  ASSERT_EQ(kernel(g.gpu(2), kScale, {&yp, &xp, &c}, {{o, FL_READ, 0}, {out, FL_WRITE, 0}}, "consumer"), FL_OK);
  // A host probe behind the consumer on its lane runs while the producer's lane is held
  // (the GPU twin, GpuModel.AValueEdgeConsumerIsIssuedBeforeItsProducer, checks this way).
  std::atomic<int> probe{0};
  fl_host_instr_t h = FL_HOST_INSTR_INIT;
  h.fn = [](fl_instr_ctx_t*, void* u) -> fl_status_t {
    static_cast<std::atomic<int>*>(u)->store(1);
    return FL_OK;
  };
  h.user_data = &probe;
  ASSERT_EQ(fl_submit_host(g.s(2, kCpu, FL_STREAM_HOST), &h, nullptr), FL_OK);
  EXPECT_TRUE(eventually([&] { return probe.load() == 1; })) << "the consumer's lane waited for the producer's launch";
  EXPECT_GT(fake_cudart_value_waits(), waits0) << "the consumer waited on the host";
  gate.open.store(1);
  ASSERT_EQ(or_die([out] { return fl_object_wait(out, FL_READ); }, "value edge"), FL_OK) << fl_last_error_message();
  EXPECT_EQ(y, 13);
  EXPECT_GE(fake_cudart_value_writes(), 1);
  fl_object_release(o);
  fl_object_release(out);
}

// What the producer's lane may do instead of launching it: each releases the waiting
// consumer (whose kernel then runs), and the consumer and its own consumer are skipped,
// naming the producer's failure.
enum class Fate { kSkipped, kCancelled, kLaunchFails, kWriteFails };

void producer_never_ran(Fate fate) {
  Eng g;
  fl_object_t* bad = g.obj();
  fl_object_t* o = g.obj();
  fl_object_t* out = g.obj();
  fl_object_t* last = g.obj();
  int x = 0, y = 0, z = 0, one = 1, c = 3;
  int *xp = &x, *yp = &y, *zp = &z;
  Gate gate;
  gate.submit(g, 1);
  if (fate == Fate::kSkipped) {  // poison the producer's input
    fl_host_instr_t h = FL_HOST_INSTR_INIT;
    h.fn = [](fl_instr_ctx_t*, void*) -> fl_status_t { return FL_ERR_INSTRUCTION_FAILED; };
    fl_operand_t op{bad, FL_WRITE, 0};
    h.operands = &op;
    h.num_operands = 1;
    h.name = "poisoner";
    ASSERT_EQ(fl_submit_host(g.s(1, kCpu, FL_STREAM_HOST), &h, nullptr), FL_OK);
  }
  fl_instr_id pid = 0;
  const uint32_t block = fate == Fate::kLaunchFails ? 4096 : 1;  // over the fake's 1024
  ASSERT_EQ(kernel(g.gpu(1), kAdd, {&xp, &one}, {{bad, FL_READ, 0}, {o, FL_WRITE, 0}}, "producer", block, &pid), FL_OK);
  const long waits0 = fake_cudart_value_waits();
  ASSERT_EQ(kernel(g.gpu(2), kScale, {&yp, &xp, &c}, {{o, FL_READ, 0}, {out, FL_WRITE, 0}}, "consumer"), FL_OK);
  ASSERT_EQ(kernel(g.gpu(3), kScale, {&zp, &yp, &c}, {{out, FL_READ, 0}, {last, FL_WRITE, 0}}, "consumer2"), FL_OK);
  // The consumer waits on its stream (consumer2 may too, or wait for the consumer's event).
  ASSERT_TRUE(eventually([&] { return fake_cudart_value_waits() > waits0; })) << "the consumer waited on the host";
  if (fate == Fate::kCancelled) {
    ASSERT_EQ(fl_instr_cancel(g.gpu(1), pid), FL_OK);
  }
  if (fate == Fate::kWriteFails) fake_cudart_fail_value_writes(1);
  gate.open.store(1);
  std::string msg;  // the waiting thread's message
  const fl_status_t st = or_die([last, &msg] {
    fl_status_t r = fl_object_wait(last, FL_READ);
    msg = fl_last_error_message();
    return r;
  }, "a released value wait");
  EXPECT_EQ(st, FL_ERR_DEPENDENCY_FAILED) << msg;
  EXPECT_NE(msg.find("consumer2"), std::string::npos) << msg;
  // (The first value write fails: the producer's, or the consumer's if consumer2 waits for
  // a value of the consumer's too.)
  const char* cause = fate == Fate::kSkipped ? "poisoner" : fate == Fate::kWriteFails ? "cuStreamWriteValue64" : "producer";
  EXPECT_NE(msg.find(cause), std::string::npos) << msg;
  (void)synchronize_or_die(g, "the failures");  // returns them; nothing is left running
  while (fl_engine_synchronize(g.e) != FL_OK) {
  }
  fl_engine_stats_t stats = FL_ENGINE_STATS_INIT;
  ASSERT_EQ(fl_engine_stats(g.e, &stats), FL_OK);
  EXPECT_EQ(stats.in_flight, 0u);
  for (fl_object_t* x : {bad, o, out, last}) fl_object_release(x);
}

TEST_F(ValueEdges, AProducerThatIsSkippedReleasesItsConsumers) { producer_never_ran(Fate::kSkipped); }
TEST_F(ValueEdges, AProducerThatIsCancelledReleasesItsConsumers) { producer_never_ran(Fate::kCancelled); }
TEST_F(ValueEdges, AProducerWhoseLaunchFailsReleasesItsConsumers) { producer_never_ran(Fate::kLaunchFails); }
TEST_F(ValueEdges, AProducerWhoseValueWriteFailsReleasesItsConsumers) { producer_never_ran(Fate::kWriteFails); }

// Destroy while consumers wait for values of producers whose lane has not reached them:
// the drain reaches every producer (here cancelled), and destroy returns.
TEST_F(ValueEdges, EngineDestroyWithValueWaitsPendingReturns) {
  auto* g = new Eng();
  fl_object_t* o = g->obj();
  int x = 0, y = 0, one = 1, c = 3;
  int *xp = &x, *yp = &y;
  Gate gate;
  gate.submit(*g, 1);
  for (int k = 0; k < 20; ++k) {
    ASSERT_EQ(kernel(g->gpu(1), kAdd, {&xp, &one}, {{o, FL_READ_WRITE, 0}}, "producer"), FL_OK);
    ASSERT_EQ(kernel(g->gpu(2 + uint32_t(k % 2)), kScale, {&yp, &xp, &c}, {{o, FL_READ, 0}}, "consumer"), FL_OK);
  }
  ASSERT_EQ(fl_engine_cancel(g->e), FL_OK);
  fl_object_release(o);
  gate.open.store(1);
  ASSERT_EQ(or_die([g] {
              delete g;
              return FL_OK;
            }, "engine destroy with value waits pending"),
            FL_OK);
}

// The value a never-launched producer writes to release its consumers is written before
// the producer completes: once its engine is destroyed, nothing writes its stream's slot,
// and the next stream given that slot starts from 0 (a late write used to leave a value
// there that let the next engine's first consumer run before its producer).
TEST_F(ValueEdges, ASlotGoesToTheNextStreamOnlyOnceNothingWritesIt) {
  for (int round = 0; round < 3; ++round) {
    {
      fake_cudart_set_write_delay_ns(2'000'000);  // each write lands 2 ms after its turn on the stream
      Eng g;
      fl_object_t* o = g.obj();
      int x = 0, y = 0, one = 1, c = 3;
      int *xp = &x, *yp = &y;
      Gate gate;
      gate.submit(g, 1);
      for (int k = 0; k < 20; ++k) {
        ASSERT_EQ(kernel(g.gpu(1), kAdd, {&xp, &one}, {{o, FL_READ_WRITE, 0}}, "producer"), FL_OK);
        ASSERT_EQ(kernel(g.gpu(2 + uint32_t(k % 2)), kScale, {&yp, &xp, &c}, {{o, FL_READ, 0}}, "consumer"), FL_OK);
      }
      ASSERT_EQ(fl_engine_cancel(g.e), FL_OK);  // every one not started releases its consumers
      gate.open.store(1);
      fl_object_release(o);
    }
    fake_cudart_set_write_delay_ns(0);
    // The next engine's streams take the same slots; each is a producer's here, whose
    // consumer must wait for the producer's kernel (which waits for `flag`).
    Eng g;
    int flag = 0, v = 1, c = 3;
    std::vector<int> x(3, 0), y(3, 0);
    std::vector<fl_object_t*> outs;
    for (uint32_t l = 0; l < 3; ++l) {
      fl_object_t* o = g.obj();
      outs.push_back(g.obj());
      int *fp = &flag, *xp = &x[l], *yp = &y[l];
      ASSERT_EQ(kernel(g.gpu(1 + l), kWaitFlag, {&fp, &xp, &v}, {{o, FL_WRITE, 0}}, "producer"), FL_OK);
      ASSERT_EQ(kernel(g.gpu(1 + (l + 1) % 3), kScale, {&yp, &xp, &c}, {{o, FL_READ, 0}, {outs.back(), FL_WRITE, 0}},
                       "consumer"), FL_OK);
      fl_object_release(o);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a consumer let through early runs now
    std::atomic_ref<int>(flag).store(1);
    ASSERT_EQ(synchronize_or_die(g, "value edges after reuse"), FL_OK);
    EXPECT_EQ(y, std::vector<int>(3, 13)) << "round " << round << ": a consumer ran before its producer";
    for (fl_object_t* o : outs) fl_object_release(o);
  }
}

// A callback that waits for work which waits, through a value edge, for the callback's own
// instruction is refused, as through an issue edge: the walk follows the value edge's entry.
TEST_F(ValueEdges, AWaitForTheCallerThroughAValueEdgeIsRefused) {
  Eng g;
  fl_object_t* a = g.obj();
  fl_object_t* b = g.obj();
  fl_object_t* c = g.obj();
  int x = 0, y = 0, one = 1, k = 3;
  int *xp = &x, *yp = &y;
  Gate gate;
  gate.submit(g, 3);
  struct Ctx {
    fl_object_t* b;
    fl_status_t st = FL_ERR_INTERNAL;
    std::string msg;
  } ctx{b, FL_ERR_INTERNAL, {}};
  fl_host_instr_t h = FL_HOST_INSTR_INIT;  // writes a, then waits for b
  h.fn = [](fl_instr_ctx_t*, void* u) -> fl_status_t {
    auto* cx = static_cast<Ctx*>(u);
    cx->st = fl_object_wait(cx->b, FL_READ);
    cx->msg = fl_last_error_message();
    return FL_OK;
  };
  h.user_data = &ctx;
  fl_operand_t hop{a, FL_WRITE, 0};
  h.operands = &hop;
  h.num_operands = 1;
  h.name = "caller";
  ASSERT_EQ(fl_submit_host(g.s(3, kCpu, FL_STREAM_HOST), &h, nullptr), FL_OK);
  // P (lane 1) waits for the caller's completion; C (lane 2) for P through a value edge.
  ASSERT_EQ(kernel(g.gpu(1), kAdd, {&xp, &one}, {{a, FL_READ, 0}, {c, FL_WRITE, 0}}, "P"), FL_OK);
  const long waits0 = fake_cudart_value_waits();
  ASSERT_EQ(kernel(g.gpu(2), kScale, {&yp, &xp, &k}, {{c, FL_READ, 0}, {b, FL_WRITE, 0}}, "C"), FL_OK);
  ASSERT_TRUE(eventually([&] { return fake_cudart_value_waits() > waits0; }));
  gate.open.store(1);
  ASSERT_EQ(synchronize_or_die(g, "a refused wait"), FL_OK);
  EXPECT_EQ(ctx.st, FL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(ctx.msg.find("'C'"), std::string::npos) << ctx.msg;
  EXPECT_EQ(y, 13);
  for (fl_object_t* x : {a, b, c}) fl_object_release(x);
}

// Random dependent work over 4 lanes (a CUDA stream each, and host instructions), some
// lanes held now and then so that consumers run ahead of producers: the same result as
// sequential execution.
TEST_F(ValueEdges, RandomCrossLaneWorkMatchesSequentialExecution) {
  const long waits0 = fake_cudart_value_waits();
  for (uint32_t seed = 1; seed <= 4; ++seed) random_work(seed, 1200, true);
  EXPECT_GT(fake_cudart_value_waits(), waits0) << "no value edge was used";
}

// ---- the fallback to events, in child processes (the settings are read once per process) --

// A two-lane chain; exit 0 when its result is right and the value waits it made (or did
// not) match `expect_values`.
int chain_in_child(int lanes, bool expect_values) {
  setenv("FLOWLANE_GPU_VALUE_EDGES", "1", 1);
  int code = 0;
  {
    Eng g;
    fl_object_t* o = g.obj();
    int x = 0, one = 1;
    int* p = &x;
    for (uint32_t l = 1; l <= uint32_t(lanes); ++l) (void)g.gpu(l);  // streams interned up front
    Gate gate;
    gate.submit(g, 1);
    for (int k = 0; k < 200; ++k)
      if (kernel(g.gpu(1 + uint32_t(k % 2)), kAdd, {&p, &one}, {{o, FL_READ_WRITE, 0}}, "step") != FL_OK) code = 10;
    gate.open.store(1);
    if (synchronize_or_die(g, "chain in a child") != FL_OK || x != 200) code = 11;
    if ((fake_cudart_value_waits() > 0) != expect_values) code = 12;
    fl_object_release(o);
  }
  return code;
}

TEST(ValueEdgesChild, Run) {
  const char* what = std::getenv("FL_VALUE_EDGES_CHILD");
  if (what == nullptr) GTEST_SKIP() << "runs only as the child of ValueEdgesFallBack.*";
  std::fflush(stdout);
  if (std::strcmp(what, "shared") == 0) std::_Exit(chain_in_child(3, false));  // 3 streams, 2 queues
  if (std::strcmp(what, "fits") == 0) std::_Exit(chain_in_child(2, true));     // 2 streams, 2 queues
  if (std::strcmp(what, "nomemops") == 0) std::_Exit(chain_in_child(2, false));
  std::_Exit(20);
}

int run_child(const char* what, const char* var, const char* value) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("FL_VALUE_EDGES_CHILD", what, 1);
    setenv(var, value, 1);
    execl("/proc/self/exe", "flowlane_fake_value_edges_tests", "--gtest_filter=ValueEdgesChild.Run",
          static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST(ValueEdgesFallBack, ToEventsWhenStreamsWouldShareHardwareQueues) {
  EXPECT_EQ(run_child("shared", "CUDA_DEVICE_MAX_CONNECTIONS", "2"), 0)
      << "10: submit failed, 11: wrong result, 12: value waits used with more streams than queues";
  EXPECT_EQ(run_child("fits", "CUDA_DEVICE_MAX_CONNECTIONS", "2"), 0)
      << "12: no value wait although each stream has its own queue";
}

TEST(ValueEdgesFallBack, ToEventsWithoutTheDriversMemoryOperations) {
  EXPECT_EQ(run_child("nomemops", "FAKE_CUDA_NO_MEMOPS", "1"), 0)
      << "10: submit failed, 11: wrong result, 12: value waits without the driver's operations";
}

}  // namespace
