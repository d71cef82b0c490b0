// Waits for streams, the engine and instructions (fl_stream_synchronize,
// fl_engine_synchronize, fl_instr_wait_for), instruction queries, and the notes of a
// callback's waits (engine/waits.hpp). Object waits: object_wait.cpp; the walk of what waits
// for the caller: find_waiter.cpp.
#include "engine/waits.hpp"

#include <string>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "engine/engine.hpp"
#include "engine/fork_join.hpp"

namespace flowlane::core {

namespace {
// The calling thread's innermost WaitNote (WaitNote::outer_ links the stack).
FL_TLS thread_local WaitNote* t_notes = nullptr;
}  // namespace

WaitNote::WaitNote(Engine& e, Instr* self, const char* call, Stream* s, uint64_t target, bool is_id) {
  rec_.call = call;
  rec_.stream = s;
  rec_.target = target;
  rec_.is_id = is_id;
  init(e, self);
  link();
}

WaitNote::WaitNote(Engine& e, Instr* self, Instr* on, uint64_t obj) {
  rec_.call = "fl_object_wait";
  rec_.on = on;
  rec_.obj = obj;  // the handle, not the object: the wait holds no reference on it
  init(e, self);
  if (engine_ == nullptr) return;
  on->ref();  // the note's reference: `on` may complete and drop its last other one meanwhile
  link();
}

WaitNote::WaitNote(Engine& e, const char* call, const EngineTaskGroup* g) {
  rec_.call = call;
  rec_.group = g;
  lazy_ = true;  // linked while it blocks; who waits is worked out then (resolve())
  engine_ = &e;
  context_ = sched::current_context();
  running_ = sched::TaskGroup::running();
  outer_ = t_notes;
  t_notes = this;
}

void WaitNote::init(Engine& e, Instr* self) {
  rec_.task_of = EngineTaskGroup::running(e);
  if (self == nullptr && rec_.task_of == nullptr) return;  // a thread of the program's: untracked
  engine_ = &e;
  lane_ = self != nullptr ? self->stream->lane : nullptr;
  rec_.by = self;
  resolved_ = true;
  outer_ = t_notes;
  t_notes = this;
}

bool WaitNote::resolve() {
  if (!resolved_) {
    resolved_ = true;
    // As init() from the frames the thread had at the wait (an inner wait may be linking
    // this one now).
    const CallbackFrame* f = pending_frame_in(static_cast<const CallbackFrame*>(context_), engine_);
    Instr* self = f != nullptr ? f->instr : nullptr;
    rec_.task_of = EngineTaskGroup::of(static_cast<const sched::TaskGroup*>(running_), *engine_);
    nobody_ = self == nullptr && rec_.task_of == nullptr;
    lane_ = self != nullptr ? self->stream->lane : nullptr;
    rec_.by = self;
  }
  return !nobody_;
}

void WaitNote::end() {
  finish();
  t_notes = outer_;  // notes end in the reverse order of their construction
}

template <class F>
void WaitNote::with_list(F&& f) {
  if (lane_ != nullptr) {
    std::lock_guard<SpinLock> lock(lane_->diag_lock);
    f(lane_->waits);
  } else {
    std::lock_guard<SpinLock> lock(engine_->waits().loose_lock());
    f(engine_->waits().loose());
  }
}

void WaitNote::link_record() {
  with_list([this](WaitRecord*& list) { link_wait(list, &rec_); });
  linked_ = true;
  was_linked_ = true;
}

void WaitNote::unlink_record() {
  with_list([this](WaitRecord*& list) { unlink_wait(list, &rec_); });
  linked_ = false;
}

void WaitNote::link() {
  if (engine_ == nullptr || linked_ || !resolve()) return;
  link_record();
  // The thread's outer group waits, suspended while this one lasts (a task run on top of
  // them while they helped): they cannot return before it does. Only this thread touches
  // its notes' state (linked_, linked_by_, what resolve() sets).
  for (WaitNote* n = outer_; n != nullptr; n = n->outer_)
    if (n->lazy_ && !n->linked_ && n->resolve()) {
      n->link_record();
      n->linked_by_ = this;
    }
}

void WaitNote::unlink() {
  if (engine_ == nullptr || !linked_) return;
  for (WaitNote* n = outer_; n != nullptr; n = n->outer_)
    if (n->linked_by_ == this) {
      n->unlink_record();
      n->linked_by_ = nullptr;
    }
  unlink_record();
}

bool WaitNote::reached() const {
  if (rec_.on != nullptr) return is_terminal(rec_.on->load_state());
  if (rec_.group != nullptr) return rec_.group->group.idle();
  return rec_.stream->reached(rec_.target, rec_.is_id);
}

bool WaitNote::finish_linked() {
  unlink();
  // Read once unlinked: the flag is set only under the list's lock while the record is
  // linked, so the unlink's lock orders every store before this load.
  const bool cancelled = rec_.cancelled.load(std::memory_order_relaxed) && !reached();
  if (rec_.on != nullptr && rec_.on->unref()) rec_.on->engine->recycle(rec_.on);
  return cancelled;
}

std::string WaitNote::waiter() const {
  if (rec_.by != nullptr) return rec_.by->describe();
  if (rec_.task_of != nullptr) return "a task of " + rec_.task_of->describe();
  return "a thread of the program";
}

int64_t Waits::spin_budget(const Stream* s) {
  return s->completes_async() ? sched::async_spin_ns() : sched::caller_spin_ns();
}

bool Waits::wait_stream(Stream* s, uint64_t target, const Deadline& deadline, const std::atomic<bool>* cancelled) {
  // A program thread polling may complete finished device work itself (help_complete).
  sched::wait([s, target, cancelled] {
                return s->reached(target, false) || given_up(cancelled) ||
                       (s->engine->executor().help_complete(s, nullptr) && s->reached(target, false));
              },
              [s, target, cancelled](const Deadline& d) {
                s->engine->executor().help_leave(s);
                s->wait_completed(target, d, cancelled);
              },
              deadline, spin_budget(s));
  s->engine->executor().help_leave(s);
  return s->reached(target, false);
}

namespace {

[[gnu::cold]] fl_status_t timed_out(const char* call, const Stream* s, uint64_t target) {
  uint64_t done = s->completed.load(std::memory_order_acquire);  // pairs with advance_completed()
  return report(FL_ERR_TIMEOUT, std::string(call) + ": timed out; " + s->describe() + " has completed " +
                                    std::to_string(done) + " of the " + std::to_string(target) +
                                    " instructions it waits for (nothing was returned or consumed: wait again)");
}

[[gnu::cold]] fl_status_t wait_given_up(const char* call, const WaitNote& note, const std::string& what) {
  return report(FL_ERR_CANCELLED, std::string(call) + " in " + note.waiter() +
                                      " was cancelled: the engine is being drained or destroyed and this wait for " + what +
                                      " was on a cycle of waits (a deadlock)");
}

}  // namespace

fl_status_t Waits::synchronize(const Deadline& deadline) {
  if (Instr* self = pending_instr(&engine_))
    fail(FL_ERR_INVALID_ARGUMENT, "fl_engine_synchronize called from inside a callback of instruction " +
                                      self->describe() + " (its function, cleanup, or a release its completion runs)"
                                      ": it would wait for that instruction itself");
  // Failures of instructions recorded before the call (ids are taken in recording order).
  // (next_id() pairs with no release: the ledger it is compared with is read under its mutex.)
  const fl_instr_id before = engine_.recorder().next_id();
  if (fl_status_t st = wait_submitted(deadline, "fl_engine_synchronize_for"); st != FL_OK) return st;
  return engine_.ledger().take_oldest_before(before);
}

fl_status_t Waits::wait_submitted(const Deadline& deadline, const char* call) {
  std::vector<std::pair<Stream*, uint64_t>> upto;
  // Acquire pairs with the release store of submitted in Engine::enqueue().
  for (Stream* s : engine_.all_streams()) upto.emplace_back(s, s->submitted.load(std::memory_order_acquire));
  Observer* ob = engine_.observer();
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

fl_status_t Waits::synchronize(Stream* s, const Deadline& deadline) {
  const CallbackFrame* frame = pending_frame(&engine_);
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
  // with the release store of last_submitted_id in Engine::enqueue(): every id up to it is
  // recorded, and counted in `submitted` (stored before it), so in the target below.
  const fl_instr_id upto = s->last_submitted_id.load(std::memory_order_acquire);
  uint64_t target = s->submitted.load(std::memory_order_acquire);  // pairs with the release in Engine::enqueue()
  std::string chain;
  if (self != nullptr && upto > s->last_completed_id.load(std::memory_order_relaxed) &&  // spares the walk only
      find_waiter(frame, upto, [s](const Instr* x) { return x->stream == s; }, &chain) != nullptr)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_stream_synchronize called from inside a callback of instruction " +
                                      self->describe() + " for " + s->describe() +
                                      ", which has an instruction that waits for the caller to complete (" +
                                      self->describe() + " -> " + chain + "): it cannot complete before the caller returns");
  Observer* ob = engine_.observer();
  if (ob) ob->on_wait(true, "fl_stream_synchronize");
  WaitNote note(engine_, self, "fl_stream_synchronize", s, target, false);
  (void)wait_stream(s, target, deadline, note.cancel_flag());
  if (ob) ob->on_wait(false, "fl_stream_synchronize");
  // How the wait ended is decided once the note has ended, target first: a wait given up by
  // destroy whose stream got there in the meantime reached it (finish() says not given up).
  if (note.finish()) return wait_given_up("fl_stream_synchronize", note, s->describe());
  if (!s->reached(target, false)) return timed_out("fl_stream_synchronize_for", s, target);
  return engine_.ledger().take_of_stream(s, target);
}

fl_instr_state_t Waits::query(Stream* s, fl_instr_id id) {
  s->check_submitted(id, "fl_instr_query");
  // acquire pairs with the release in Executor::complete(): the history entry was written before.
  // A program thread polling a collective stream drives one round of the progress, as MPI_Test
  // drives MPI's (help_complete): a poll loop then completes what it polls for itself.
  if (id > s->last_completed_id.load(std::memory_order_acquire) &&
      (!s->completes_async() || !engine_.executor().help_complete(s, nullptr) ||
       id > s->last_completed_id.load(std::memory_order_acquire)))
    return FL_INSTR_PENDING;
  return engine_.ledger().completed_state(s, id);
}

fl_status_t Waits::wait_instr(Stream* s, fl_instr_id id, const Deadline& deadline) {
  s->check_submitted(id, "fl_instr_wait_for");
  const CallbackFrame* frame = pending_frame(&engine_);
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
  Observer* ob = engine_.observer();
  if (ob) ob->on_wait(true, "fl_instr_wait_for");
  WaitNote note(engine_, self, "fl_instr_wait_for", s, id, true);
  const std::atomic<bool>* cancelled = note.cancel_flag();
  // The sleeper registers the id: the stream's completions before it do not wake it.
  sched::wait([s, id, cancelled] {
                return s->reached(id, true) || given_up(cancelled) ||
                       (s->engine->executor().help_complete(s, nullptr) && s->reached(id, true));
              },
              [s, id, cancelled](const Deadline& d) {
                s->engine->executor().help_leave(s);
                s->wait_completed_id(id, d, cancelled);
              },
              deadline, spin_budget(s));
  engine_.executor().help_leave(s);
  if (ob) ob->on_wait(false, "fl_instr_wait_for");
  // Decided once the note has ended, as in synchronize(Stream*): a wait given up whose
  // target completed in the meantime reached it.
  if (note.finish()) return wait_given_up("fl_instr_wait_for", note, "instruction #" + std::to_string(id) + " of " + s->describe());
  if (!s->reached(id, true))
    return report(FL_ERR_TIMEOUT, "fl_instr_wait_for: timed out; instruction #" + std::to_string(id) + " of " +
                                      s->describe() + " has not completed (nothing was consumed: wait again)");
  return engine_.ledger().take_outcome(s, id);
}

}  // namespace flowlane::core
