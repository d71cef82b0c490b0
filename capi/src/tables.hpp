// The process-wide handle tables of the C API (one per handle type) and the lookups every
// entry point starts with. A lookup is inline (it is on every call's path: two loads and a
// compare); a NULL, stale, released or foreign handle goes to the cold bad_handle(), which
// throws FL_ERR_INVALID_HANDLE with an actionable message.
#pragma once

#include <cstdint>

#include "comm/comm.hpp"
#include "engine/engine.hpp"
#include "engine/fork_join.hpp"
#include "flowlane/flowlane.h"
#include "handles.hpp"
#include "sched/taskgraph.hpp"

namespace flowlane::capi {

// A task graph handle: the graph and the handle of the engine it runs on (a graph may
// outlive its engine: running it then answers FL_ERR_INVALID_HANDLE).
struct GraphBox {
  uint64_t engine_handle = 0;
  sched::TaskGraph graph;
};

// A task group handle: the engine's task group (`group`, its handle, and the engine's rules
// for it: core/engine/fork_join.hpp) and its engine's handle, kept as a Ref (handles.hpp):
// a group may outlive its engine, and every call but destroy then answers
// FL_ERR_INVALID_HANDLE; a group's calls check the engine with one load instead of a
// lookup. Recycled (base/recycler.hpp): a group per recursive call costs no allocation.
struct GroupBox : core::EngineTaskGroup {
  HandleTable<core::Engine, HandleType::kEngine>::Ref engine;
};

// The tables, never destroyed (handles may be used, and answered as stale, during static
// destruction).
template <class T, HandleType kType>
inline HandleTable<T, kType>& table() {
  static auto* t = new HandleTable<T, kType>();
  return *t;
}
inline auto& engine_table() { return table<core::Engine, HandleType::kEngine>(); }
inline auto& stream_table() { return table<core::Stream, HandleType::kStream>(); }
inline auto& object_table() { return table<core::Object, HandleType::kObject>(); }
inline auto& graph_table() { return table<GraphBox, HandleType::kGraph>(); }
inline auto& comm_table() { return table<comm::Communicator, HandleType::kComm>(); }
inline auto& group_table() { return table<GroupBox, HandleType::kGroup>(); }
inline auto& program_table() { return table<core::Program, HandleType::kProgram>(); }

// Throws FL_ERR_INVALID_HANDLE explaining why `bits` is not a live handle of type `want`:
// NULL, another type's handle, or stale (`stale_because`).
[[noreturn, gnu::cold]] void bad_handle(uint64_t bits, HandleType want, const char* fn, const char* what,
                                        const char* stale_because);

template <class T, HandleType kType, class Handle>
inline T* lookup(const Handle* h, const char* fn, const char* what, const char* stale_because) {
  const uint64_t bits = handle_bits(h);
  T* p = table<T, kType>().lookup(bits);  // NULL has slot index 0: no object
  if (__builtin_expect(p != nullptr, 1)) return p;
  bad_handle(bits, kType, fn, what, stale_because);
}

inline core::Engine* engine_from(const fl_engine_t* h, const char* fn) {
  return lookup<core::Engine, HandleType::kEngine>(h, fn, "engine", "the engine was destroyed");
}
inline core::Stream* stream_from(const fl_stream_t* h, const char* fn) {
  return lookup<core::Stream, HandleType::kStream>(h, fn, "stream", "its engine was destroyed");
}
inline core::Object* object_from(const fl_object_t* h, const char* fn) {
  return lookup<core::Object, HandleType::kObject>(h, fn, "object",
                                                   "the object was released, or its engine was destroyed");
}
inline GraphBox* graph_from(const fl_taskgraph_t* h, const char* fn) {
  return lookup<GraphBox, HandleType::kGraph>(h, fn, "graph", "the graph was destroyed");
}
inline comm::Communicator* comm_from(const fl_comm_t* h, const char* fn) {
  return lookup<comm::Communicator, HandleType::kComm>(h, fn, "comm",
                                                       "the communicator was destroyed, or its engine was destroyed");
}
inline GroupBox* group_from(const fl_task_group_t* h, const char* fn) {
  return lookup<GroupBox, HandleType::kGroup>(h, fn, "group", "the task group was destroyed");
}
inline core::Program* program_from(const fl_program_t* h, const char* fn) {
  return lookup<core::Program, HandleType::kProgram>(h, fn, "program",
                                                     "the program was destroyed, or its engine was destroyed");
}

// What the engine needs from this layer (handles for its streams, and making the handles
// of what it frees stale).
core::EngineServices engine_services();

}  // namespace flowlane::capi
