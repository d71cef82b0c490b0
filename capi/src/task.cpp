// C entry points of fork-join work: fl_parallel_for, task graphs (fl_taskgraph_*) and task
// groups (fl_task_group_*). They check arguments, look handles up and translate statuses;
// the engine's rules for this work (shutdown, callback frames, spans, a group's owner
// instruction, drain accounting of outside spawns) are in core/engine/fork_join.hpp.
//
// A task graph or group handle is generation-checked like every other handle. Each
// remembers its engine by handle, not by pointer (a group as a HandleTable::Ref: one load
// per call instead of a lookup), so one that outlives its engine answers
// FL_ERR_INVALID_HANDLE to every call but its destroy, which still frees it. Destroys claim
// the handle first (handles.hpp): of two concurrent destroys one frees, the other is
// answered FL_ERR_INVALID_HANDLE.
#include <memory>
#include <string>

#include "base/recycler.hpp"
#include "boundary.hpp"
#include "engine/fork_join.hpp"
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
    sched::ParallelForResult r = core::parallel_for(*e, begin, end, grain, body, user_data);
    if (r.status == FL_OK) return FL_OK;
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
    return core::run_graph(*e, g->graph, num_threads);
  });
}

FL_API fl_status_t fl_taskgraph_destroy(fl_taskgraph_t* graph) {
  return guard([&]() -> fl_status_t {
    if (graph == nullptr) return FL_OK;
    graph_from(graph, "fl_taskgraph_destroy");  // a NULL, stale or foreign handle: its own message
    // Claimed before anything of the graph is read: of two concurrent destroys, one goes on
    // and the other is answered here, never touching what the first one frees.
    GraphBox* g = graph_table().claim(handle_bits(graph));
    if (g == nullptr) fail(FL_ERR_INVALID_HANDLE, "fl_taskgraph_destroy: the graph was destroyed concurrently");
    if (g->graph.running()) {
      graph_table().unclaim(handle_bits(graph));
      fail(FL_ERR_INVALID_ARGUMENT, "fl_taskgraph_destroy: the graph is running (destroy it after fl_taskgraph_run returns)");
    }
    graph_table().erase_claimed(handle_bits(graph));
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
  core::Engine* e = g->engine.get();
  if (__builtin_expect(e == nullptr, 0))
    fail(FL_ERR_INVALID_HANDLE, std::string(fn) + ": the group's engine was destroyed (only fl_task_group_destroy "
                                                  "is left to do with the group)");
  return e;
}

void give_back_group(core::EngineTaskGroup* g) { Recycler<GroupBox>::put(static_cast<GroupBox*>(g)); }

void refuse_inside_own_task(const GroupBox* g, const char* fn) {
  if (g->group.inside_own_task())
    fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + " called from one of the group's own tasks: it would wait for "
                                                    "itself (wait for a group of child tasks created in the task)");
}

fl_status_t wait_group(fl_task_group_t* group, const Deadline& deadline, const char* fn) {
  GroupBox* g = group_from(group, fn);
  core::Engine* e = group_engine(g, fn);
  refuse_inside_own_task(g, fn);
  // A trace span around the wait. observer() is one load: a fork-join program waits millions
  // of times.
  core::Observer* ob = e->observer();
  core::SpanScope span(ob, fn, ob != nullptr ? uint64_t(g->group.unfinished()) : 0);
  std::string detail;
  bool given_up = false;
  fl_status_t st = span.end(g->wait(*e, fn, &detail, deadline, &given_up));
  if (st == FL_OK || given_up) return st;  // given up: reported by the engine
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
    const auto ref = engine_table().ref(handle_bits(engine));  // the lookup and the group's Ref at once
    core::Engine* e = ref.ptr != nullptr ? ref.ptr : engine_from(engine, "fl_task_group_create");  // throws
    require_out(out_group, "fl_task_group_create", "out_group");
    GroupBox* g = Recycler<GroupBox>::get();
    try {
      g->open(*e);
    } catch (...) {
      Recycler<GroupBox>::put(g);
      throw;
    }
    // Field by field: a copy of the whole Ref made a 16-byte load of the parts just stored
    // separately (a store-forwarding stall: 40 % of the call's samples).
    g->engine.gen = ref.gen;
    g->engine.live = ref.live;
    g->engine.ptr = ref.ptr;
    g->give_back = &give_back_group;
    g->handle = group_table().insert(g);
    if (g->handle == 0) {
      (void)g->close(e);  // on the creating thread: never detached
      Recycler<GroupBox>::put(g);
      fail(FL_ERR_NO_MEMORY, "fl_task_group_create: too many live task groups");
    }
    *out_group = handle_cast<fl_task_group_t>(g->handle);
    return FL_OK;
  });
}

FL_API fl_status_t fl_task_group_spawn(fl_task_group_t* group, fl_task_fn fn, void* user_data,
                                       fl_release_fn cleanup) {
  return guard([&]() -> fl_status_t {
    GroupBox* g = group_from(group, "fl_task_group_spawn");
    if (fn == nullptr) fail(FL_ERR_INVALID_ARGUMENT, "fl_task_group_spawn: fn is NULL");
    g->spawn(*group_engine(g, "fl_task_group_spawn"), fn, user_data, cleanup);
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
    const uint64_t h = handle_bits(group);
    GroupBox* g = group_from(group, "fl_task_group_destroy");
    refuse_inside_own_task(g, "fl_task_group_destroy");  // compares the address only
    // Claimed before the wait: a second destroy is answered at once instead of waiting on
    // what this one frees. The handle stays valid meanwhile (the group's tasks may spawn
    // into it).
    if (group_table().claim(h) == nullptr)
      fail(FL_ERR_INVALID_HANDLE, "fl_task_group_destroy: the group was destroyed concurrently");
    core::Engine* e = g->engine.get();  // null once destroyed
    if (e != nullptr) {
      std::string detail;  // the tasks' failures are dropped: wait first to see them
      bool given_up = false;
      try {
        (void)g->wait(*e, "fl_task_group_destroy", &detail, Deadline::forever(), &given_up);
      } catch (...) {
        group_table().unclaim(h);
        throw;
      }
      if (given_up) {  // on a cycle of waits: the tasks still run, so the group stays
        group_table().unclaim(h);
        return report(FL_ERR_CANCELLED, std::string(fl_last_error_message()) +
                                            "; the group was not destroyed (destroy it again once its tasks are done)");
      }
    } else {
      (void)g->group.wait(nullptr);  // the engine's destroy waited for every task
    }
    group_table().erase_claimed(h);
    // A group destroyed by another thread than the one that created it while that thread
    // still runs the task the group borrowed its owner from is given back by that thread
    // (core/engine/fork_join.hpp).
    if (g->close(e)) Recycler<GroupBox>::put(g);
    return FL_OK;
  });
}

}  // extern "C"
