// The engine's rules for fork-join work: parallel loops, task graphs and task groups
// (engine/fork_join.hpp).
#include "engine/fork_join.hpp"

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

void EngineTaskGroup::close(Engine* e) {
  if (owner_ == nullptr) return;
  // The engine recycles the record; if it is gone, so is its pool: the record is left.
  if (owner_->unref() && e != nullptr) e->recycle(owner_);
  owner_ = nullptr;
}

}  // namespace flowlane::core
