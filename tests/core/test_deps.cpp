// White-box tests of the per-object dependency rules (core/engine/submit.cpp;
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

TEST(Deps, ReaderWaitsForTheLastWriter) {
  Rig rig;
  Object* o = rig.object();
  Gate gate;
  auto w = rig.submit(rig.host(1), {W(o)}, [&] { return gate.wait(); }, "w");
  auto r = rig.submit(rig.host(2), {R(o)}, [] { return FL_OK; }, "r");
  EXPECT_TRUE(rig.log->has(w.id, r.id));
  const Instr::Dep* d = dep_on(r.i, w.i);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->flags, Instr::Dep::kReads | Instr::Dep::kEdge);  // RAW: an edge, and the poison check
  EXPECT_GT(r.i->pending.load(), 0);                            // blocked on w
  gate.open = true;
  EXPECT_TRUE(rig.sync(rig.host(2)));
}

TEST(Deps, WriterWaitsForTheLastWriterAndEveryReaderSinceIt) {
  Rig rig;
  Object* o = rig.object();
  Gate gate;
  auto w1 = rig.submit(rig.host(1), {W(o)}, [&] { return gate.wait(); }, "w1");
  auto r1 = rig.submit(rig.host(2), {R(o)}, [] { return FL_OK; }, "r1");
  auto r2 = rig.submit(rig.host(3), {R(o)}, [] { return FL_OK; }, "r2");
  auto w2 = rig.submit(rig.host(4), {W(o)}, [] { return FL_OK; }, "w2");
  EXPECT_TRUE(rig.log->has(w1.id, w2.id));  // WAW
  EXPECT_TRUE(rig.log->has(r1.id, w2.id));  // WAR
  EXPECT_TRUE(rig.log->has(r2.id, w2.id));  // WAR
  EXPECT_EQ(rig.log->into(w2.id), 3u);
  // A write-only access does not read the old value: no poison check on w1.
  const Instr::Dep* d = dep_on(w2.i, w1.i);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->flags, Instr::Dep::kEdge);
  // The reader list restarts at the write: a reader after w2 waits for w2 only.
  auto r3 = rig.submit(rig.host(5), {R(o)}, [] { return FL_OK; }, "r3");
  EXPECT_TRUE(rig.log->has(w2.id, r3.id));
  EXPECT_EQ(rig.log->into(r3.id), 1u);
  EXPECT_TRUE(o->readers.size() == 1 && o->readers[0] == r3.i);
  gate.open = true;
  for (uint32_t l = 1; l <= 5; ++l) EXPECT_TRUE(rig.sync(rig.host(l)));
}

TEST(Deps, ReadersDoNotWaitForEachOther) {
  Rig rig;
  Object* o = rig.object();
  Gate gate;
  auto r1 = rig.submit(rig.host(1), {R(o)}, [&] { return gate.wait(); }, "r1");
  auto r2 = rig.submit(rig.host(2), {R(o)}, [&] { return gate.wait(); }, "r2");
  EXPECT_EQ(rig.log->into(r2.id), 0u);
  EXPECT_TRUE(r2.i->deps.empty());
  EXPECT_EQ(o->readers.size(), 2u);
  // Both run at once: r2 starts while r1 is still held.
  EXPECT_TRUE(eventually([&] { return r1.i->load_state() == InstrState::kRunning; }));
  EXPECT_TRUE(eventually([&] { return r2.i->load_state() == InstrState::kRunning; }));
  gate.open = true;
  EXPECT_TRUE(rig.sync(rig.host(1)));
  EXPECT_TRUE(rig.sync(rig.host(2)));
}

TEST(Deps, SameLaneNeedsNoEdge) {
  Rig rig;
  Object* o = rig.object();
  Gate gate;
  auto w = rig.submit(rig.host(1), {W(o)}, [&] { return gate.wait(); }, "w");
  auto r = rig.submit(rig.host(1), {R(o)}, [] { return FL_OK; }, "r");
  auto w2 = rig.submit(rig.host(1), {W(o)}, [] { return FL_OK; }, "w2");
  // Lane order already runs them in order: no edge, no pending unit for a predecessor.
  EXPECT_EQ(rig.log->into(r.id), 0u);
  EXPECT_EQ(rig.log->into(w2.id), 0u);
  const Instr::Dep* d = dep_on(r.i, w.i);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->flags, Instr::Dep::kReads);  // kept for the poison check only
  EXPECT_EQ(dep_on(w2.i, r.i), nullptr);    // WAR on the same lane: nothing to record
  gate.open = true;
  EXPECT_TRUE(rig.sync(rig.host(1)));
}

TEST(Deps, CompletedPredecessorNeedsNoEdge) {
  Rig rig;
  Object* o = rig.object();
  auto w = rig.submit(rig.host(1), {W(o)}, [] { return FL_OK; }, "w");
  ASSERT_TRUE(rig.sync(rig.host(1)));
  auto r = rig.submit(rig.host(2), {R(o)}, [] { return FL_OK; }, "r");
  EXPECT_EQ(rig.log->into(r.id), 0u);
  (void)w;
  EXPECT_TRUE(rig.sync(rig.host(2)));
}

TEST(Deps, ReaderListIsPrunedOfCompletedReaders) {
  Rig rig;
  Object* o = rig.object();
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
  Gate gate;
  std::vector<Rig::Sub> held;
  for (int k = 0; k < 40; ++k) held.push_back(rig.submit(rig.host(2), {R(o)}, [&] { return gate.wait(); }));
  size_t pending = 0;
  for (Instr* x : o->readers) pending += !is_terminal(x->load_state());
  EXPECT_EQ(pending, 40u);
  gate.open = true;
  EXPECT_TRUE(rig.sync(rig.host(2)));
}

// Several threads, each on its own lane, submit over a few shared objects: every recorded
// edge points from an earlier id to a later one (recording is serializable), and each
// object's accesses run in recording order.
TEST(Deps, DependenciesPointToEarlierIds) {
  Rig rig(4, /*window=*/1 << 16);  // room for every instruction: all are held until recorded
  std::vector<Object*> objs;
  for (int k = 0; k < 3; ++k) objs.push_back(rig.object());
  const int kThreads = 4, kEach = FL_UNDER_SANITIZER ? 300 : 3000;
  Gate gate;  // nothing completes while recording: every cross-lane dependency is an edge
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937 rng(1234 + t);
      for (int n = 0; n < kEach; ++n) {
        std::vector<Operand> ops;
        for (Object* o : objs)
          if (rng() % 2) ops.push_back(rng() % 2 ? RW(o) : R(o));
        if (ops.empty()) ops.push_back(W(objs[rng() % objs.size()]));
        rig.submit(rig.host(uint32_t(1 + t)), ops, [&gate] { return gate.wait(); });
      }
    });
  }
  for (auto& t : ts) t.join();
  gate.open = true;
  for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(rig.sync(rig.host(uint32_t(1 + t))));
  std::lock_guard<std::mutex> lock(rig.log->mu);
  EXPECT_FALSE(rig.log->edges.empty());
  for (auto& [pred, succ] : rig.log->edges) ASSERT_LT(pred, succ) << "edge #" << pred << " -> #" << succ;
}

}  // namespace
}  // namespace flowlane::core::testing
