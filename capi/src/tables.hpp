// The process-wide handle tables of the C API (one per handle type) and the lookups every
// entry point starts with: each throws FL_ERR_INVALID_HANDLE with an actionable message for
// a NULL, stale, released or foreign handle.
#pragma once

#include <cstdint>

#include "comm/comm.hpp"
#include "engine/engine.hpp"
#include "flowlane/flowlane.h"
#include "handles.hpp"
#include "sched/task_group.hpp"
#include "sched/taskgraph.hpp"

namespace flowlane::capi {

// A task graph handle: the graph and the handle of the engine it runs on (a graph may
// outlive its engine: running it then answers FL_ERR_INVALID_HANDLE).
struct GraphBox {
  uint64_t engine_handle = 0;
  sched::TaskGraph graph;
};

// A task group handle: the group and its engine's handle (a group may outlive its engine:
// spawning then answers FL_ERR_INVALID_HANDLE). Recycled (base/recycler.hpp): a group per
// recursive call costs no allocation.
struct GroupBox {
  uint64_t engine_handle = 0;
  uint64_t handle = 0;
  sched::TaskGroup group;
};

HandleTable<core::Engine, HandleType::kEngine>& engine_table();
HandleTable<core::Stream, HandleType::kStream>& stream_table();
HandleTable<core::Object, HandleType::kObject>& object_table();
HandleTable<GraphBox, HandleType::kGraph>& graph_table();
HandleTable<comm::Communicator, HandleType::kComm>& comm_table();
HandleTable<GroupBox, HandleType::kGroup>& group_table();

core::Engine* engine_from(const fl_engine_t* h, const char* fn);
core::Stream* stream_from(const fl_stream_t* h, const char* fn);
core::Object* object_from(const fl_object_t* h, const char* fn);
GraphBox* graph_from(const fl_taskgraph_t* h, const char* fn);
comm::Communicator* comm_from(const fl_comm_t* h, const char* fn);
GroupBox* group_from(const fl_task_group_t* h, const char* fn);

// What the engine needs from this layer (handles for its streams, and making the handles
// of what it frees stale).
core::EngineServices engine_services();

}  // namespace flowlane::capi
