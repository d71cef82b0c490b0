// Waiting for streams and the engine (fl_stream_synchronize, fl_engine_synchronize) and the
// failure ledger that decides which failure a wait returns (core/engine/README.md, "Errors").
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
// The failure ledger (core/engine/README.md, "Errors").
//
// A failed instruction is the root of a family; every instruction skipped because an
// input it reads was poisoned by that failure (directly or through other skipped ones)
// joins the root's family. A family is returned once, by the first wait that covers one of
// its members (or observes its poison through fl_object_wait), with the root's message and
// the number of instructions skipped because of it. Families not yet returned are listed
// oldest first, engine-wide (roots) and per stream (every member), so a synchronize finds
// the one to return at the head of a list: O(1) per call, whatever the number of failures
// or dependents. Returning a family unlinks its members (each was linked once), and a
// returned family holds no ledger memory: a loop of failures that are each observed keeps
// the ledger empty.

namespace {

void stream_link(Stream* s, Instr* i) {
  i->stream_prev = s->failed_tail;
  i->stream_next = nullptr;
  (s->failed_tail ? s->failed_tail->stream_next : s->failed_head) = i;
  s->failed_tail = i;
}

void stream_unlink(Stream* s, Instr* i) {
  (i->stream_prev ? i->stream_prev->stream_next : s->failed_head) = i->stream_next;
  (i->stream_next ? i->stream_next->stream_prev : s->failed_tail) = i->stream_prev;
  i->stream_prev = i->stream_next = nullptr;
}

// " (3 instructions that depended on it were skipped)"
std::string skipped_note(uint64_t n) {
  if (n == 0) return "";
  return " (" + std::to_string(n) + (n == 1 ? " instruction that depended on it was" : " instructions that depended on it were") +
         " skipped)";
}

}  // namespace

void Engine::record_failure(Instr* i) {
  std::lock_guard<std::mutex> lock(ledger_mu_);
  Instr* root = i->root;
  if (root->returned) {  // its family was returned already (its poison was observed)
    if (root != i) ++root->skipped;
    return;
  }
  i->ref();  // pinned while listed
  i->listed = true;
  stream_link(i->stream, i);
  if (root == i) {
    i->ledger_prev = ledger_tail_;
    i->ledger_next = nullptr;
    (ledger_tail_ ? ledger_tail_->ledger_next : ledger_head_) = i;
    ledger_tail_ = i;
    ++ledger_size_;
  } else {
    ++root->skipped;
    i->next_member = root->next_member;
    root->next_member = i;
  }
}

void Engine::unlink_family(Instr* root) {
  root->returned = true;
  std::vector<Instr*> unpin;  // recycled after the lists are consistent again
  if (root->listed) {
    (root->ledger_prev ? root->ledger_prev->ledger_next : ledger_head_) = root->ledger_next;
    (root->ledger_next ? root->ledger_next->ledger_prev : ledger_tail_) = root->ledger_prev;
    root->ledger_prev = root->ledger_next = nullptr;
    --ledger_size_;
  }
  for (Instr* m = root->next_member; m != nullptr;) {
    Instr* next = m->next_member;
    stream_unlink(m->stream, m);
    m->listed = false;
    m->next_member = nullptr;
    if (m->unref()) recycle(m);  // a member holds a reference on root: root outlives this loop
    m = next;
  }
  root->next_member = nullptr;
  if (root->listed) {
    stream_unlink(root->stream, root);
    root->listed = false;
    if (root->unref()) recycle(root);
  }
}

size_t Engine::unreturned_failures(std::string* oldest) const {
  std::lock_guard<std::mutex> lock(ledger_mu_);
  if (oldest != nullptr && ledger_head_ != nullptr) *oldest = ledger_head_->error + skipped_note(ledger_head_->skipped);
  return ledger_size_;
}

void Engine::family_returned(Instr* root) {
  std::lock_guard<std::mutex> lock(ledger_mu_);
  if (!root->returned) unlink_family(root);
}

template <class Pick>
fl_status_t Engine::take_failure(Pick&& pick) {
  fl_status_t st = FL_OK;
  std::string msg;
  {
    std::lock_guard<std::mutex> lock(ledger_mu_);
    Instr* member = pick();
    if (member == nullptr) return FL_OK;
    Instr* root = member->root;
    // The message and status are copied under the lock: the family's records may be
    // recycled the moment it is unlinked.
    st = member->status;
    msg = member->error + skipped_note(root->skipped);
    unlink_family(root);
  }
  return report(st, msg);
}

void Engine::wait_stream(Stream* s, uint64_t target) {
  sched::wait([s, target] { return s->completed.load(std::memory_order_acquire) >= target; },
              [s, target] { s->wait_completed(target); });
}

namespace {

// Tells diagnostics that the running callback of `self`'s lane waits in `call` (no-op when
// the caller is not inside an instruction's callback).
class WaitNote {
 public:
  WaitNote(Instr* self, const char* call, const Stream* s) : lane_(self ? self->stream->lane : nullptr) {
    if (lane_ == nullptr) return;
    std::lock_guard<SpinLock> lock(lane_->diag_lock);
    lane_->active_waits_call = call;
    lane_->active_waits_stream = s;
  }
  ~WaitNote() {
    if (lane_ == nullptr) return;
    std::lock_guard<SpinLock> lock(lane_->diag_lock);
    lane_->active_waits_call = nullptr;
    lane_->active_waits_stream = nullptr;
  }

 private:
  Lane* lane_;
};

}  // namespace

fl_status_t Engine::synchronize() {
  if (Instr* self = pending_instr(this))
    fail(FL_ERR_INVALID_ARGUMENT, "fl_engine_synchronize called from inside a callback of instruction " +
                                      self->describe() + " (its function, cleanup, or a release its completion runs)"
                                      ": it would wait for that instruction itself");
  // Failures of instructions recorded before the call (ids are taken in recording order).
  const fl_instr_id before = next_id_.load(std::memory_order_acquire);
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
  return take_failure([this, before]() -> Instr* {
    for (Instr* r = ledger_head_; r != nullptr; r = r->ledger_next)  // oldest first; usually the head
      if (r->id < before) return r;
    return nullptr;
  });
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
  WaitNote note(current_instr(), "fl_stream_synchronize", s);
  wait_stream(s, target);
  if (ob) ob->on_wait(false, "fl_stream_synchronize");
  // The stream's oldest listed member (its list is in completion = submission order).
  return take_failure([s, target]() -> Instr* {
    Instr* m = s->failed_head;
    return m != nullptr && m->seq <= target ? m : nullptr;
  });
}

}  // namespace flowlane::core
