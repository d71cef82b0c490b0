// The engine's rules for fork-join work: parallel loops, task graphs and task groups
// (engine/fork_join.hpp).
#include "engine/fork_join.hpp"

#include <cinttypes>
#include <cstdio>

#include "engine/engine.hpp"
#include "sched/topology.hpp"

namespace flowlane::core {

sched::ParallelForResult parallel_for(Engine& e, uint64_t begin, uint64_t end, uint64_t grain, fl_range_fn body,
                                      void* user_data) {
  if (e.shutting_down()) fail(FL_ERR_SHUTDOWN, "fl_parallel_for: the engine is being destroyed");
  CallbackScope frame(&e, nullptr, CallbackKind::kLoop);  // bodies run on this thread too
  SpanScope span(e.observer(), "fl_parallel_for", end - begin);
  // Traced: each thread's shares of the loop, on its own track (the load balance).
  struct Shares final : sched::LoopObserver {
    Observer* ob;
    explicit Shares(Observer* o) : ob(o) {}
    void begin() override { ob->on_share(true, 0); }
    void end(uint64_t items) override { ob->on_share(false, items); }
  } shares(e.observer());
  sched::ParallelForResult r =
      sched::parallel_for(e.pool(), begin, end, grain, body, user_data, shares.ob != nullptr ? &shares : nullptr);
  span.end(r.status);
  return r;
}

fl_status_t run_graph(Engine& e, sched::TaskGraph& graph, int64_t num_threads) {
  if (e.shutting_down()) fail(FL_ERR_SHUTDOWN, "fl_taskgraph_run: the engine is being destroyed");
  unsigned n = sched::resolve_thread_count(num_threads, e.worker_count());
  // A thread of the caller's takes part in the run (sched::Participation) when it can be
  // one of the n threads without a pool of its own: n is the engine's workers plus one.
  const bool caller_helps = sched::Pool::current() == nullptr && n == e.worker_count() + 1;
  CallbackScope frame(&e, nullptr, CallbackKind::kLoop);  // tasks may run on this thread too
  SpanScope span(e.observer(), "fl_taskgraph_run", graph.size());
  return span.end(graph.run(e.pool_for_threads(caller_helps ? n - 1 : n), caller_helps));
}

void EngineTaskGroup::open(Engine& e) {
  if (e.shutting_down()) fail(FL_ERR_SHUTDOWN, "fl_task_group_create: the engine is being destroyed");
  group.reset(e.pool());
  group.set_owner(this);
  engine_ = &e;
  owner_ = pending_instr(&e);
  hold_.store(Hold::kNone, std::memory_order_relaxed);  // published with the handle
  if (owner_ != nullptr) {
    frame_ = CallbackFrame{&e, owner_, CallbackKind::kGroupTask, nullptr, nullptr};
    // Inside a running task of a group with the same owner: borrow (the top of the file).
    const EngineTaskGroup* parent = running(e);
    void** slot = parent != nullptr && parent->owner_ == owner_ ? sched::TaskGroup::running_slot() : nullptr;
    if (slot != nullptr) {
      borrow(slot);
    } else {
      owner_->ref();  // dropped by close()
      hold_.store(Hold::kRef, std::memory_order_relaxed);  // published with the handle
    }
  }
  group.set_context(owner_ != nullptr ? &frame_ : nullptr);
}

namespace {
// Installs the pool's task-end call once (before any group can borrow).
struct TaskEndInstalled {
  explicit TaskEndInstalled(void (*fn)(void*)) { sched::TaskGroup::set_task_end(fn); }
};
}  // namespace

void EngineTaskGroup::borrow(void** slot) {
  static const TaskEndInstalled installed(&EngineTaskGroup::end_borrows);  // thread-safe, once
  creator_ = sched::this_thread_token();
  borrow_slot_ = slot;
  borrow_prev_ = nullptr;
  borrow_next_ = static_cast<EngineTaskGroup*>(*slot);
  if (borrow_next_ != nullptr) borrow_next_->borrow_prev_ = this;
  *slot = this;
  hold_.store(Hold::kBorrow, std::memory_order_relaxed);  // published with the handle
}

void EngineTaskGroup::unlink_borrow() {
  if (borrow_prev_ != nullptr)
    borrow_prev_->borrow_next_ = borrow_next_;
  else
    *borrow_slot_ = borrow_next_;
  if (borrow_next_ != nullptr) borrow_next_->borrow_prev_ = borrow_prev_;
  borrow_slot_ = nullptr;
  borrow_prev_ = borrow_next_ = nullptr;
}

void EngineTaskGroup::end_borrows(void* head) {
  for (auto* g = static_cast<EngineTaskGroup*>(head); g != nullptr;) {
    EngineTaskGroup* next = g->borrow_next_;
    g->borrow_slot_ = nullptr;
    g->borrow_prev_ = g->borrow_next_ = nullptr;
    // Acquire pairs with the destroyer's acq_rel CAS to kDetached: what it did to the group
    // happens before we give the record back.
    Hold h = g->hold_.load(std::memory_order_acquire);
    if (h == Hold::kBorrow) {
      // The group whose task ends keeps the owner alive until the pool drops the task's unit
      // (after this call): a reference taken now is safe, and never the last one dropped.
      // (A destroyer that detaches the group writes nothing of it after its CAS.)
      Instr* owner = g->owner_;
      owner->ref();
      // acq_rel: our reference happens before a destroyer that reads kRef drops it (its
      // acquire load); pairs with its CAS to kDetached otherwise.
      if (g->hold_.compare_exchange_strong(h, Hold::kRef, std::memory_order_acq_rel)) {
        g = next;
        continue;
      }
      (void)owner->unref();  // detached meanwhile
    }
    g->give_back(g);  // kDetached: destroyed on another thread, which left the record to us
    g = next;
  }
}

void EngineTaskGroup::spawn(Engine& e, fl_task_fn fn, void* user_data, fl_release_fn cleanup) {
  if (e.shutting_down()) fail(FL_ERR_SHUTDOWN, "fl_task_group_spawn: the engine is being destroyed");
  // From a thread of the caller's, the spawn is counted while it checks for a drain and
  // hands its task over, so that a drain racing with it refuses it or waits for its task.
  const bool outside = !in_any_engine_context();
  if (outside && !e.cancel_drain().begin_outside_spawn())
    fail(FL_ERR_SHUTDOWN, "fl_task_group_spawn: the engine was drained (fl_engine_drain)");
  try {
    group.spawn(fn, user_data, cleanup);
  } catch (...) {
    if (outside) e.cancel_drain().end_outside_spawn();
    throw;
  }
  if (outside) e.cancel_drain().end_outside_spawn();
}

const EngineTaskGroup* EngineTaskGroup::of(const sched::TaskGroup* g, const Engine& e) {
  if (g == nullptr) return nullptr;
  auto* eg = static_cast<const EngineTaskGroup*>(g->owner());  // null: a group of no engine (core tests)
  return eg != nullptr && eg->engine_ == &e ? eg : nullptr;
}

std::string EngineTaskGroup::describe() const {
  char b[48];
  std::snprintf(b, sizeof b, "task group 0x%016" PRIx64, handle);
  return b;
}

namespace {

// Tells a group wait's note when the wait blocks (sched::BlockWatch).
class NoteWatch final : public sched::BlockWatch {
 public:
  explicit NoteWatch(WaitNote& note) : note_(note) { stop = note.cancel_flag(); }
  void blocking(bool begins) override {
    if (begins)
      note_.link();
    else
      note_.unlink();
  }

 private:
  WaitNote& note_;
};

}  // namespace

fl_status_t EngineTaskGroup::wait(Engine& e, const char* call, std::string* detail, const Deadline& deadline,
                                  bool* given_up) {
  *given_up = false;
  if (group.idle()) return group.result(detail);  // reached at once (fork-join's usual case)
  // In the wait-for graph only if it blocks: a wait that ends by running the group's tasks
  // (the usual case) costs the note a few stores.
  WaitNote note(e, call, this);
  NoteWatch watch(note);
  fl_status_t st = group.wait(detail, deadline, &watch);
  // Decided once the note has ended: a wait given up whose tasks finished meanwhile reached
  // its target (the group's result is then collected below).
  if (note.finish()) {
    *given_up = true;
    return report(FL_ERR_CANCELLED,
                  std::string(call) + " in " + note.waiter() +
                      " was cancelled: the engine is being drained or destroyed and this wait for " + describe() + " (" +
                      std::to_string(group.unfinished()) + (group.unfinished() == 1 ? " unfinished task" : " unfinished tasks") +
                      ") was on a cycle of waits (a deadlock); its tasks go on running");
  }
  if (watch.gave_up) st = group.result(detail);  // stopped as the tasks ended (finish() saw it idle): their result
  return st;
}

void EngineTaskGroup::drop_ref(Engine* e) {
  // The engine recycles the record; if it is gone, so is its pool: the record is left.
  if (owner_->unref() && e != nullptr) e->recycle(owner_);
}

bool EngineTaskGroup::close(Engine* e) {
  // Acquire pairs with the creator's acq_rel CAS to kRef (end_borrows): its reference
  // happens before we drop it.
  Hold h = hold_.load(std::memory_order_acquire);
  bool give_back_now = true;
  if (h == Hold::kRef) {
    drop_ref(e);
  } else if (h == Hold::kBorrow && creator_ == sched::this_thread_token()) {
    // The creating thread, before its task ended (the end would have upgraded the hold, and
    // only this thread runs it): the owner was never referenced.
    unlink_borrow();
  } else if (h == Hold::kBorrow) {
    // Another thread: the creator's task may end at any moment. acq_rel: pairs with the
    // creator's acquire load / CAS in end_borrows().
    if (hold_.compare_exchange_strong(h, Hold::kDetached, std::memory_order_acq_rel))
      give_back_now = false;  // the creator gives the record back when its task ends
    else
      drop_ref(e);  // upgraded meanwhile (h is kRef now)
  }
  if (!give_back_now) return false;  // the record is the creator's now: not touched again here
  hold_.store(Hold::kNone, std::memory_order_relaxed);
  owner_ = nullptr;
  return true;
}

}  // namespace flowlane::core
