// A core::Engine built directly (no C API), for white-box tests of the dependency rules,
// the lane strand and the window: instructions are closures, records and objects are the
// engine's own, and an Observer logs the edges the engine records.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "engine/engine.hpp"

#ifndef FL_UNDER_SANITIZER
#define FL_UNDER_SANITIZER 0
#endif

namespace flowlane::core::testing {

using Clock = std::chrono::steady_clock;

// Waits (60 s at most, so a broken engine fails instead of hanging) until pred() holds.
template <class Pred>
bool eventually(Pred pred) {
  auto deadline = Clock::now() + std::chrono::seconds(60);
  while (!pred()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// A flag instructions wait on.
struct Gate {
  std::atomic<bool> open{false};
  fl_status_t wait() const { return eventually([this] { return open.load(); }) ? FL_OK : FL_ERR_TIMEOUT; }
};

// Records every cross-stream edge the engine publishes (Observer::on_edge), by id.
struct EdgeLog : Observer {
  std::mutex mu;
  std::vector<std::pair<fl_instr_id, fl_instr_id>> edges;
  void on_edge(const Instr& pred, const Instr& succ, const Object*) override {
    std::lock_guard<std::mutex> lock(mu);
    edges.emplace_back(pred.id, succ.id);
  }
  bool has(fl_instr_id pred, fl_instr_id succ) {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& e : edges)
      if (e.first == pred && e.second == succ) return true;
    return false;
  }
  size_t into(fl_instr_id succ) {
    std::lock_guard<std::mutex> lock(mu);
    size_t n = 0;
    for (auto& e : edges) n += e.second == succ;
    return n;
  }
};

struct Rig {
  static fl_engine_desc_t desc(unsigned workers, uint64_t window) {
    fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
    d.num_workers = workers;
    d.inflight_limit = window;
    return d;
  }
  Engine engine;
  EdgeLog* log = nullptr;  // owned by the engine

  explicit Rig(unsigned workers = 2, uint64_t window = 0) : engine(desc(workers, window), EngineServices{}) {
    auto l = std::make_unique<EdgeLog>();
    log = l.get();
    engine.set_observer(std::move(l));
  }

  Stream* host(uint32_t lane) { return engine.stream(lane, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST); }
  Object* object() { return engine.objects().create(nullptr, nullptr); }

  // A submitted instruction: its id, and its record (valid only until it completes: hold it
  // with a Gate to inspect it).
  struct Sub {
    Instr* i;
    fl_instr_id id;
  };

  // Submits `f` on `s` with the operands. Throws flowlane::Error as Engine::submit does.
  Sub submit(Stream* s, std::vector<Operand> ops, std::function<fl_status_t()> f, const char* name = nullptr,
                bool nonblocking = false, bool run_inline = false) {
    Instr* i = engine.new_instr();
    i->operands = std::move(ops);
    SubmitArgs a;
    a.fn = [](fl_instr_ctx_t*, void* ud) { return (*static_cast<std::function<fl_status_t()>*>(ud))(); };
    a.cleanup = [](void* ud) { delete static_cast<std::function<fl_status_t()>*>(ud); };
    a.user_data = new std::function<fl_status_t()>(std::move(f));
    a.name = name;
    a.nonblocking = nonblocking;
    a.run_inline = run_inline;
    fl_instr_id id = 0;
    try {
      id = engine.submit(s, i, a);
    } catch (...) {
      delete static_cast<std::function<fl_status_t()>*>(a.user_data);  // refused: cleanup never runs
      throw;
    }
    return Sub{i, id};
  }

  // Waits for everything submitted to s (60 s at most); true when done.
  bool sync(Stream* s) { return engine.waits().synchronize(s, Deadline::after_ns(60'000'000'000ull)) == FL_OK; }
};

inline Operand R(Object* o) { return Operand{o, FL_READ}; }
inline Operand W(Object* o) { return Operand{o, FL_WRITE}; }
inline Operand RW(Object* o) { return Operand{o, FL_READ_WRITE}; }

}  // namespace flowlane::core::testing
