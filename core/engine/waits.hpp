// Waits: fl_engine_synchronize, fl_stream_synchronize, fl_instr_wait_for, fl_instr_query and
// fl_object_wait (core/engine/README.md, "Completion" and "Calls from callbacks"), and what
// each refuses.
//
// What they wait for. Stream and instruction waits watch the stream's completion counters
// (Stream::wait_completed / wait_completed_id): the end of a completion. Object waits watch
// the users' terminal states (sleep_until_terminal: the point where dependents start) and,
// from a program thread, the end of those users' completions too. On a pool worker every
// wait goes through sched::wait: it helps its own isolation region first, and a spare worker
// stands in while it sleeps. A wait returns the failures it covers through the
// FailureLedger (each family once); a timeout consumes nothing.
//
// What they refuse (FL_ERR_INVALID_ARGUMENT, before waiting). Called from a callback of
// instruction `self` (pending_frame(), context.hpp: its fn, its cleanup, a release its
// completion runs, a task of a group created in it while it has not completed), a wait for
// `self`, for what is queued behind it on its lane, or for an instruction that waits for it
// through objects and lanes (find_waiter(), find_waiter.cpp) could only end after the
// caller returns.
//
// Diagnostics. A wait from such a callback is noted on the caller's lane (WaitNote below: a
// WaitRecord in Lane::waits, under the lane's diag_lock) for the state dump's wait-for
// graph. Drain and destroy give up a noted wait that lies on a cycle of waits
// (cancel_cycle_waits(), core/diag/dump.cpp, sets WaitRecord::cancelled and wakes the
// sleeper): it returns FL_ERR_CANCELLED, unless its target was reached meanwhile.
//
// Owns: nothing that outlives a call (notes live on the waiting thread's stack).
// Calls: Stream (wait_completed, wait_completed_id, reached), FailureLedger (take_*,
// completed_state, family_returned), Recorder::next_id, Engine::all_streams and
// Engine::recycle, Executor::flush_device (a device function's own lane, before it
// waits), the observer (on_wait), the callback frames (context.hpp).
// Called by: the C API; CancelDrain::drain and engine destroy (wait_submitted, wait_stream).
// Locks: an object's spin lock (to read its users), the caller's lane's diag_lock (notes),
// a lane's submit lock (find_waiter, at the end of a lane's queue).
// Atomics it shares, and with whom:
//   Instr::sleepers / state: sleep_until_terminal's seq_cst increment of sleepers, then
//     seq_cst load of the state, against Executor::complete's seq_cst store of the state,
//     then load of sleepers (a store-load pair: either the sleeper sees the state, or the
//     completer sees it counted and wakes the futex).
//   WaitRecord::cancelled: acquire loads (given_up(), stream.hpp) with the release store in
//     cancel_cycle_waits(); read under diag_lock when a note ends.
//   Stream::submitted / last_submitted_id: acquire loads with Engine::enqueue's release
//     stores (every id counted is recorded).
//   Successor lists and queue links (find_waiter): acquire loads with Recorder's release
//     CAS that publishes an edge and Lane::push's release store of a link.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "base/deadline.hpp"
#include "engine/lane.hpp"
#include "flowlane/flowlane.h"

namespace flowlane::core {

class Engine;
struct CallbackFrame;
struct Instr;
struct Object;
struct Stream;

class Waits {
 public:
  explicit Waits(Engine& e) : engine_(e) {}

  // Each returns FL_OK or a failure status, with the thread's message set, and throws
  // FL_ERR_INVALID_ARGUMENT for a refused wait.
  // fl_engine_synchronize(_for), fl_stream_synchronize(_for): FL_ERR_TIMEOUT when the
  // deadline passes first (no failure is returned then).
  fl_status_t synchronize(const Deadline& deadline = Deadline::forever());
  fl_status_t synchronize(Stream* s, const Deadline& deadline = Deadline::forever());
  // fl_instr_wait_for: the outcome of id once completed (a failure counts as returned).
  fl_status_t wait_instr(Stream* s, fl_instr_id id, const Deadline& deadline);
  // fl_object_wait(_for): FL_ERR_TIMEOUT when the deadline passes first (nothing else
  // changes then).
  fl_status_t wait_object(Object* o, uint32_t access, const Deadline& deadline = Deadline::forever());
  // fl_instr_query: throws FL_ERR_INVALID_ARGUMENT for an id this stream never returned.
  fl_instr_state_t query(Stream* s, fl_instr_id id);

  // Waits for every instruction submitted (to any stream) before the call; FL_OK, or
  // FL_ERR_TIMEOUT reported in the name of `call`. Returns and consumes no failure; refuses
  // nothing (drain checks its caller itself).
  fl_status_t wait_submitted(const Deadline& deadline, const char* call);
  // Waits for s's completion count to reach target (sched::wait rules); false on the deadline
  // or when *cancelled (if given) is set first (drain or destroy gave the wait up).
  static bool wait_stream(Stream* s, uint64_t target, const Deadline& deadline = Deadline::forever(),
                          const std::atomic<bool>* cancelled = nullptr);
  // Sleeps until i is terminal or *cancelled is set (by a thread that then wakes i's state
  // futex) or the deadline passes; returns false only on the deadline.
  static bool sleep_until_terminal(Instr* i, const std::atomic<bool>* cancelled, const Deadline& deadline);
  // How long a program thread polls s before it sleeps (sched/pool.hpp): longer on a stream
  // whose completions its polls drive (a collective's transport: help_complete).
  static int64_t spin_budget(const Stream* s);

  // The engine's loose waits: waits of tasks of groups that no pending instruction owns
  // (WaitNote), the wait-for graph's edges out of those groups. Under loose_lock().
  SpinLock& loose_lock() { return loose_lock_; }
  WaitRecord*& loose() { return loose_; }

  // Among the instructions that wait for the instruction of `frame` to complete (its
  // successors and, on a lane that runs them in order, what is queued behind each,
  // transitively), the first one with an id up to `upto` that `match` accepts; null if
  // none. A wait for it could only end after the caller returns. `frame` is the caller's
  // innermost frame with an instruction: its fn or cleanup (other kinds find nothing, as
  // their instruction may complete during the walk). `chain`, if given, receives the path:
  // "'a' (#3, lane 1, host) -> 'b' (#5, lane 2, host)", the match last. (find_waiter.cpp)
  static Instr* find_waiter(const CallbackFrame* frame, fl_instr_id upto,
                            const std::function<bool(const Instr*)>& match, std::string* chain = nullptr);

 private:
  Engine& engine_;
  SpinLock loose_lock_;
  WaitRecord* loose_ = nullptr;
};

// Notes a wait for the wait-for graph (a WaitRecord, lane.hpp) while it lasts. Who waits:
// `self`, the running instruction the caller's wait counts for (pending_frame(): its
// callback, or a task of a group created in its callback while it is pending), whose lane
// holds the record; else the task group whose task the calling thread runs
// (EngineTaskGroup::running()), on the engine's list of loose waits; else nobody (a thread
// of the program's: nothing the engine runs waits for it) and the note does nothing.
//
// Object, stream and instruction waits are noted from construction to finish(). A task
// group's wait is noted only while it blocks (link() / unlink(), from its BlockWatch):
// fork-join code waits for groups millions of times and almost never blocks, so such a note
// costs a few stores until then. It only keeps what the thread's frames were at the wait
// (the callback frames and the running group task, both on the stack below the wait) and
// works out who waits from them the first time it is linked (resolve()). So that a thread's
// outer group waits are in the graph while an inner wait of the same thread is — a task
// run on top of an outer wait while it helps keeps that wait from returning — each note is
// on a thread-local stack, and a note that is linked also links the outer group waits that
// are not (and unlinks them when it is unlinked).
class WaitNote {
 public:
  // fl_stream_synchronize / fl_instr_wait_for: stream `s` reaching `target` (a completion
  // count, or an instruction id: `is_id`).
  WaitNote(Engine& e, Instr* self, const char* call, Stream* s, uint64_t target, bool is_id);
  // fl_object_wait: the user `on` of object handle `obj` (referenced while noted).
  WaitNote(Engine& e, Instr* self, Instr* on, uint64_t obj);
  // fl_task_group_wait(_for), fl_task_group_destroy: group `g` (of engine `e`); noted while
  // it blocks.
  WaitNote(Engine& e, const char* call, const EngineTaskGroup* g);
  ~WaitNote() {
    if (engine_ != nullptr) end();
  }
  WaitNote(const WaitNote&) = delete;  // linked into a list by address
  WaitNote& operator=(const WaitNote&) = delete;

  // What the wait sleeps on besides its target: set when drain or destroy gives it up.
  const std::atomic<bool>* cancel_flag() const { return engine_ != nullptr ? &rec_.cancelled : nullptr; }
  // A group wait's blocking begins / ends (BlockWatch::blocking).
  void link();
  void unlink();
  // Ends the note; true when drain or destroy gave the wait up (it was on a wait cycle) and
  // its target has not been reached. The flag is read under the list's lock, where it is set.
  // A note never linked was never given up: that is decided without a call.
  bool finish() {
    if (engine_ == nullptr || finished_) return false;
    finished_ = true;
    return was_linked_ && finish_linked();
  }
  // "'x' (#3, lane 1, host)" or "a task of task group 0x..": who waits, for messages.
  std::string waiter() const;

 private:
  void init(Engine& e, Instr* self);
  // A group wait, the first time it is linked: who waits (from the frames kept at the
  // wait). False when nobody does (a thread of the program's): the note is never linked.
  bool resolve();
  bool finish_linked();
  void end();  // finish() and off the thread's stack
  // Runs f(list head) under the lock of the note's list.
  template <class F>
  void with_list(F&& f);
  void link_record();
  void unlink_record();
  bool reached() const;

  Engine* engine_ = nullptr;  // null: untracked (and not on the thread's stack)
  Lane* lane_ = nullptr;      // the list: a lane's, or (null) the engine's loose waits
  // A group wait: the thread's callback frames and running group task at the wait, read by
  // resolve() (both outlive the wait: they are below it on the thread's stack).
  const void* context_ = nullptr;
  const void* running_ = nullptr;
  bool lazy_ = false;        // a group wait: linked while it blocks
  bool resolved_ = false;    // who waits is known (always, but for a lazy note not yet linked)
  bool nobody_ = false;      // resolved: nobody waits (a lazy note of a thread of the program's)
  bool linked_ = false;
  bool was_linked_ = false;  // linked at some point: finish() reads the cancel flag
  bool finished_ = false;
  WaitNote* outer_ = nullptr;      // the thread's stack of notes
  WaitNote* linked_by_ = nullptr;  // an inner note that linked this one (a group wait)
  WaitRecord rec_;
};

}  // namespace flowlane::core
