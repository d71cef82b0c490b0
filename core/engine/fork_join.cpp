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
  if (owner_ != nullptr) {
    owner_->ref();  // dropped by close()
    frame_ = CallbackFrame{&e, owner_, CallbackKind::kGroupTask, nullptr, nullptr};
  }
  group.set_context(owner_ != nullptr ? &frame_ : nullptr);
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

const EngineTaskGroup* EngineTaskGroup::running(const Engine& e) {
  const sched::TaskGroup* g = sched::TaskGroup::running();
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
  if (group.idle()) return group.wait(detail, deadline);  // nothing to block on (fork-join's usual case)
  WaitNote note(e, pending_instr(&e), call, this);
  if (!note.tracked()) return group.wait(detail, deadline);  // a thread of the program's
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
  if (watch.gave_up) st = group.wait(detail, deadline);  // stopped as the tasks ended: their result
  return st;
}

void EngineTaskGroup::close(Engine* e) {
  if (owner_ == nullptr) return;
  // The engine recycles the record; if it is gone, so is its pool: the record is left.
  if (owner_->unref() && e != nullptr) e->recycle(owner_);
  owner_ = nullptr;
}

}  // namespace flowlane::core
