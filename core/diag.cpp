// Diagnostics entry points: watchdog, state dump and traces (issue 7). The machinery lives
// in core/watchdog.cpp, core/dump.cpp and core/trace.cpp; fl_engine_stats lives with the
// engine (capi_engine.cpp).
#include <cstring>
#include <string>

#include "capi/src/capi_common.hpp"
#include "core/dump.hpp"
#include "core/trace.hpp"
#include "core/watchdog.hpp"

using namespace flowlane;

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
    core::watchdog_configure(e, desc->timeout_ms, desc->callback, desc->user_data, desc->path);
    return FL_OK;
  });
}

FL_API fl_status_t fl_engine_dump(fl_engine_t* engine, char* buffer, uint64_t size, uint64_t* out_needed) {
  return guard([&]() -> fl_status_t {
    core::Engine* e = engine_from(engine, "fl_engine_dump");
    if (buffer == nullptr && size != 0)
      fail(FL_ERR_INVALID_ARGUMENT, "fl_engine_dump: buffer is NULL but size is " + std::to_string(size));
    std::string text = core::build_dump(*e, "on demand (fl_engine_dump)");
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
    core::trace_start(e, e->diagnostics(), path);
    return FL_OK;
  });
}

FL_API fl_status_t fl_trace_stop(fl_engine_t* engine) {
  return guard([&]() -> fl_status_t {
    core::Engine* e = engine_from(engine, "fl_trace_stop");
    core::trace_stop(e, /*at_destroy=*/false);
    return FL_OK;
  });
}

}  // extern "C"
