// C entry points: version and status, engine, lanes, streams, counters.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "boundary.hpp"
#include "engine/capture.hpp"
#include "diag/watchdog.hpp"
#include "gpu/backend.hpp"
#include "tables.hpp"

namespace flowlane::capi {
namespace {

std::string lane_out_of_range(const char* fn, uint32_t lane, const core::Engine& e) {
  return std::string(fn) + ": lane " + std::to_string(lane) + " is out of range: this engine has " +
         std::to_string(e.lane_count()) + " lanes (0.." + std::to_string(e.lane_count() - 1) + ")";
}

}  // namespace
}  // namespace flowlane::capi

using namespace flowlane;
using namespace flowlane::capi;

// ---------------------------------------------------------------------------------------
// Version and status

extern "C" {

FL_API uint32_t fl_version_hex(void) { return FL_VERSION_HEX; }

#define FL_STR2_(x) #x
#define FL_STR_(x) FL_STR2_(x)
FL_API const char* fl_version_string(void) {
  return FL_STR_(FL_VERSION_MAJOR) "." FL_STR_(FL_VERSION_MINOR) "." FL_STR_(FL_VERSION_PATCH);
}

FL_API const char* fl_status_name(fl_status_t status) {
  switch (enum_bits(status)) {
#define FL_STATUS_NAME_(name, value, text) \
  case name:                               \
    return #name;
    FL_STATUS_MAP(FL_STATUS_NAME_)
#undef FL_STATUS_NAME_
    default:
      return "FL_STATUS_UNKNOWN";
  }
}

FL_API const char* fl_status_string(fl_status_t status) {
  switch (enum_bits(status)) {
#define FL_STATUS_TEXT_(name, value, text) \
  case name:                               \
    return text;
    FL_STATUS_MAP(FL_STATUS_TEXT_)
#undef FL_STATUS_TEXT_
    default:
      return "unknown status";
  }
}

FL_API const char* fl_last_error_message(void) { return last_error(); }

// ---------------------------------------------------------------------------------------
// Engine

FL_API fl_status_t fl_engine_create(const fl_engine_desc_t* desc, fl_engine_t** out_engine) {
  return guard([&] {
    require_out(out_engine, "fl_engine_create", "out_engine");
    fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
    if (desc != nullptr) {
      check_desc(desc, "fl_engine_create", "fl_engine_desc_t");
      d = *desc;
      d.struct_size = sizeof(d);
    }
    if (d.flags != 0)
      fail(FL_ERR_INVALID_ARGUMENT, "fl_engine_create: flags " + std::to_string(d.flags) + " are unknown (use 0)");
    if (d.max_lanes > 4096)
      fail(FL_ERR_OUT_OF_RANGE, "fl_engine_create: max_lanes " + std::to_string(d.max_lanes) + " exceeds 4096");
    if (d.num_workers > 1024)
      fail(FL_ERR_OUT_OF_RANGE, "fl_engine_create: num_workers " + std::to_string(d.num_workers) + " exceeds 1024");
    if (d.inflight_limit > (uint64_t(1) << 40))
      fail(FL_ERR_OUT_OF_RANGE, "fl_engine_create: inflight_limit " + std::to_string(d.inflight_limit) + " is too large");
    if (d.watchdog_ms > diag::kMaxWatchdogMs)
      fail(FL_ERR_OUT_OF_RANGE, "fl_engine_create: watchdog_ms " + std::to_string(d.watchdog_ms) +
                                    " exceeds one day (" + std::to_string(diag::kMaxWatchdogMs) + ")");
    // The layers' extensions (diagnostics, the watchdog) attach during construction
    // (EngineServices::extend).
    auto e = std::make_unique<core::Engine>(d, engine_services());
    uint64_t h = engine_table().insert(e.get());
    if (h == 0) fail(FL_ERR_NO_MEMORY, "fl_engine_create: the process-wide engine table is full");
    e->set_handle(h);
    *out_engine = handle_cast<fl_engine_t>(h);
    e.release();
    return FL_OK;
  });
}

FL_API fl_status_t fl_engine_synchronize(fl_engine_t* engine) {
  return guard([&] {
    core::Engine* e = engine_from(engine, "fl_engine_synchronize");
    core::refuse_if_capturing(*e, "fl_engine_synchronize");
    return e->waits().synchronize();
  });
}

FL_API fl_status_t fl_engine_synchronize_for(fl_engine_t* engine, uint64_t timeout_ns) {
  return guard([&] {
    core::Engine* e = engine_from(engine, "fl_engine_synchronize_for");
    core::refuse_if_capturing(*e, "fl_engine_synchronize_for");
    return e->waits().synchronize(Deadline::after_ns(timeout_ns));
  });
}

FL_API fl_status_t fl_engine_cancel(fl_engine_t* engine) {
  return guard([&] {
    engine_from(engine, "fl_engine_cancel")->cancel_drain().cancel_all();
    return FL_OK;
  });
}

FL_API fl_status_t fl_engine_drain(fl_engine_t* engine, uint64_t timeout_ns) {
  return guard([&] {
    core::Engine* e = engine_from(engine, "fl_engine_drain");
    core::refuse_if_capturing(*e, "fl_engine_drain");
    return e->cancel_drain().drain(Deadline::after_ns(timeout_ns));
  });
}

FL_API fl_status_t fl_engine_destroy(fl_engine_t* engine) {
  return guard([&] {
    if (engine == nullptr) return FL_OK;
    const uint64_t h = handle_bits(engine);
    core::Engine* e = engine_from(engine, "fl_engine_destroy");
    e->check_destroy_allowed();  // refused from code the engine runs (compares addresses only)
    // Claimed before anything of the engine is read: of two concurrent destroys one goes on,
    // the other is answered here without touching what the first one frees.
    if (engine_table().claim(h) == nullptr)
      fail(FL_ERR_INVALID_HANDLE, "fl_engine_destroy: the engine is already being destroyed");
    // Drain with the handle still valid (claimed handles are found by lookups): callbacks
    // that run during the drain may use the engine (their submissions get FL_ERR_SHUTDOWN).
    // Then the handle goes stale.
    e->shutdown();
    engine_table().erase_claimed(h);
    delete e;
    return FL_OK;
  });
}

FL_API uint32_t fl_engine_lane_count(const fl_engine_t* engine) {
  core::Engine* e = engine ? engine_table().lookup(handle_bits(engine)) : nullptr;
  return e ? e->lane_count() : 0;
}

FL_API uint32_t fl_engine_worker_count(const fl_engine_t* engine) {
  core::Engine* e = engine ? engine_table().lookup(handle_bits(engine)) : nullptr;
  return e ? e->worker_count() : 0;
}

FL_API fl_status_t fl_engine_stats(fl_engine_t* engine, fl_engine_stats_t* out_stats) {
  return guard([&] {
    core::Engine* e = engine_from(engine, "fl_engine_stats");
    require_out(out_stats, "fl_engine_stats", "out_stats");
    uint64_t size = out_stats->struct_size;
    if (size < sizeof(uint64_t) * 2)
      fail(FL_ERR_INVALID_ARGUMENT, "fl_engine_stats: out_stats->struct_size must be set (FL_ENGINE_STATS_INIT)");
    fl_engine_stats_t st = e->stats();
    size_t n = std::min<uint64_t>(size, sizeof(st));
    std::memcpy(reinterpret_cast<char*>(out_stats) + sizeof(uint64_t), reinterpret_cast<char*>(&st) + sizeof(uint64_t),
                n - sizeof(uint64_t));
    return FL_OK;
  });
}

// ---------------------------------------------------------------------------------------
// Lanes

FL_API fl_status_t fl_lane_acquire(fl_engine_t* engine, uint32_t* out_lane) {
  return guard([&] {
    core::Engine* e = engine_from(engine, "fl_lane_acquire");
    require_out(out_lane, "fl_lane_acquire", "out_lane");
    *out_lane = e->acquire_lane();
    return FL_OK;
  });
}

FL_API fl_status_t fl_lane_release(fl_engine_t* engine, uint32_t lane) {
  return guard([&] {
    engine_from(engine, "fl_lane_release")->release_lane(lane);
    return FL_OK;
  });
}

// ---------------------------------------------------------------------------------------
// Streams

FL_API fl_status_t fl_stream_get(fl_engine_t* engine, uint32_t lane, fl_device_t device, fl_stream_kind_t kind,
                                 fl_stream_t** out_stream) {
  return guard([&] {
    core::Engine* e = engine_from(engine, "fl_stream_get");
    require_out(out_stream, "fl_stream_get", "out_stream");
    if (lane >= e->lane_count()) fail(FL_ERR_OUT_OF_RANGE, lane_out_of_range("fl_stream_get", lane, *e));
    const int64_t kind_bits = enum_bits(kind);
    if (kind_bits < 0 || kind_bits > FL_STREAM_COLLECTIVE)
      fail(FL_ERR_INVALID_ARGUMENT, "fl_stream_get: stream kind " + std::to_string(kind_bits) +
                                        " is unknown (FL_STREAM_HOST..FL_STREAM_COLLECTIVE)");
    if (device.type == FL_DEVICE_CPU) {
      if (device.index != 0)
        fail(FL_ERR_INVALID_ARGUMENT, "fl_stream_get: the CPU device has index 0, not " + std::to_string(device.index));
      if (kind != FL_STREAM_HOST && kind != FL_STREAM_COLLECTIVE)
        fail(FL_ERR_INVALID_ARGUMENT,
             "fl_stream_get: the CPU device has FL_STREAM_HOST and FL_STREAM_COLLECTIVE streams only; "
             "COMPUTE, H2D and D2H streams belong to a CUDA device");
    } else if (device.type == FL_DEVICE_CUDA) {
      if (kind == FL_STREAM_HOST)
        fail(FL_ERR_INVALID_ARGUMENT, "fl_stream_get: FL_STREAM_HOST streams use the device {FL_DEVICE_CPU, 0}");
      if (e->device() == nullptr) fail(FL_ERR_UNSUPPORTED, gpu::unavailable("fl_stream_get"));
      const uint32_t devices = e->device_count();  // CUDA devices seen when the engine was created
      if (device.index < 0 || uint32_t(device.index) >= devices)
        fail(FL_ERR_NO_DEVICE, "fl_stream_get: CUDA device " + std::to_string(device.index) +
                                   " does not exist: this process sees " + std::to_string(devices) +
                                   " CUDA device(s)");
    } else {
      fail(FL_ERR_INVALID_ARGUMENT, "fl_stream_get: device type " + std::to_string(device.type) +
                                        " is unknown (FL_DEVICE_CPU or FL_DEVICE_CUDA)");
    }
    *out_stream = handle_cast<fl_stream_t>(e->stream(lane, device, kind)->handle);
    return FL_OK;
  });
}

FL_API fl_status_t fl_stream_synchronize(fl_stream_t* stream) {
  return guard([&] {
    core::Stream* s = stream_from(stream, "fl_stream_synchronize");
    core::refuse_if_capturing(*s->engine, "fl_stream_synchronize");
    return s->engine->waits().synchronize(s);
  });
}

FL_API fl_status_t fl_stream_synchronize_for(fl_stream_t* stream, uint64_t timeout_ns) {
  return guard([&] {
    core::Stream* s = stream_from(stream, "fl_stream_synchronize_for");
    core::refuse_if_capturing(*s->engine, "fl_stream_synchronize_for");
    return s->engine->waits().synchronize(s, Deadline::after_ns(timeout_ns));
  });
}

FL_API fl_status_t fl_stream_cancel(fl_stream_t* stream) {
  return guard([&] {
    core::Stream* s = stream_from(stream, "fl_stream_cancel");
    s->engine->cancel_drain().cancel_stream(s);
    return FL_OK;
  });
}

FL_API fl_status_t fl_stream_info(fl_stream_t* stream, uint32_t* out_lane, fl_device_t* out_device,
                                  fl_stream_kind_t* out_kind) {
  return guard([&] {
    core::Stream* s = stream_from(stream, "fl_stream_info");
    if (out_lane) *out_lane = s->lane->id;
    if (out_device) *out_device = s->device;
    if (out_kind) *out_kind = s->kind;
    return FL_OK;
  });
}

}  // extern "C"
