// Waiting for streams and the engine (fl_stream_synchronize, fl_engine_synchronize) and the
// failure ledger that decides which failure a wait returns (core/engine/README.md, "Errors").
#include <algorithm>
#include <string>
#include <vector>

#include "engine/engine.hpp"

namespace flowlane::core {

// ---------------------------------------------------------------------------------------
// Stream completion counters

void Stream::advance_completed() {
  // seq_cst: everything the instruction did (cleanup, release callbacks, failure record)
  // happens-before a waiter that sees the count; and with the waiter's seq_cst store of
  // wake_at and load of completed (wait_completed) a store–load pattern: either the
  // waiter sees this count or we see its target.
  uint64_t now = completed.fetch_add(1, std::memory_order_seq_cst) + 1;
  if (now < wake_at.load(std::memory_order_seq_cst)) return;
  std::lock_guard<std::mutex> lock(wait_mu);
  auto it = targets.upper_bound(now);  // waiters still short of their target stay registered
  wake_at.store(it == targets.end() ? UINT64_MAX : *it, std::memory_order_seq_cst);
  wait_cv.notify_all();
}

void Stream::wait_completed(uint64_t target) {
  if (completed.load(std::memory_order_acquire) >= target) return;
  std::unique_lock<std::mutex> lock(wait_mu);
  auto it = targets.insert(target);
  if (target < wake_at.load(std::memory_order_relaxed)) wake_at.store(target, std::memory_order_seq_cst);
  while (completed.load(std::memory_order_seq_cst) < target) wait_cv.wait(lock);
  targets.erase(it);
}

// ---------------------------------------------------------------------------------------
// Waits and failures

void Engine::record_failure(Instr* i) {
  i->ref();
  std::lock_guard<std::mutex> lock(failures_mu_);
  failures_.push_back(FailureRecord{i});
}

fl_status_t Engine::collect_failure(const std::vector<std::pair<Stream*, uint64_t>>& upto) {
  Instr* first = nullptr;
  std::vector<Instr*> drop;
  {
    std::lock_guard<std::mutex> lock(failures_mu_);
    for (auto it = failures_.begin(); it != failures_.end();) {
      Instr* f = it->instr;
      if (f->reported.load(std::memory_order_relaxed)) {  // returned already: forget it
        drop.push_back(f);
        it = failures_.erase(it);
        continue;
      }
      bool covered = std::any_of(upto.begin(), upto.end(), [f](const auto& p) {
        return p.first == f->stream && f->seq <= p.second;
      });
      if (covered && (first == nullptr || f->id < first->id)) first = f;
      ++it;
    }
    if (first != nullptr) first->reported.store(true, std::memory_order_relaxed);
  }
  fl_status_t st = FL_OK;
  std::string msg;
  if (first != nullptr) {
    st = first->status;
    msg = first->error;
  }
  for (Instr* f : drop)
    if (f->unref()) recycle(f);
  if (st != FL_OK) return report(st, msg);
  return FL_OK;
}

void Engine::wait_stream(Stream* s, uint64_t target) {
  sched::wait([s, target] { return s->completed.load(std::memory_order_acquire) >= target; },
              [s, target] { s->wait_completed(target); });
}

fl_status_t Engine::synchronize() {
  if (Instr* self = pending_instr(this))
    fail(FL_ERR_INVALID_ARGUMENT, "fl_engine_synchronize called from inside a callback of instruction " +
                                      self->describe() + " (its function, cleanup, or a release its completion runs)"
                                      ": it would wait for that instruction itself");
  std::vector<std::pair<Stream*, uint64_t>> upto;
  for (Stream* s : all_streams()) upto.emplace_back(s, s->submitted.load(std::memory_order_acquire));
  Observer* ob = observer();
  if (ob) ob->on_wait(true, "fl_engine_synchronize");
  for (auto& [s, target] : upto) {
    Stream* st = s;
    uint64_t t = target;
    wait_stream(st, t);
  }
  if (ob) ob->on_wait(false, "fl_engine_synchronize");
  return collect_failure(upto);
}

fl_status_t Engine::synchronize(Stream* s) {
  Instr* self = pending_instr(this);
  // Any stream of the caller's own lane: its instructions submitted after the caller (a
  // host stream's, or a CUDA stream's, which launch only once the caller finished) would
  // be waited for by the instruction they queue behind.
  if (self != nullptr && self->stream->lane == s->lane)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_stream_synchronize called from inside a callback of instruction " + self->describe() +
                                      " on a stream of its own lane (" + s->describe() +
                                      "): it would wait for instructions queued behind itself; "
                                      "depend on the objects you need instead");
  uint64_t target = s->submitted.load(std::memory_order_acquire);
  Observer* ob = observer();
  if (ob) ob->on_wait(true, "fl_stream_synchronize");
  wait_stream(s, target);
  if (ob) ob->on_wait(false, "fl_stream_synchronize");
  return collect_failure({{s, target}});
}

}  // namespace flowlane::core
