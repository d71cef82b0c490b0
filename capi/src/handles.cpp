// The handle tables and lookups (capi/src/tables.hpp).
#include <string>

#include "gpu/backend.hpp"
#include "tables.hpp"

namespace flowlane::capi {

// Never destroyed: handles may be used (and answered as stale) during static destruction.
HandleTable<core::Engine, HandleType::kEngine>& engine_table() {
  static auto* t = new HandleTable<core::Engine, HandleType::kEngine>();
  return *t;
}
HandleTable<core::Stream, HandleType::kStream>& stream_table() {
  static auto* t = new HandleTable<core::Stream, HandleType::kStream>();
  return *t;
}
HandleTable<core::Object, HandleType::kObject>& object_table() {
  static auto* t = new HandleTable<core::Object, HandleType::kObject>();
  return *t;
}
HandleTable<GraphBox, HandleType::kGraph>& graph_table() {
  static auto* t = new HandleTable<GraphBox, HandleType::kGraph>();
  return *t;
}
HandleTable<comm::Communicator, HandleType::kComm>& comm_table() {
  static auto* t = new HandleTable<comm::Communicator, HandleType::kComm>();
  return *t;
}
HandleTable<GroupBox, HandleType::kGroup>& group_table() {
  static auto* t = new HandleTable<GroupBox, HandleType::kGroup>();
  return *t;
}

namespace {

const char* type_name(HandleType t) {
  switch (t) {
    case HandleType::kEngine: return "an engine";
    case HandleType::kStream: return "a stream";
    case HandleType::kObject: return "an object";
    case HandleType::kGraph: return "a task graph";
    case HandleType::kComm: return "a communicator";
    case HandleType::kGroup: return "a task group";
  }
  return "not a flowlane handle";
}

// The lookup common to every handle type: NULL, another type's handle, a stale one.
template <class Table, class Handle>
auto* lookup(const Table& table, const Handle* h, HandleType want, const char* fn, const char* what,
             const char* stale_because) {
  if (h == nullptr) fail(FL_ERR_INVALID_HANDLE, std::string(fn) + ": " + what + " is NULL");
  const uint64_t bits = handle_bits(h);
  auto* p = table.lookup(bits);
  if (p != nullptr) return p;
  if (handle_type(bits) != want)
    fail(FL_ERR_INVALID_HANDLE, std::string(fn) + ": the " + what + " handle is " + type_name(handle_type(bits)) +
                                    " handle (or not a flowlane handle at all), not " + type_name(want));
  fail(FL_ERR_INVALID_HANDLE, std::string(fn) + ": the " + what + " handle is stale (" + stale_because + ")");
}

uint64_t register_stream(core::Stream* s) { return stream_table().insert(s); }

void forget_handle(uint64_t h) {
  switch (handle_type(h)) {
    case HandleType::kStream: stream_table().erase(h); break;
    case HandleType::kObject: object_table().erase(h); break;
    case HandleType::kComm: comm_table().erase(h); break;
    default: break;
  }
}

}  // namespace

core::Engine* engine_from(const fl_engine_t* h, const char* fn) {
  return lookup(engine_table(), h, HandleType::kEngine, fn, "engine", "the engine was destroyed");
}

core::Stream* stream_from(const fl_stream_t* h, const char* fn) {
  return lookup(stream_table(), h, HandleType::kStream, fn, "stream", "its engine was destroyed");
}

core::Object* object_from(const fl_object_t* h, const char* fn) {
  return lookup(object_table(), h, HandleType::kObject, fn, "object",
                "the object was released, or its engine was destroyed");
}

GraphBox* graph_from(const fl_taskgraph_t* h, const char* fn) {
  return lookup(graph_table(), h, HandleType::kGraph, fn, "graph", "the graph was destroyed");
}

comm::Communicator* comm_from(const fl_comm_t* h, const char* fn) {
  return lookup(comm_table(), h, HandleType::kComm, fn, "comm",
                "the communicator was destroyed, or its engine was destroyed");
}

GroupBox* group_from(const fl_task_group_t* h, const char* fn) {
  return lookup(group_table(), h, HandleType::kGroup, fn, "group", "the task group was destroyed");
}

core::EngineServices engine_services() {
  core::EngineServices s;
  s.device = gpu::backend();
  s.register_stream = &register_stream;
  s.forget_handle = &forget_handle;
  return s;
}

}  // namespace flowlane::capi
