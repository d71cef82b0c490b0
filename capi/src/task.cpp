// C shims for task graphs and parallel loops (fl_parallel_for, fl_taskgraph_*).
//
// A task graph handle is generation-checked like every other handle. The graph remembers
// its engine by handle, not by pointer, so a graph that outlives its engine answers
// fl_taskgraph_run with FL_ERR_INVALID_HANDLE instead of touching a destroyed engine; it
// can still be destroyed.
#include <memory>
#include <string>

#include "base/recycler.hpp"
#include "boundary.hpp"
#include "sched/parallel_for.hpp"
#include "sched/topology.hpp"
#include "tables.hpp"

namespace flowlane::capi {
namespace {

std::string range_text(uint64_t lo, uint64_t hi) {
  // append(), not "[" + to_string(lo): GCC 12 warns falsely on the latter (-Wrestrict).
  std::string s("[");
  s.append(std::to_string(lo)).append(", ").append(std::to_string(hi)).append(")");
  return s;
}

}  // namespace
}  // namespace flowlane::capi

using namespace flowlane;
using namespace flowlane::capi;

extern "C" {

FL_API fl_status_t fl_parallel_for(fl_engine_t* engine, uint64_t begin, uint64_t end, uint64_t grain, fl_range_fn body,
                            void* user_data) {
  return guard([&]() -> fl_status_t {
    core::Engine* e = engine_from(engine, "fl_parallel_for");
    if (body == nullptr) fail(FL_ERR_INVALID_ARGUMENT, "fl_parallel_for: body is NULL");
    if (begin > end)
      fail(FL_ERR_INVALID_ARGUMENT, "fl_parallel_for: begin (" + std::to_string(begin) + ") is greater than end (" +
                                        std::to_string(end) + ")");
    if (e->shutting_down()) fail(FL_ERR_SHUTDOWN, "fl_parallel_for: the engine is being destroyed");
    core::CallbackScope frame(e, nullptr, core::CallbackKind::kLoop);  // bodies run on this thread too
    core::SpanScope span(e->observer(), "fl_parallel_for", end - begin);
    // Traced: each thread's shares of the loop, on its own track (the load balance).
    struct Shares final : sched::LoopObserver {
      core::Observer* ob;
      explicit Shares(core::Observer* o) : ob(o) {}
      void begin() override { ob->on_share(true, 0); }
      void end(uint64_t items) override { ob->on_share(false, items); }
    } shares(e->observer());
    sched::ParallelForResult r = sched::parallel_for(e->pool(), begin, end, grain, body, user_data,
                                                     shares.ob != nullptr ? &shares : nullptr);
    if (span.end(r.status) == FL_OK) return FL_OK;
    return report(r.status, "fl_parallel_for: the body failed on " + range_text(r.failed_lo, r.failed_hi) +
                                " with " + fl_status_name(r.status) + "; chunks not yet started were skipped");
  });
}

FL_API fl_status_t fl_taskgraph_create(fl_engine_t* engine, fl_taskgraph_t** out_graph) {
  return guard([&]() -> fl_status_t {
    engine_from(engine, "fl_taskgraph_create");  // validates; the graph keeps the handle, not the pointer
    require_out(out_graph, "fl_taskgraph_create", "out_graph");
    auto box = std::make_unique<GraphBox>();
    box->engine_handle = handle_bits(engine);
    uint64_t h = graph_table().insert(box.get());
    if (h == 0) fail(FL_ERR_NO_MEMORY, "fl_taskgraph_create: too many live task graphs");
    box.release();
    *out_graph = handle_cast<fl_taskgraph_t>(h);
    return FL_OK;
  });
}

FL_API fl_status_t fl_taskgraph_add(fl_taskgraph_t* graph, fl_task_fn fn, void* user_data, const char* name,
                             uint64_t* out_node) {
  return guard([&]() -> fl_status_t {
    GraphBox* g = graph_from(graph, "fl_taskgraph_add");
    require_out(out_node, "fl_taskgraph_add", "out_node");
    *out_node = g->graph.add(fn, user_data, name);
    return FL_OK;
  });
}

FL_API fl_status_t fl_taskgraph_precede(fl_taskgraph_t* graph, uint64_t before, uint64_t after) {
  return guard([&]() -> fl_status_t {
    GraphBox* g = graph_from(graph, "fl_taskgraph_precede");
    g->graph.precede(before, after);
    return FL_OK;
  });
}

FL_API fl_status_t fl_taskgraph_run(fl_taskgraph_t* graph, int64_t num_threads) {
  return guard([&]() -> fl_status_t {
    GraphBox* g = graph_from(graph, "fl_taskgraph_run");
    if (num_threads < -1)
      fail(FL_ERR_INVALID_ARGUMENT, "fl_taskgraph_run: num_threads is " + std::to_string(num_threads) +
                                        " (use -1 for all logical cores, 0 for physical cores, or N > 0)");
    core::Engine* e = engine_from(handle_cast<fl_engine_t>(g->engine_handle), "fl_taskgraph_run (the graph's engine)");
    if (e->shutting_down()) fail(FL_ERR_SHUTDOWN, "fl_taskgraph_run: the engine is being destroyed");
    unsigned n = sched::resolve_thread_count(num_threads, e->worker_count());
    // A thread of the caller's takes part in the run (sched::Participation) when it can be
    // one of the n threads without a pool of its own: n is the engine's workers plus one.
    const bool caller_helps = sched::Pool::current() == nullptr && n == e->worker_count() + 1;
    core::CallbackScope frame(e, nullptr, core::CallbackKind::kLoop);  // tasks may run on this thread too
    core::SpanScope span(e->observer(), "fl_taskgraph_run", g->graph.size());
    return span.end(g->graph.run(e->pool_for_threads(caller_helps ? n - 1 : n), caller_helps));
  });
}

FL_API fl_status_t fl_taskgraph_destroy(fl_taskgraph_t* graph) {
  return guard([&]() -> fl_status_t {
    if (graph == nullptr) return FL_OK;
    GraphBox* g = graph_from(graph, "fl_taskgraph_destroy");
    if (g->graph.running())
      fail(FL_ERR_INVALID_ARGUMENT, "fl_taskgraph_destroy: the graph is running (destroy it after fl_taskgraph_run returns)");
    graph_table().erase(handle_bits(graph));
    delete g;
    return FL_OK;
  });
}

}  // extern "C"

// ---------------------------------------------------------------------------------------
// Task groups

namespace flowlane::capi {
namespace {

core::Engine* group_engine(const GroupBox* g, const char* fn) {
  return engine_from(handle_cast<fl_engine_t>(g->engine_handle), fn);
}

void refuse_inside_own_task(const GroupBox* g, const char* fn) {
  if (g->group.inside_own_task())
    fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + " called from one of the group's own tasks: it would wait for "
                                                    "itself (wait for a group of child tasks created in the task)");
}

fl_status_t wait_group(fl_task_group_t* group, const Deadline& deadline, const char* fn) {
  GroupBox* g = group_from(group, fn);
  refuse_inside_own_task(g, fn);
  // A trace span around the wait (none for a group that outlived its engine). The engine is
  // looked up only once some engine was ever traced: a fork-join program waits millions of
  // times.
  core::Observer* ob = nullptr;
  if (core::Engine::observed_anywhere())
    if (core::Engine* e = table<core::Engine, HandleType::kEngine>().lookup(g->engine_handle)) ob = e->observer();
  core::SpanScope span(ob, fn, ob != nullptr ? uint64_t(g->group.unfinished()) : 0);
  std::string detail;
  fl_status_t st = span.end(g->group.wait(&detail, deadline));
  if (st == FL_OK) return FL_OK;
  if (st == FL_ERR_TIMEOUT)
    return report(st, std::string(fn) + ": " + std::to_string(g->group.unfinished()) +
                          " task(s) of the group had not finished by the timeout; they go on running (wait again, "
                          "or fl_task_group_destroy to wait for them)");
  return report(st, std::string(fn) + ": a task of the group failed with " + fl_status_name(st) +
                        (detail.empty() ? "" : ": " + detail) + "; tasks not yet started were skipped");
}

}  // namespace
}  // namespace flowlane::capi

extern "C" {

FL_API fl_status_t fl_task_group_create(fl_engine_t* engine, fl_task_group_t** out_group) {
  return guard([&]() -> fl_status_t {
    core::Engine* e = engine_from(engine, "fl_task_group_create");
    require_out(out_group, "fl_task_group_create", "out_group");
    if (e->shutting_down()) fail(FL_ERR_SHUTDOWN, "fl_task_group_create: the engine is being destroyed");
    GroupBox* g = Recycler<GroupBox>::get();
    g->engine_handle = handle_bits(engine);
    g->group.reset(e->pool());
    g->handle = group_table().insert(g);
    if (g->handle == 0) {
      Recycler<GroupBox>::put(g);
      fail(FL_ERR_NO_MEMORY, "fl_task_group_create: too many live task groups");
    }
    g->owner = core::pending_instr(e);
    if (g->owner != nullptr) {
      g->owner->ref();
      g->frame = core::CallbackFrame{e, g->owner, core::CallbackKind::kGroupTask, nullptr, nullptr};
    }
    g->group.set_context(g->owner != nullptr ? &g->frame : nullptr);
    *out_group = handle_cast<fl_task_group_t>(g->handle);
    return FL_OK;
  });
}

FL_API fl_status_t fl_task_group_spawn(fl_task_group_t* group, fl_task_fn fn, void* user_data,
                                       fl_release_fn cleanup) {
  return guard([&]() -> fl_status_t {
    GroupBox* g = group_from(group, "fl_task_group_spawn");
    if (fn == nullptr) fail(FL_ERR_INVALID_ARGUMENT, "fl_task_group_spawn: fn is NULL");
    core::Engine* e = group_engine(g, "fl_task_group_spawn (the group's engine)");
    if (e->shutting_down()) fail(FL_ERR_SHUTDOWN, "fl_task_group_spawn: the engine is being destroyed");
    // From a thread of the caller's, the spawn is counted while it checks for a drain and
    // hands its task over, so that a drain racing with it refuses it or waits for its task.
    const bool outside = !core::in_any_engine_context();
    if (outside && !e->begin_outside_spawn())
      fail(FL_ERR_SHUTDOWN, "fl_task_group_spawn: the engine was drained (fl_engine_drain)");
    try {
      g->group.spawn(fn, user_data, cleanup);
    } catch (...) {
      if (outside) e->end_outside_spawn();
      throw;
    }
    if (outside) e->end_outside_spawn();
    return FL_OK;
  });
}

FL_API fl_status_t fl_task_group_wait(fl_task_group_t* group) {
  return guard([&] { return wait_group(group, Deadline::forever(), "fl_task_group_wait"); });
}

FL_API fl_status_t fl_task_group_wait_for(fl_task_group_t* group, uint64_t timeout_ns) {
  return guard([&] { return wait_group(group, Deadline::after_ns(timeout_ns), "fl_task_group_wait_for"); });
}

FL_API fl_status_t fl_task_group_destroy(fl_task_group_t* group) {
  return guard([&]() -> fl_status_t {
    if (group == nullptr) return FL_OK;
    GroupBox* g = group_from(group, "fl_task_group_destroy");
    refuse_inside_own_task(g, "fl_task_group_destroy");
    (void)g->group.wait(nullptr);  // its failures are dropped: wait first to see them
    if (group_table().erase(handle_bits(group)) == nullptr)
      fail(FL_ERR_INVALID_HANDLE, "fl_task_group_destroy: the group was destroyed concurrently");
    if (g->owner != nullptr) {
      // The engine recycles the record; if it is gone, so is its pool: the record is left.
      core::Engine* e = table<core::Engine, HandleType::kEngine>().lookup(g->engine_handle);
      if (g->owner->unref() && e != nullptr) e->recycle(g->owner);
      g->owner = nullptr;
    }
    Recycler<GroupBox>::put(g);
    return FL_OK;
  });
}

}  // extern "C"
