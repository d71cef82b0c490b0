// The watchdog thread and the engine's diagnostics lifecycle (diag/watchdog.hpp).
#include "diag/watchdog.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "base/json.hpp"
#include "diag/dump.hpp"
#include "diag/trace.hpp"

namespace flowlane::diag {

using core::Engine;

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kShutdownScan{10};  // how often a draining destroy (or fl_engine_drain) looks for wait cycles

void deliver(const std::string& text, fl_dump_fn cb, void* ud, const std::string& path) {
  if (cb != nullptr) {
    try {
      cb(text.c_str(), ud);
    } catch (...) {
      // A C callback must not throw; nothing to report it to.
    }
    return;
  }
  if (!path.empty()) {
    if (std::FILE* f = std::fopen(path.c_str(), "a")) {
      std::fwrite(text.data(), 1, text.size(), f);
      std::fclose(f);
      return;
    }
    std::fprintf(stderr, "flowlane: watchdog cannot append to '%s'; dump follows on stderr\n", path.c_str());
  }
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

void run(Diagnostics* d) {
  Engine& e = *d->engine;
  std::unique_lock<std::mutex> lk(d->mu);
  uint64_t gen = d->generation;
  uint64_t last_done = completed_total(e);
  Clock::time_point last_change = Clock::now();
  bool was_pending = false;
  bool fired = false;
  while (!d->exit) {
    const bool draining = d->shutdown || d->drains > 0;
    if (draining) {  // destroy or fl_engine_drain is draining: give up waits that can never finish
      lk.unlock();
      cancel_cycle_waits(e);
      lk.lock();
      if (d->exit) break;
    }
    if (d->timeout_ms == 0) {
      if (draining)
        d->cv.wait_for(lk, kShutdownScan);
      else
        d->cv.wait(lk);
      continue;
    }
    Clock::time_point now = Clock::now();
    uint64_t done = completed_total(e);
    bool pending = e.inflight() > 0 || e.window_waiters() > 0;
    if (gen != d->generation || done != last_done || !pending || !was_pending) {
      // Progress, idle, new settings, or the first look at pending work: (re)arm.
      gen = d->generation;
      last_done = done;
      last_change = now;
      fired = false;
    } else if (!fired && now - last_change >= milliseconds(d->timeout_ms)) {
      fired = true;
      ++d->fires;
      fl_dump_fn cb = d->callback;
      void* ud = d->user_data;
      std::string path = d->path;
      // Read under mu: code an engine runs may reconfigure the watchdog while the dump is
      // built and delivered (watchdog_configure does not wait for the callback there).
      const uint64_t timeout_ms = d->timeout_ms;
      uint64_t waited = uint64_t(std::chrono::duration_cast<milliseconds>(now - last_change).count());
      d->in_callback = true;
      lk.unlock();
      std::string text, reason;
      try {
        int64_t inflight = e.inflight();
        reason = "watchdog: no instruction completed for " + std::to_string(waited) + " ms while " +
                 std::to_string(inflight < 0 ? 0 : inflight) + " were in flight (timeout " +
                 std::to_string(timeout_ms) + " ms); it fires once per stall";
        text = build_dump(e, reason);
      } catch (...) {
        text = "flowlane watchdog: building the dump failed (out of memory?)\n";
      }
      {
        core::CallbackScope frame(&e, nullptr, core::CallbackKind::kWatchdog);
        deliver(text, cb, ud, path);
      }
      for (core::Extension* x : e.extensions()) {  // communicators write their dumps
        try {
          x->on_watchdog(reason);
        } catch (...) {  // out of memory: that extension's reaction is lost, the watchdog goes on
        }
      }
      lk.lock();
      d->in_callback = false;
      d->callback_done_cv.notify_all();
      continue;
    }
    was_pending = pending;
    milliseconds period = std::clamp(milliseconds(d->timeout_ms / 4), milliseconds(5), milliseconds(1000));
    if (draining) period = std::min(period, kShutdownScan);
    d->cv.wait_for(lk, period);
  }
}

std::atomic<uint64_t> g_engines{0};  // engines created by this process (FLOWLANE_TRACE's %e)

}  // namespace

uint64_t completed_total(const Engine& e) {
  uint64_t n = 0;
  for (const auto& lane : e.lanes()) n += lane->completed_count();
  return n;
}

namespace {
const char kDiagnosticsKey = 0;  // its address keys the extension
}  // namespace

Diagnostics& attach(Engine& e) {
  auto* d = static_cast<Diagnostics*>(e.attach(&kDiagnosticsKey, std::make_unique<Diagnostics>(&e)));
  uint64_t n = g_engines.fetch_add(1, std::memory_order_relaxed) + 1;
  if (const char* env = std::getenv("FLOWLANE_TRACE"); env != nullptr && *env != 0) {
    std::string path = env;
    for (size_t at; (at = path.find("%e")) != std::string::npos;) path.replace(at, 2, std::to_string(n));
    try {
      trace_start(&e, path.c_str());
    } catch (const Error& err) {
      std::fprintf(stderr, "flowlane: FLOWLANE_TRACE ignored: %s\n", err.message.c_str());
    }
  }
  return *d;
}

namespace {
// FLOWLANE_WATCHDOG_MS, read at each engine creation: 0 when unset, empty or not a count of
// milliseconds up to kMaxWatchdogMs (said on stderr, as FLOWLANE_TRACE's errors are).
uint64_t watchdog_ms_from_env() {
  const char* v = std::getenv("FLOWLANE_WATCHDOG_MS");
  if (v == nullptr || *v == 0) return 0;
  uint64_t ms = 0;
  const char* p = v;
  for (; *p >= '0' && *p <= '9' && ms <= kMaxWatchdogMs; ++p) ms = ms * 10 + uint64_t(*p - '0');
  if (*p == 0 && ms <= kMaxWatchdogMs) return ms;
  std::fprintf(stderr,
               "flowlane: FLOWLANE_WATCHDOG_MS ignored: '%s' is not a timeout in milliseconds (0 .. %llu, one day)\n", v,
               static_cast<unsigned long long>(kMaxWatchdogMs));
  return 0;
}
}  // namespace

void extend_engine(Engine& e, const fl_engine_desc_t& desc) {
  attach(e);
  const uint64_t ms = desc.watchdog_ms != 0 ? desc.watchdog_ms : watchdog_ms_from_env();
  if (ms != 0) watchdog_configure(&e, ms, nullptr, nullptr, nullptr);
}

Diagnostics& diagnostics(Engine& e) {
  Diagnostics* d = static_cast<Diagnostics*>(e.extension(&kDiagnosticsKey));
  return d != nullptr ? *d : attach(e);
}

// Work a drain would wait for: instructions in flight, or fork-join tasks (a cycle of waits
// may run through task groups only).
static bool busy(const Engine& e) { return e.inflight() > 0 || !e.pools_quiescent(); }

void Diagnostics::begin_shutdown() {
  std::lock_guard<std::mutex> lk(mu);
  shutdown = true;
  if (!thread.joinable() && busy(*engine)) thread = std::thread(run, this);
  cv.notify_all();
}

void Diagnostics::begin_drain() {
  std::lock_guard<std::mutex> lk(mu);
  ++drains;
  if (!thread.joinable() && !exit && busy(*engine)) thread = std::thread(run, this);
  cv.notify_all();
}

void Diagnostics::end_drain() {
  std::lock_guard<std::mutex> lk(mu);
  --drains;
}

void Diagnostics::end_shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu);
    exit = true;
    cv.notify_all();
  }
  if (thread.joinable()) thread.join();
  trace_stop(engine, /*at_destroy=*/true);
}

void Diagnostics::dump_json(std::string& out) {
  out += lanes_json(*engine);
  out += ",\n\"text\":" + json_string(build_dump(*engine, ""), kMaxJsonText);
}

Diagnostics::~Diagnostics() {
  {
    std::lock_guard<std::mutex> lk(mu);
    exit = true;
    cv.notify_all();
  }
  if (thread.joinable()) thread.join();
}

void watchdog_configure(Engine* e, uint64_t timeout_ms, fl_dump_fn cb, void* user_data, const char* path) {
  Diagnostics* d = &diagnostics(*e);
  std::unique_lock<std::mutex> lk(d->mu);
  // A dump callback that is running finishes before the settings change, so that its
  // user_data may be freed once this returns; unless this is that callback reconfiguring the
  // watchdog, or code an engine runs: the callback may be waiting for that very code (an
  // allowed wait), and waiting here would close a cycle nobody wrote.
  if (std::this_thread::get_id() != d->thread.get_id() && !core::in_any_engine_context())
    d->callback_done_cv.wait(lk, [d] { return !d->in_callback; });
  d->timeout_ms = timeout_ms;
  d->callback = cb;
  d->user_data = user_data;
  d->path = path ? path : "";
  ++d->generation;
  if (timeout_ms != 0 && !d->thread.joinable() && !d->exit) d->thread = std::thread(run, d);
  d->cv.notify_all();
}

}  // namespace flowlane::diag
