// Diagnostics entry points: watchdog, state dump and traces (issue 7, not written yet).
// fl_engine_stats lives with the engine (capi_engine.cpp).
#include <string>

#include "capi/src/capi_common.hpp"

using namespace flowlane;

extern "C" {

FL_API fl_status_t fl_engine_set_watchdog(fl_engine_t* engine, const fl_watchdog_desc_t* desc) {
  return guard([&]() -> fl_status_t {
    engine_from(engine, "fl_engine_set_watchdog");
    check_desc(desc, "fl_engine_set_watchdog", "fl_watchdog_desc_t");
    fail(FL_ERR_UNSUPPORTED, "fl_engine_set_watchdog: the watchdog is not implemented in this version yet");
  });
}

FL_API fl_status_t fl_engine_dump(fl_engine_t* engine, char* buffer, uint64_t size, uint64_t* out_needed) {
  (void)buffer, (void)size, (void)out_needed;
  return guard([&]() -> fl_status_t {
    engine_from(engine, "fl_engine_dump");
    fail(FL_ERR_UNSUPPORTED, "fl_engine_dump: the state dump is not implemented in this version yet");
  });
}

FL_API fl_status_t fl_trace_start(fl_engine_t* engine, const char* path) {
  (void)path;
  return guard([&]() -> fl_status_t {
    engine_from(engine, "fl_trace_start");
    fail(FL_ERR_UNSUPPORTED, "fl_trace_start: tracing is not implemented in this version yet");
  });
}

FL_API fl_status_t fl_trace_stop(fl_engine_t* engine) {
  return guard([&]() -> fl_status_t {
    engine_from(engine, "fl_trace_stop");
    fail(FL_ERR_UNSUPPORTED, "fl_trace_stop: tracing is not implemented in this version yet");
  });
}

}  // extern "C"
