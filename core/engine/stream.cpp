// A stream's completion counters and its waiters (engine/stream.hpp).
#include "engine/stream.hpp"

#include "base/error.hpp"
#include "engine/lane.hpp"

namespace flowlane::core {

void Stream::advance_completed() {
  // seq_cst: everything the instruction did (cleanup, release callbacks, failure record)
  // happens-before a waiter that sees the count; and with the waiters' seq_cst stores of
  // wake_at / wake_at_id and loads of completed (wait_completed, wait_completed_id) a
  // store–load pattern: either the waiter sees this count (and the id stored before it)
  // or we see its target.
  uint64_t now = completed.fetch_add(1, std::memory_order_seq_cst) + 1;
  // The loads of that pattern: pair with the seq_cst stores in wait_completed() and
  // wait_completed_id(). (Our own last_completed_id store, or a later one: relaxed.)
  if (now < wake_at.load(std::memory_order_seq_cst) &&
      last_completed_id.load(std::memory_order_relaxed) < wake_at_id.load(std::memory_order_seq_cst))
    return;
  std::lock_guard<std::mutex> lock(wait_mu);
  // Waiters already satisfied stay registered until they run; the next targets are the
  // smallest ones not reached yet.
  auto it = targets.upper_bound(now);
  auto jt = id_targets.upper_bound(last_completed_id.load(std::memory_order_relaxed));
  // seq_cst: part of the store-load pattern above (a later completion's loads).
  wake_at.store(it == targets.end() ? UINT64_MAX : *it, std::memory_order_seq_cst);
  wake_at_id.store(jt == id_targets.end() ? UINT64_MAX : *jt, std::memory_order_seq_cst);
  wait_cv.notify_all();
}

namespace {
// Sleeps on `s`'s condition variable (lock held) until reached() or the deadline passes;
// returns whether it was reached.
template <class Reached>
bool sleep_until(Stream* s, std::unique_lock<std::mutex>& lock, const Deadline& deadline, Reached reached) {
  while (!reached()) {
    if (deadline.infinite()) {
      s->wait_cv.wait(lock);
    } else if (s->wait_cv.wait_until(lock, deadline.at()) == std::cv_status::timeout && !reached()) {
      return false;
    }
  }
  return true;
}
}  // namespace

bool Stream::wait_completed(uint64_t target, const Deadline& deadline, const std::atomic<bool>* cancelled) {
  // Acquire pairs with the fetch_add of completed in advance_completed().
  if (completed.load(std::memory_order_acquire) >= target) return true;
  std::unique_lock<std::mutex> lock(wait_mu);
  auto it = targets.insert(target);
  // Store-load pair with advance_completed(): we store wake_at, then load completed; it
  // increments completed, then loads wake_at.
  if (target < wake_at.load(std::memory_order_relaxed)) wake_at.store(target, std::memory_order_seq_cst);
  // The load side of that store-load pair (and acquire: pairs with advance_completed()).
  sleep_until(this, lock, deadline, [this, target, cancelled] {
    return completed.load(std::memory_order_seq_cst) >= target || given_up(cancelled);  // pairs as above
  });
  targets.erase(it);
  return completed.load(std::memory_order_acquire) >= target;  // pairs with advance_completed()
}

bool Stream::wait_completed_id(fl_instr_id id, const Deadline& deadline, const std::atomic<bool>* cancelled) {
  // Acquire pairs with the release store (or CAS) of last_completed_id in Executor::complete().
  if (last_completed_id.load(std::memory_order_acquire) >= id) return true;
  std::unique_lock<std::mutex> lock(wait_mu);
  auto it = id_targets.insert(id);
  // Store-load pair with advance_completed(): we store wake_at_id, then load completed; it
  // stores last_completed_id, increments completed, then loads wake_at_id. Either our
  // load of completed sees its increment (and then, acquire, the id it stored before), or
  // its load of wake_at_id sees our target and it wakes us. (Store-load pair, as above.)
  if (id < wake_at_id.load(std::memory_order_relaxed)) wake_at_id.store(id, std::memory_order_seq_cst);
  sleep_until(this, lock, deadline, [this, id, cancelled] {
    (void)completed.load(std::memory_order_seq_cst);  // the load of the pair above
    // Acquire pairs with the release store (or CAS) of last_completed_id in Executor::complete().
    return last_completed_id.load(std::memory_order_acquire) >= id || given_up(cancelled);
  });
  id_targets.erase(it);
  return last_completed_id.load(std::memory_order_acquire) >= id;  // pairs with Executor::complete(), as above
}

bool Stream::reached(uint64_t target, bool is_id) const {
  // Acquire: pair with the release store (or CAS) of last_completed_id in
  // Executor::complete() and the fetch_add of completed in advance_completed().
  return is_id ? last_completed_id.load(std::memory_order_acquire) >= target
               : completed.load(std::memory_order_acquire) >= target;
}

void Stream::wake_waiters() {
  // Taking wait_mu orders this wake-up after any sleeper's check of its predicate (made
  // under wait_mu): a sleeper that has not seen the flag is in wait() and gets the notify.
  { std::lock_guard<std::mutex> lock(wait_mu); }
  wait_cv.notify_all();
}

void Stream::check_submitted(fl_instr_id id, const char* fn) const {
  // acquire pairs with the release store in Engine::enqueue().
  if (id == 0 || id > last_submitted_id.load(std::memory_order_acquire))
    fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": instruction #" + std::to_string(id) +
                                      " was not submitted to this stream (" + describe() + ")" +
                                      (id == 0 ? "" : " yet"));
}

std::string Stream::describe() const {
  static const char* kKinds[] = {"host", "compute", "h2d", "d2h", "collective"};
  std::string s = "lane " + std::to_string(lane ? lane->id : 0) + ", ";
  if (device.type == FL_DEVICE_CUDA) s += "cuda:" + std::to_string(device.index) + " ";
  s += kKinds[kind];
  return s;
}

}  // namespace flowlane::core
