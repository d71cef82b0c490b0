// Helpers shared by the diagnostics, communicator and trace suites (public API only).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace fldiag {

using fltest::Clock;
using fltest::Closure;
using fltest::Gate;
using fltest::make_obj;
using fltest::R;
using fltest::RW;
using fltest::submit;
using fltest::W;

// Collects watchdog dumps delivered to a callback.
struct DumpCatcher {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> dumps;
  static void on_dump(const char* text, void* ud) {
    auto* self = static_cast<DumpCatcher*>(ud);
    std::lock_guard<std::mutex> lk(self->mu);
    self->dumps.emplace_back(text);
    self->cv.notify_all();
  }
  // Installs the callback form with `timeout_ms`.
  void install(fl_engine_t* e, uint64_t timeout_ms = 200) {
    fl_watchdog_desc_t w = FL_WATCHDOG_DESC_INIT;
    w.timeout_ms = timeout_ms;
    w.callback = &DumpCatcher::on_dump;
    w.user_data = this;
    ASSERT_FL_OK(fl_engine_set_watchdog(e, &w));
  }
  // Waits (generous bound: 30 s) for the n-th dump; "" if none came.
  std::string wait_for(size_t n = 1) {
    std::unique_lock<std::mutex> lk(mu);
    if (!cv.wait_for(lk, std::chrono::seconds(30), [&] { return dumps.size() >= n; })) return "";
    return dumps[n - 1];
  }
  size_t count() {
    std::lock_guard<std::mutex> lk(mu);
    return dumps.size();
  }
};

inline fl_stream_t* host_of(fl_engine_t* e, uint32_t lane) {
  fl_stream_t* s = nullptr;
  fl_device_t cpu{FL_DEVICE_CPU, 0};
  EXPECT_EQ(fl_stream_get(e, lane, cpu, FL_STREAM_HOST, &s), FL_OK) << fl_last_error_message();
  return s;
}
inline fl_stream_t* coll_of(fl_engine_t* e, uint32_t lane) {
  fl_stream_t* s = nullptr;
  fl_device_t cpu{FL_DEVICE_CPU, 0};
  EXPECT_EQ(fl_stream_get(e, lane, cpu, FL_STREAM_COLLECTIVE, &s), FL_OK) << fl_last_error_message();
  return s;
}

inline bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

inline std::string dump_now(fl_engine_t* e) { return fltest::engine_dump(e); }

}  // namespace fldiag
