// C shims for task graphs and parallel loops (fl_parallel_for, fl_taskgraph_*).
//
// A task graph handle is generation-checked like every other handle. The graph remembers
// its engine by handle, not by pointer, so a graph that outlives its engine answers
// fl_taskgraph_run with FL_ERR_INVALID_HANDLE instead of touching a destroyed engine; it
// can still be destroyed.
#include <memory>
#include <string>

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
    sched::ParallelForResult r = sched::parallel_for(e->pool(), begin, end, grain, body, user_data);
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
    if (e->shutting_down()) fail(FL_ERR_SHUTDOWN, "fl_taskgraph_run: the engine is being destroyed");
    unsigned n = sched::resolve_thread_count(num_threads, e->worker_count());
    core::CallbackScope frame(e, nullptr, core::CallbackKind::kLoop);  // tasks may run on this thread too
    return g->graph.run(e->pool_for_threads(n));
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
