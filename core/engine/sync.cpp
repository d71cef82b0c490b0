// Waiting for streams and the engine (fl_stream_synchronize, fl_engine_synchronize) and the
// failure ledger that decides which failure a wait returns (core/engine/README.md, "Errors").
#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.hpp"

namespace flowlane::core {

bool Engine::wait_stream(Stream* s, uint64_t target, const Deadline& deadline, const std::atomic<bool>* cancelled) {
  sched::wait([s, target, cancelled] { return s->reached(target, false) || given_up(cancelled); },
              [s, target, cancelled](const Deadline& d) { s->wait_completed(target, d, cancelled); }, deadline);
  return s->reached(target, false);
}

namespace {
[[gnu::cold]] fl_status_t timed_out(const char* call, const Stream* s, uint64_t target) {
  uint64_t done = s->completed.load(std::memory_order_acquire);  // pairs with advance_completed()
  return report(FL_ERR_TIMEOUT, std::string(call) + ": timed out; " + s->describe() + " has completed " +
                                    std::to_string(done) + " of the " + std::to_string(target) +
                                    " instructions it waits for (nothing was returned or consumed: wait again)");
}
}  // namespace

namespace {

// Tells diagnostics that the running instruction `self` (its callback, or a task of one of
// its task groups) waits in `call` for stream `s` to reach `target` (a completion count, or
// an instruction id: `is_id`), so that the state dump shows the wait in its wait-for graph
// and drain and destroy can give it up when it lies on a cycle (cancel_cycle_waits(),
// diag/dump.cpp). A no-op when the caller is not inside a callback of an instruction of
// this engine (`self` null).
class WaitNote {
 public:
  WaitNote(Instr* self, const char* call, Stream* s, uint64_t target, bool is_id)
      : lane_(self ? self->stream->lane : nullptr) {
    if (lane_ == nullptr) return;
    rec_.by = self;
    rec_.call = call;
    rec_.stream = s;
    rec_.target = target;
    rec_.is_id = is_id;
    std::lock_guard<SpinLock> lock(lane_->diag_lock);
    lane_->add_wait(&rec_);
  }
  ~WaitNote() { finish(); }
  WaitNote(const WaitNote&) = delete;
  WaitNote& operator=(const WaitNote&) = delete;

  // What the wait sleeps on besides its target: set when drain or destroy gives it up.
  const std::atomic<bool>* cancel_flag() const { return lane_ ? &rec_.cancelled : nullptr; }

  // Ends the note; true when drain or destroy gave the wait up (it was on a wait cycle)
  // and its target has not been reached. The flag is read under diag_lock, where it is set.
  bool finish() {
    if (lane_ == nullptr) return false;
    std::lock_guard<SpinLock> lock(lane_->diag_lock);
    lane_->remove_wait(&rec_);
    const bool cancelled = rec_.cancelled.load(std::memory_order_relaxed) && !rec_.stream->reached(rec_.target, rec_.is_id);
    lane_ = nullptr;
    return cancelled;
  }

 private:
  Lane* lane_;
  WaitRecord rec_;
};

[[gnu::cold]] fl_status_t wait_given_up(const char* call, const Instr* self, const std::string& what) {
  return report(FL_ERR_CANCELLED, std::string(call) + " in " + self->describe() +
                                      " was cancelled: the engine is being drained or destroyed and this wait for " + what +
                                      " was on a cycle of waits (a deadlock)");
}

}  // namespace

fl_status_t Engine::synchronize(const Deadline& deadline) {
  if (Instr* self = pending_instr(this))
    fail(FL_ERR_INVALID_ARGUMENT, "fl_engine_synchronize called from inside a callback of instruction " +
                                      self->describe() + " (its function, cleanup, or a release its completion runs)"
                                      ": it would wait for that instruction itself");
  // Failures of instructions recorded before the call (ids are taken in recording order).
  // (next_id() pairs with no release: the ledger it is compared with is read under its mutex.)
  const fl_instr_id before = recorder_.next_id();
  if (fl_status_t st = wait_submitted(deadline, "fl_engine_synchronize_for"); st != FL_OK) return st;
  return ledger_.take_oldest_before(before);
}

fl_status_t Engine::wait_submitted(const Deadline& deadline, const char* call) {
  std::vector<std::pair<Stream*, uint64_t>> upto;
  // Acquire pairs with the release store of submitted in Engine::submit().
  for (Stream* s : all_streams()) upto.emplace_back(s, s->submitted.load(std::memory_order_acquire));
  Observer* ob = observer();
  if (ob) ob->on_wait(true, "fl_engine_synchronize");
  for (auto& [s, target] : upto) {
    if (!wait_stream(s, target, deadline)) {
      if (ob) ob->on_wait(false, "fl_engine_synchronize");
      return timed_out(call, s, target);
    }
  }
  if (ob) ob->on_wait(false, "fl_engine_synchronize");
  return FL_OK;
}

fl_status_t Engine::synchronize(Stream* s, const Deadline& deadline) {
  const CallbackFrame* frame = pending_frame(this);
  Instr* self = frame != nullptr ? frame->instr : nullptr;
  // Any stream of the caller's own lane: its instructions submitted after the caller (a
  // host stream's, or a CUDA stream's, which launch only once the caller finished) would
  // be waited for by the instruction they queue behind.
  if (self != nullptr && self->stream->lane == s->lane)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_stream_synchronize called from inside a callback of instruction " + self->describe() +
                                      " on a stream of its own lane (" + s->describe() +
                                      "): it would wait for instructions queued behind itself; "
                                      "depend on the objects you need instead");
  // An instruction of that stream may wait for the caller through objects. Acquire pairs
  // with the release store of last_submitted_id in enqueue(): every id up to it is
  // recorded, and counted in `submitted` (stored before it), so in the target below.
  const fl_instr_id upto = s->last_submitted_id.load(std::memory_order_acquire);
  uint64_t target = s->submitted.load(std::memory_order_acquire);  // pairs with the release in submit()
  std::string chain;
  if (self != nullptr && upto > s->last_completed_id.load(std::memory_order_relaxed) &&  // spares the walk only
      find_waiter(frame, upto, [s](const Instr* x) { return x->stream == s; }, &chain) != nullptr)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_stream_synchronize called from inside a callback of instruction " +
                                      self->describe() + " for " + s->describe() +
                                      ", which has an instruction that waits for the caller to complete (" +
                                      self->describe() + " -> " + chain + "): it cannot complete before the caller returns");
  Observer* ob = observer();
  if (ob) ob->on_wait(true, "fl_stream_synchronize");
  WaitNote note(self, "fl_stream_synchronize", s, target, false);
  (void)wait_stream(s, target, deadline, note.cancel_flag());
  if (ob) ob->on_wait(false, "fl_stream_synchronize");
  // How the wait ended is decided once the note has ended, target first: a wait given up by
  // destroy whose stream got there in the meantime reached it (finish() says not given up).
  if (note.finish()) return wait_given_up("fl_stream_synchronize", self, s->describe());
  if (!s->reached(target, false)) return timed_out("fl_stream_synchronize_for", s, target);
  return ledger_.take_of_stream(s, target);
}

// ---------------------------------------------------------------------------------------
// What waits for the calling instruction (a wait from its callback for any of it is a cycle)

Instr* Engine::find_waiter(const CallbackFrame* frame, fl_instr_id upto,
                           const std::function<bool(const Instr*)>& match, std::string* chain) {
  if (frame == nullptr || frame->instr == nullptr ||
      (frame->kind != CallbackKind::kFn && frame->kind != CallbackKind::kCleanup))
    return nullptr;
  Instr* self = frame->instr;
  // Safe without locks (but for the end of a lane's queue, below): self cannot complete
  // while its fn or cleanup runs, so every instruction reached waits for it, directly or
  // not, and can neither start nor be recycled during the walk; successor lists only grow until their instruction completes
  // (or, for issue lists, is issued) and seals them, and queue links only grow behind an
  // instruction that has not started. Each step goes to a later id (edges point to earlier
  // ids, a lane queues in id order), so nothing above `upto` can lead to a match.
  std::unordered_map<const Instr*, const Instr*> via;  // reached -> what it waits for
  std::vector<Instr*> todo;
  auto reach = [&](Instr* x, const Instr* from) {
    if (x != nullptr && x->id <= upto && via.emplace(x, from).second) todo.push_back(x);
  };
  auto reach_list = [&](const std::atomic<Edge*>& head, const Instr* from) {
    // Acquire pairs with the release CAS that published each edge in push_edge(): the
    // successor's id, stream and name were written before.
    Edge* e = head.load(std::memory_order_acquire);
    if (e == kSealed) return;  // completed or issued: its successors were released
    for (; e != nullptr; e = e->next) reach(e->succ, from);
  };
  auto reach_behind = [&](const Instr* x) {  // the next instruction queued on x's lane
    Lane* lane = x->stream->lane;
    auto next = [stub = &lane->stub](const Instr* p) {
      // Acquire pairs with the release store of the link in Lane::push().
      Instr* n = p->lane_next.load(std::memory_order_acquire);
      while (n == stub) n = n->lane_next.load(std::memory_order_acquire);  // pairs with Lane::push()
      return n;
    };
    Instr* n = next(x);
    if (n == nullptr) {
      // Nothing linked behind x yet, but an instruction of its lane may be recorded (its
      // edges published, so a target may already wait for it) and not yet pushed: its
      // submitter holds the lane's submit lock from recording to push. Taking the lock
      // waits for that push (the holder blocks on nothing the caller holds).
      std::lock_guard<SpinLock> lock(lane->submit_lock);
      n = next(x);
    }
    reach(n, x);
  };
  reach_list(self->succ_head, self);
  reach_list(self->issue_succ_head, self);
  // A host instruction holds up its lane until it completes; a device one only until it is
  // issued, which its fn does (a device instruction's cleanup runs after its lane moved on,
  // unless it was skipped or failed and its lane runner completes it at once: holds_lane).
  if (self->stream->is_host_executed() || frame->kind == CallbackKind::kFn || frame->holds_lane)
    reach_behind(self);
  while (!todo.empty()) {
    Instr* x = todo.back();
    todo.pop_back();
    if (match(x)) {
      if (chain != nullptr) {
        std::vector<const Instr*> path;
        for (const Instr* p = x; p != self; p = via.at(p)) path.push_back(p);
        chain->clear();
        for (auto it = path.rbegin(); it != path.rend(); ++it)
          *chain += (chain->empty() ? "" : " -> ") + (*it)->describe();
      }
      return x;
    }
    reach_list(x->succ_head, x);
    reach_list(x->issue_succ_head, x);
    reach_behind(x);  // not started: its lane waits for it
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------
// Instruction queries

fl_instr_state_t Engine::query(Stream* s, fl_instr_id id) {
  s->check_submitted(id, "fl_instr_query");
  // acquire pairs with the release in complete(): the history entry was written before.
  if (id > s->last_completed_id.load(std::memory_order_acquire)) return FL_INSTR_PENDING;
  return ledger_.completed_state(s, id);
}

fl_status_t Engine::wait_instr(Stream* s, fl_instr_id id, const Deadline& deadline) {
  s->check_submitted(id, "fl_instr_wait_for");
  const CallbackFrame* frame = pending_frame(this);
  Instr* self = frame != nullptr ? frame->instr : nullptr;
  if (self != nullptr && self->stream->lane == s->lane && id > self->id)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_instr_wait_for called from inside a callback of instruction " +
                                      self->describe() + " for instruction #" + std::to_string(id) +
                                      ", queued behind it on its own lane: it cannot start before the caller returns");
  // On another lane, it may wait for the caller through objects (and the lanes of those in
  // between). The load of last_completed_id only spares the walk for a completed one.
  std::string chain;
  if (self != nullptr && id > self->id && id > s->last_completed_id.load(std::memory_order_relaxed) &&
      find_waiter(frame, id, [s, id](const Instr* x) { return x->stream == s && x->id == id; }, &chain) != nullptr)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_instr_wait_for called from inside a callback of instruction " +
                                      self->describe() + " for instruction #" + std::to_string(id) +
                                      ", which waits for the caller to complete (" + self->describe() + " -> " +
                                      chain + "): it cannot complete before the caller returns");
  Observer* ob = observer();
  if (ob) ob->on_wait(true, "fl_instr_wait_for");
  WaitNote note(self, "fl_instr_wait_for", s, id, true);
  const std::atomic<bool>* cancelled = note.cancel_flag();
  // The sleeper registers the id: the stream's completions before it do not wake it.
  sched::wait([s, id, cancelled] { return s->reached(id, true) || given_up(cancelled); },
              [s, id, cancelled](const Deadline& d) { s->wait_completed_id(id, d, cancelled); }, deadline);
  if (ob) ob->on_wait(false, "fl_instr_wait_for");
  // Decided once the note has ended, as in synchronize(Stream*): a wait given up whose
  // target completed in the meantime reached it.
  if (note.finish()) return wait_given_up("fl_instr_wait_for", self, "instruction #" + std::to_string(id) + " of " + s->describe());
  if (!s->reached(id, true))
    return report(FL_ERR_TIMEOUT, "fl_instr_wait_for: timed out; instruction #" + std::to_string(id) + " of " +
                                      s->describe() + " has not completed (nothing was consumed: wait again)");
  return ledger_.take_outcome(s, id);
}

bool Engine::pools_quiescent() const {
  if (!pool_->quiescent()) return false;
  std::lock_guard<std::mutex> lock(pools_mu_);
  for (auto& [n, p] : extra_pools_)
    if (!p->quiescent()) return false;
  return true;
}

}  // namespace flowlane::core
