// fl_object_wait (engine/waits.hpp): waits for an object's pending users — its last writer
// and, for a write access, the readers since — and reports the poison of its current value.
#include <algorithm>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "engine/engine.hpp"

namespace flowlane::core {

bool Waits::sleep_until_terminal(Instr* i, const std::atomic<bool>* cancelled, const Deadline& deadline) {
  // acquire pairs with the release store in cancel_cycle_waits() (diag/dump.cpp).
  auto done = [i, cancelled] {
    // Both acquire: pair with Executor::complete()'s store of the state and that release store.
    if (is_terminal(i->load_state()) || (cancelled != nullptr && cancelled->load(std::memory_order_acquire))) return true;
    // A program thread polling: it may complete finished device work itself (help_complete).
    return i->engine->executor().help_complete(i->stream, i) && is_terminal(i->load_state());
  };
  Executor& ex = i->engine->executor();
  const bool reached = sched::wait(done, [i, &done, &ex](const Deadline& d) {
    ex.help_leave(i->stream);  // it stops polling: the helper's owner takes the rounds back
    // seq_cst increment, then the state load: the store–load pair with Executor::complete().
    i->sleepers.fetch_add(1, std::memory_order_seq_cst);
    for (;;) {
      uint32_t v = i->state.load(std::memory_order_seq_cst);  // the load half of that store-load pair
      if (done()) break;
      // Woken by complete(), or by a cancel (which does not change v).
      if (d.infinite()) {
        futex_wait(&i->state, v);
      } else {
        int64_t left = d.remaining_ns();
        if (left == 0) break;
        futex_wait_for(&i->state, v, left);
      }
    }
    i->sleepers.fetch_sub(1, std::memory_order_relaxed);
  }, deadline, spin_budget(i->stream));
  ex.help_leave(i->stream);
  return reached;
}

namespace {

// The users of an object that a wait waits for — its last writer and, for a write access,
// the readers since — each referenced until the wait ends (they may complete and be
// recycled meanwhile otherwise).
class Users {
 public:
  Users(Object* o, uint32_t access) {
    std::lock_guard<SpinLock> lock(o->lock);
    writer_ = o->last_writer;
    if (writer_ != nullptr) {
      writer_->ref();
      list_.push_back(writer_);
    }
    if (access & FL_WRITE) {
      for (Instr* r : o->readers) {
        r->ref();
        list_.push_back(r);
      }
    }
  }
  ~Users() {
    for (Instr* x : list_)
      if (x->unref()) x->engine->recycle(x);
  }
  Users(const Users&) = delete;
  Users& operator=(const Users&) = delete;

  const std::vector<Instr*>& list() const { return list_; }
  Instr* writer() const { return writer_; }
  bool contains(const Instr* x) const { return std::find(list_.begin(), list_.end(), x) != list_.end(); }

 private:
  std::vector<Instr*> list_;
  Instr* writer_ = nullptr;
};

// Observer::on_wait around the sleeping part of the wait.
class WaitHook {
 public:
  explicit WaitHook(Observer* ob) : ob_(ob) {
    if (ob_) ob_->on_wait(true, "fl_object_wait");
  }
  ~WaitHook() {
    if (ob_) ob_->on_wait(false, "fl_object_wait");
  }
  WaitHook(const WaitHook&) = delete;
  WaitHook& operator=(const WaitHook&) = delete;

 private:
  Observer* ob_;
};

// Called from a callback whose instruction `self` is still pending: waiting for that
// instruction, for one queued behind it on its own lane (which cannot start before it
// completes), or for a user recorded after it that depends on it could never return.
// Throws FL_ERR_INVALID_ARGUMENT naming the user.
void refuse_own_users(const Instr* self, const Object* o, const Users& users) {
  // The caller's own access to the object (0 if it does not list it). A user of the object
  // recorded after the caller depends on it when either of the two writes: waiting for that
  // user would wait for the caller too, on any lane.
  uint32_t own_access = 0;
  for (const Operand& op : self->operands)
    if (op.obj == o) own_access |= op.access;
  for (Instr* w : users.list()) {
    // Acquire pairs with the seq_cst store of the terminal state in Executor::complete().
    const bool later = w->id > self->id && !is_terminal(w->load_state(std::memory_order_acquire));
    const bool behind = later && w->stream->lane == self->stream->lane;
    const bool depends = later && own_access != 0 && ((own_access & FL_WRITE) != 0 || w == users.writer());
    if (w != self && !behind && !depends) continue;
    fail(FL_ERR_INVALID_ARGUMENT,
         w == self ? "fl_object_wait: the calling instruction " + self->describe() +
                         " uses this object itself and would wait for its own completion"
         : behind  ? "fl_object_wait: the object's pending user " + w->describe() +
                        " is queued behind the calling instruction " + self->describe() +
                        " on its own lane, so it cannot start before the caller returns; depend on the "
                        "object through an operand instead"
                   : "fl_object_wait: the object's pending user " + w->describe() +
                        " was recorded after the calling instruction " + self->describe() +
                        ", which uses this object itself, so it waits for the caller to complete");
  }
}

// A later user may also wait for the caller through other objects (and the lanes of the
// instructions in between): found by the walk of what waits for the caller.
void refuse_users_waiting_for_caller(const CallbackFrame* frame, const Users& users) {
  const Instr* self = frame->instr;
  fl_instr_id upto = 0;
  for (Instr* w : users.list()) upto = std::max(upto, w->id);
  if (upto <= self->id) return;
  std::string chain;
  Instr* w = Waits::find_waiter(frame, upto, [&users](const Instr* x) { return users.contains(x); }, &chain);
  if (w == nullptr) return;
  fail(FL_ERR_INVALID_ARGUMENT, "fl_object_wait: the object's pending user " + w->describe() +
                                    " waits for the calling instruction to complete (" + self->describe() + " -> " +
                                    chain + "), so it cannot complete before the caller returns");
}

// Sleeps until every user's state is terminal; each wait is noted for the wait-for graph
// (WaitNote: on self's lane, from a callback of `self`; for a task group's task, on the
// engine's list). FL_ERR_TIMEOUT or, given up by drain or destroy on a wait
// cycle, FL_ERR_CANCELLED (reported); FL_OK otherwise.
fl_status_t sleep_on_users(Engine& e, Instr* self, const Object* o, const Users& users, const Deadline& deadline) {
  for (Instr* w : users.list()) {
    WaitNote note(e, self, w, o->handle);  // o is alive here: the caller's handle is valid
    const bool woke = Waits::sleep_until_terminal(w, note.cancel_flag(), deadline);
    const bool given_up = note.finish();
    if (!woke)
      return report(FL_ERR_TIMEOUT, "fl_object_wait_for: timed out; the object's pending user " + w->describe() +
                                        " has not completed (nothing was consumed: wait again)");
    if (given_up)
      return report(FL_ERR_CANCELLED, "fl_object_wait in " + note.waiter() +
                                          " was cancelled: the engine is being drained or destroyed and this wait for " +
                                          w->describe() + " was on a cycle of waits (a deadlock)");
  }
  return FL_OK;
}

// A user's state turns terminal before its completion has finished: the release callbacks
// it runs, its stream's counters and its id's completion (Executor::complete) follow. A
// program thread also waits for that rest, so that what it asks next (a stream wait, an
// instruction query, stats) sees these users complete. Code an engine runs returns at the
// state, as its dependents start: a release callback run by a user's completion may itself
// wait for the caller, and waiting for that completion's end would then be a cycle.
fl_status_t wait_for_completions(const Users& users, const Deadline& deadline) {
  if (in_any_engine_context()) return FL_OK;
  for (Instr* w : users.list()) {
    if (w->stream->wait_completed_id(w->id, deadline)) continue;
    return report(FL_ERR_TIMEOUT, "fl_object_wait_for: timed out; the object's pending user " + w->describe() +
                                      " has finished but its completion (release callbacks) is still running "
                                      "(nothing was consumed: wait again)");
  }
  return FL_OK;
}

}  // namespace

fl_status_t Waits::wait_object(Object* o, uint32_t access, const Deadline& deadline) {
  Users users(o, access);
  // (Not a group task's frame once its instruction has completed: its waits are free.)
  CallbackFrame* frame = pending_frame(&engine_);
  Instr* self = frame != nullptr ? frame->instr : nullptr;
  if (self != nullptr) {
    refuse_own_users(self, o, users);
    refuse_users_waiting_for_caller(frame, users);
  }
  // Inside a device function: what its lane issued before could never be seen to complete
  // while the lane runner waits here; have the backend track it first.
  if (frame != nullptr && frame->kind == CallbackKind::kFn && on_this_thread(frame) && !self->stream->is_host_executed())
    engine_.executor().flush_device(self->stream->lane);
  {
    WaitHook hook(engine_.observer());
    if (fl_status_t st = sleep_on_users(engine_, self, o, users, deadline); st != FL_OK) return st;
    if (fl_status_t st = wait_for_completions(users, deadline); st != FL_OK) return st;
  }
  // The poison of the object's current value: its writer's failure, reported every time it
  // is asked, and its family counts as returned (a synchronize will not return it again).
  Instr* writer = users.writer();
  if (writer == nullptr) return FL_OK;
  const InstrState ws = writer->load_state();
  if (ws != InstrState::kFailed && ws != InstrState::kSkipped) return FL_OK;
  const fl_status_t st = writer->status;
  std::string msg = writer->error;
  engine_.ledger().family_returned(writer->root);
  return report(st, msg);
}

}  // namespace flowlane::core
