// Diagnostics entry points: watchdog, state dump and traces. The machinery lives in
// core/diag/; fl_engine_stats lives with the engine (capi/src/engine.cpp).
#include <cstring>
#include <string>

#include "boundary.hpp"
#include "diag/dump.hpp"
#include "diag/trace.hpp"
#include "diag/watchdog.hpp"
#include "tables.hpp"

using namespace flowlane;
using namespace flowlane::capi;

extern "C" {

FL_API fl_status_t fl_engine_set_watchdog(fl_engine_t* engine, const fl_watchdog_desc_t* desc) {
  return guard([&]() -> fl_status_t {
    core::Engine* e = engine_from(engine, "fl_engine_set_watchdog");
    check_desc(desc, "fl_engine_set_watchdog", "fl_watchdog_desc_t");
    if (desc->flags != 0)
      fail(FL_ERR_INVALID_ARGUMENT,
           "fl_engine_set_watchdog: flags " + std::to_string(desc->flags) + " are unknown (use 0)");
    if (desc->timeout_ms > 86'400'000)
      fail(FL_ERR_OUT_OF_RANGE, "fl_engine_set_watchdog: timeout_ms " + std::to_string(desc->timeout_ms) +
                                    " exceeds one day (86400000)");
    if (desc->path != nullptr && *desc->path == 0)
      fail(FL_ERR_INVALID_ARGUMENT, "fl_engine_set_watchdog: path is empty (NULL means stderr)");
    diag::watchdog_configure(e, desc->timeout_ms, desc->callback, desc->user_data, desc->path);
    return FL_OK;
  });
}

FL_API fl_status_t fl_engine_dump(fl_engine_t* engine, char* buffer, uint64_t size, uint64_t* out_needed) {
  return guard([&]() -> fl_status_t {
    core::Engine* e = engine_from(engine, "fl_engine_dump");
    if (buffer == nullptr && size != 0)
      fail(FL_ERR_INVALID_ARGUMENT, "fl_engine_dump: buffer is NULL but size is " + std::to_string(size));
    std::string text = diag::build_dump(*e, "on demand (fl_engine_dump)");
    if (out_needed) *out_needed = uint64_t(text.size()) + 1;
    if (size > 0) {
      size_t n = std::min<uint64_t>(size - 1, text.size());
      std::memcpy(buffer, text.data(), n);
      buffer[n] = 0;
    }
    return FL_OK;
  });
}

FL_API fl_status_t fl_trace_start(fl_engine_t* engine, const char* path) {
  return guard([&]() -> fl_status_t {
    core::Engine* e = engine_from(engine, "fl_trace_start");
    diag::trace_start(e, path);
    return FL_OK;
  });
}

FL_API fl_status_t fl_trace_stop(fl_engine_t* engine) {
  return guard([&]() -> fl_status_t {
    core::Engine* e = engine_from(engine, "fl_trace_stop");
    diag::trace_stop(e, /*at_destroy=*/false);
    return FL_OK;
  });
}

}  // extern "C"
