// Helpers shared by the C API suites (public API only): a hang guard that turns a deadlock
// into a clear failure, small engine helpers (flguard), and the instruction, object and
// gate helpers several conformance files use (flcapi; each file names the ones it uses).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace flguard {

// Aborts the process with a message when the guarded scope has not finished after a
// generous deadline: a deadlocked engine otherwise hangs CI until ctest's timeout, with no
// word on what hung. The deadline is never a performance bound: passing runs finish in a
// small fraction of it.
class HangGuard {
 public:
  // FLOWLANE_HANG_GUARD_S overrides the deadline (e.g. to run the suite quickly against a
  // revision known to hang).
  explicit HangGuard(std::string what, int seconds = int(fl_scaled(120, 600)))
      : what_(std::move(what)), thread_([this, seconds] { watch(override_s(seconds)); }) {}
  ~HangGuard() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  HangGuard(const HangGuard&) = delete;
  HangGuard& operator=(const HangGuard&) = delete;

 private:
  static int override_s(int seconds) {
    const char* env = std::getenv("FLOWLANE_HANG_GUARD_S");
    return env != nullptr && std::atoi(env) > 0 ? std::atoi(env) : seconds;
  }
  void watch(int seconds) {
    std::unique_lock<std::mutex> lk(mu_);
    if (cv_.wait_for(lk, std::chrono::seconds(seconds), [this] { return done_; })) return;
    std::fprintf(stderr,
                 "\nHANG: '%s' did not finish within %d s: the engine deadlocked (or a callback never "
                 "returned). Aborting so that the test fails instead of hanging.\n",
                 what_.c_str(), seconds);
    std::fflush(stderr);
    std::abort();
  }

  std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

inline fl_engine_t* make_engine(uint64_t workers, uint64_t lanes = 0, uint64_t window = 0) {
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = workers;
  d.max_lanes = lanes;
  d.inflight_limit = window;
  fl_engine_t* e = nullptr;
  EXPECT_EQ(fl_engine_create(&d, &e), FL_OK) << fl_last_error_message();
  return e;
}

inline fl_stream_t* host_stream(fl_engine_t* e, uint32_t lane) {
  fl_stream_t* s = nullptr;
  fl_device_t cpu{FL_DEVICE_CPU, 0};
  EXPECT_EQ(fl_stream_get(e, lane, cpu, FL_STREAM_HOST, &s), FL_OK) << fl_last_error_message();
  return s;
}

inline bool has(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// Submits fn(user_data) with the given operands; returns the status (nothing else owned).
inline fl_status_t submit_raw(fl_stream_t* s, fl_host_fn fn, void* ud, const fl_operand_t* ops, size_t n,
                              const char* name = nullptr, fl_release_fn cleanup = nullptr,
                              fl_instr_id* out_id = nullptr) {
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = fn;
  in.user_data = ud;
  in.cleanup = cleanup;
  in.operands = n ? ops : nullptr;
  in.num_operands = n;
  in.name = name;
  fl_instr_id id = 0;
  fl_status_t st = fl_submit_host(s, &in, &id);
  if (out_id) *out_id = id;
  return st;
}

}  // namespace flguard

namespace flcapi {

constexpr uint64_t kMs = 1'000'000;  // nanoseconds

inline bool contains(const std::string& hay, const std::string& needle) { return flguard::has(hay, needle); }

inline fl_status_t noop(fl_instr_ctx_t*, void*) { return FL_OK; }

// Adds one to the std::atomic<int> at ud.
inline fl_status_t bump(fl_instr_ctx_t*, void* ud) {
  static_cast<std::atomic<int>*>(ud)->fetch_add(1);
  return FL_OK;
}

// A release or cleanup callback that adds one to the std::atomic<int> at ud.
inline void count_release(void* ud) { static_cast<std::atomic<int>*>(ud)->fetch_add(1); }

// Submits fn(ud) with the given operands and expects FL_OK; returns the instruction's id.
inline fl_instr_id submit(fl_stream_t* s, fl_host_fn fn, void* ud, std::vector<fl_operand_t> ops = {},
                          const char* name = nullptr, fl_release_fn cleanup = nullptr) {
  fl_instr_id id = 0;
  EXPECT_EQ(flguard::submit_raw(s, fn, ud, ops.data(), ops.size(), name, cleanup, &id), FL_OK)
      << fl_last_error_message();
  return id;
}

inline fl_object_t* make_object(fl_engine_t* e, void* ud = nullptr, fl_release_fn rel = nullptr) {
  fl_object_t* o = nullptr;
  EXPECT_EQ(fl_object_create(e, ud, rel, &o), FL_OK) << fl_last_error_message();
  return o;
}

// Submits an instruction named `name` that fails (FL_ERR_INSTRUCTION_FAILED) and writes o.
inline fl_instr_id submit_failing(fl_stream_t* s, fl_object_t* o, const char* name) {
  return fltest::submit(s, [] { return FL_ERR_INSTRUCTION_FAILED; }, {fltest::W(o)}, name);
}

// The engine still works: a submission runs and synchronize and destroy succeed.
inline void check_usable_and_destroy(fl_engine_t* e) {
  std::atomic<bool> ran{false};
  fltest::submit(flguard::host_stream(e, 1), [&] {
    ran = true;
    return FL_OK;
  });
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_TRUE(ran.load());
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// Polls fl_instr_query until instruction `id` of s is terminal (a query consumes nothing);
// false after 60 s.
inline bool wait_terminal(fl_stream_t* s, fl_instr_id id, uint32_t* out_state = nullptr) {
  auto deadline = fltest::Clock::now() + std::chrono::seconds(60);
  for (;;) {
    uint32_t st = FL_INSTR_PENDING;
    if (fl_instr_query(s, id, &st) != FL_OK) return false;
    if (st != FL_INSTR_PENDING) {
      if (out_state) *out_state = st;
      return true;
    }
    if (fltest::Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

// The whole file at path ("" when it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A gate held by the test: instructions behind it stay pending until it opens.
struct Held {
  fltest::Gate gate;
  std::atomic<bool> started{false};
  fl_instr_id id = 0;
  Held(fl_stream_t* s, fl_object_t* w) {
    id = fltest::submit(s, [this] {
      started = true;
      return gate.wait() ? FL_OK : FL_ERR_TIMEOUT;
    }, {fltest::W(w)}, "held");
  }
  void wait_started() const {
    while (!started.load()) std::this_thread::yield();
  }
};

}  // namespace flcapi

// What the C API suites use unqualified.
using flguard::HangGuard;
using flguard::has;
using flguard::host_stream;
using flguard::make_engine;
using fltest::Gate;
using fltest::R;
using fltest::RW;
using fltest::submit;
using fltest::W;
