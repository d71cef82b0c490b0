// The cold half of the handle lookups (capi/src/tables.hpp) and the services the engine
// gets from this layer.
#include <string>

#include "diag/watchdog.hpp"
#include "gpu/backend.hpp"
#include "gpu/graph.hpp"
#include "tables.hpp"

namespace flowlane::capi {

namespace {

const char* type_name(HandleType t) {
  switch (t) {
    case HandleType::kEngine: return "an engine";
    case HandleType::kStream: return "a stream";
    case HandleType::kObject: return "an object";
    case HandleType::kGraph: return "a task graph";
    case HandleType::kComm: return "a communicator";
    case HandleType::kGroup: return "a task group";
    case HandleType::kProgram: return "a program";
  }
  return "not a flowlane handle";
}

uint64_t register_stream(core::Stream* s) { return stream_table().insert(s); }

void forget_handle(uint64_t h) {
  switch (handle_type(h)) {
    case HandleType::kStream: stream_table().erase(h); break;
    case HandleType::kObject: object_table().erase(h); break;
    case HandleType::kComm: comm_table().erase(h); break;
    case HandleType::kProgram: program_table().erase(h); break;
    default: break;
  }
}

}  // namespace

void bad_handle(uint64_t bits, HandleType want, const char* fn, const char* what, const char* stale_because) {
  if (bits == 0) fail(FL_ERR_INVALID_HANDLE, std::string(fn) + ": " + what + " is NULL");
  if (handle_type(bits) != want)
    fail(FL_ERR_INVALID_HANDLE, std::string(fn) + ": the " + what + " handle is " + type_name(handle_type(bits)) +
                                    " handle (or not a flowlane handle at all), not " + type_name(want));
  fail(FL_ERR_INVALID_HANDLE, std::string(fn) + ": the " + what + " handle is stale (" + stale_because + ")");
}

core::EngineServices engine_services() {
  core::EngineServices s;
  s.device = gpu::backend();
  s.program_device = gpu::program_device();
  s.register_stream = &register_stream;
  s.forget_handle = &forget_handle;
  s.extend = &diag::extend_engine;
  return s;
}

}  // namespace flowlane::capi
