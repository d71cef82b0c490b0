// White-box tests of the per-object dependency rules (core/engine/deps.cpp;
// core/engine/README.md, "Dependency rules" and "Recording"): which edges the engine
// records, read from the records and from an Observer, while the predecessors are held.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <thread>
#include <vector>

#include "engine_rig.hpp"

namespace flowlane::core::testing {
namespace {

// The dependency entry of `succ` on `pred`, or null. Read while succ is held (pending).
const Instr::Dep* dep_on(const Instr* succ, const Instr* pred) {
  for (const Instr::Dep& d : succ->deps)
    if (d.pred == pred) return &d;
  return nullptr;
}

// One object, and instructions on it that either hold until the gate opens or run at once.
class Deps : public ::testing::Test {
 protected:
  ~Deps() override { gate.open = true; }  // a failed test must not leave the engine's drain waiting

  Gate gate;  // declared first: outlives the engine's drain
  Rig rig;
  Object* o = rig.object();

  Rig::Sub held(uint32_t lane, Operand op, const char* name) {
    return rig.submit(rig.host(lane), {op}, [this] { return gate.wait(); }, name);
  }
  Rig::Sub quick(uint32_t lane, Operand op, const char* name) {
    return rig.submit(rig.host(lane), {op}, [] { return FL_OK; }, name);
  }
  // Opens the gate and waits for lanes 1 .. n.
  void finish(uint32_t n) {
    gate.open = true;
    for (uint32_t l = 1; l <= n; ++l) EXPECT_TRUE(rig.sync(rig.host(l))) << "lane " << l;
  }
};

TEST_F(Deps, ReaderWaitsForTheLastWriter) {
  auto w = held(1, W(o), "w");
  auto r = quick(2, R(o), "r");
  EXPECT_TRUE(rig.log->has(w.id, r.id));
  const Instr::Dep* d = dep_on(r.i, w.i);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->flags, Instr::Dep::kReads | Instr::Dep::kEdge);  // RAW: an edge, and the poison check
  EXPECT_GT(r.i->pending.load(), 0);                            // blocked on w
  finish(2);
}

TEST_F(Deps, WriterWaitsForTheLastWriterAndEveryReaderSinceIt) {
  auto w1 = held(1, W(o), "w1");
  auto r1 = quick(2, R(o), "r1");
  auto r2 = quick(3, R(o), "r2");
  auto w2 = quick(4, W(o), "w2");
  EXPECT_TRUE(rig.log->has(w1.id, w2.id));  // WAW
  EXPECT_TRUE(rig.log->has(r1.id, w2.id));  // WAR
  EXPECT_TRUE(rig.log->has(r2.id, w2.id));  // WAR
  EXPECT_EQ(rig.log->into(w2.id), 3u);
  // A write-only access does not read the old value: no poison check on w1.
  const Instr::Dep* d = dep_on(w2.i, w1.i);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->flags, Instr::Dep::kEdge);
  // The reader list restarts at the write: a reader after w2 waits for w2 only.
  auto r3 = quick(5, R(o), "r3");
  EXPECT_TRUE(rig.log->has(w2.id, r3.id));
  EXPECT_EQ(rig.log->into(r3.id), 1u);
  EXPECT_TRUE(o->readers.size() == 1 && o->readers[0] == r3.i);
  finish(5);
}

TEST_F(Deps, ReadersDoNotWaitForEachOther) {
  auto r1 = held(1, R(o), "r1");
  auto r2 = held(2, R(o), "r2");
  EXPECT_EQ(rig.log->into(r2.id), 0u);
  EXPECT_TRUE(r2.i->deps.empty());
  EXPECT_EQ(o->readers.size(), 2u);
  // Both run at once: r2 starts while r1 is still held.
  EXPECT_TRUE(eventually([&] { return r1.i->load_state() == InstrState::kRunning; }));
  EXPECT_TRUE(eventually([&] { return r2.i->load_state() == InstrState::kRunning; }));
  finish(2);
}

TEST_F(Deps, SameLaneNeedsNoEdge) {
  auto w = held(1, W(o), "w");
  auto r = quick(1, R(o), "r");
  auto w2 = quick(1, W(o), "w2");
  // Lane order already runs them in order: no edge, no pending unit for a predecessor.
  EXPECT_EQ(rig.log->into(r.id), 0u);
  EXPECT_EQ(rig.log->into(w2.id), 0u);
  const Instr::Dep* d = dep_on(r.i, w.i);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->flags, Instr::Dep::kReads);  // kept for the poison check only
  EXPECT_EQ(dep_on(w2.i, r.i), nullptr);    // WAR on the same lane: nothing to record
  finish(1);
}

TEST_F(Deps, CompletedPredecessorNeedsNoEdge) {
  quick(1, W(o), "w");
  ASSERT_TRUE(rig.sync(rig.host(1)));
  auto r = quick(2, R(o), "r");
  EXPECT_EQ(rig.log->into(r.id), 0u);
  finish(2);
}

TEST_F(Deps, ReaderListIsPrunedOfCompletedReaders) {
  // Readers that complete: the list grows until its next pruning point, then holds only
  // the readers still pending.
  size_t max_seen = 0;
  for (int k = 0; k < 200; ++k) {
    rig.submit(rig.host(1), {R(o)}, [] { return FL_OK; });
    ASSERT_TRUE(rig.sync(rig.host(1)));
    max_seen = std::max(max_seen, o->readers.size());
  }
  EXPECT_LT(o->readers.size(), 64u);
  EXPECT_LT(max_seen, 64u) << "an object read forever keeps a bounded reader list";
  // Pending readers are kept.
  for (int k = 0; k < 40; ++k) held(2, R(o), "held");
  size_t pending = 0;
  for (Instr* x : o->readers) pending += !is_terminal(x->load_state());
  EXPECT_EQ(pending, 40u);
  finish(2);
}

// Several threads, each on its own lane, submit over a few shared objects: every recorded
// edge points from an earlier id to a later one (recording is serializable: no cycle can
// come from the engine).
TEST_F(Deps, DependenciesPointToEarlierIds) {
  Rig many(4, /*window=*/1 << 16);  // its own: room for every instruction, all held until recorded
  std::vector<Object*> objs;
  for (int k = 0; k < 3; ++k) objs.push_back(many.object());
  const int kThreads = 7, kEach = FL_UNDER_SANITIZER ? 300 : 4000;  // more threads than cores: preemption mid-submission
  // gate: nothing completes while recording, so every cross-lane dependency is an edge
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937 rng(1234 + t);
      for (int n = 0; n < kEach; ++n) {
        std::vector<Operand> ops;
        for (Object* x : objs)
          if (rng() % 2) ops.push_back(rng() % 2 ? RW(x) : R(x));
        if (ops.empty()) ops.push_back(W(objs[rng() % objs.size()]));
        many.submit(many.host(uint32_t(1 + t)), ops, [this] { return gate.wait(); });
      }
    });
  }
  for (auto& t : ts) t.join();
  gate.open = true;
  for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(many.sync(many.host(uint32_t(1 + t))));
  std::lock_guard<std::mutex> lock(many.log->mu);
  EXPECT_FALSE(many.log->edges.empty());
  for (auto& [pred, succ] : many.log->edges) ASSERT_LT(pred, succ) << "edge #" << pred << " -> #" << succ;
}

}  // namespace
}  // namespace flowlane::core::testing
