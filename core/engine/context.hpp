// What engine callback the calling thread is inside, for the rules of calls made from
// callbacks (core/engine/README.md, "Calls from callbacks"): a wait that would wait for the
// caller's own instruction is refused, destroy from any engine-run context is refused,
// submissions from engine-run contexts never block on the window, and every callback opens
// its own isolation region, so that a waiting worker never runs another callback's work on
// top of it (sched/task.hpp).
#pragma once

#include <cstdint>

#include "sched/task.hpp"

namespace flowlane::core {

class Engine;
struct Instr;

enum class CallbackKind : uint8_t {
  kFn,        // an instruction's function (or a device backend issuing it)
  kCleanup,   // an instruction's cleanup
  kRelease,   // an object's release callback
  kLoop,      // fl_parallel_for, fl_taskgraph_run (the calling thread runs bodies or tasks)
  kWatchdog,  // the watchdog's dump callback
  // A task of a task group created inside an instruction's callback, run by a worker: the
  // frame lives in the group (which holds a reference on the instruction) and stands for
  // the instruction only while it has not completed (a group may outlive it).
  kGroupTask,
};

// One engine callback running on this thread. Frames nest (a callback that calls
// fl_parallel_for, a release run by the completion of an instruction).
//
// Frames live on the stack of the thread that runs the callback. A parallel_for body or a
// task-graph task that such a callback runs on another worker sees the caller's frames as
// its own parents (sched::current_context()): waits it makes are refused by the same rules.
// What only the callback's own thread may do (use its fl_instr_ctx_t, flush its lane) checks
// on_this_thread().
struct CallbackFrame {
  Engine* engine;
  // The instruction whose completion waits for this callback (its fn or cleanup, or the
  // release callbacks its completion runs), or null.
  Instr* instr;
  CallbackKind kind;
  CallbackFrame* parent;
  const void* thread;  // the thread running it (sched::this_thread_token())
  // A device instruction's cleanup run by its lane runner before the lane moves on (the
  // instruction was skipped or failed and completed at once, not by the backend): what is
  // queued behind it on its lane waits for this callback too. (Host instructions and fns
  // hold their lane in any case; a cleanup the backend runs after the GPU work does not.)
  bool holds_lane = false;
};

inline bool on_this_thread(const CallbackFrame* f) { return f->thread == sched::this_thread_token(); }

// Pushes a frame for the lifetime of the scope and opens a fresh isolation region.
class CallbackScope {
 public:
  CallbackScope(Engine* e, Instr* instr, CallbackKind kind, bool holds_lane = false)
      : frame_{e, instr, kind, static_cast<CallbackFrame*>(const_cast<void*>(sched::current_context())),
               sched::this_thread_token(), holds_lane},
        region_(sched::RegionScope::kFresh),
        context_(&frame_) {}
  // context_ restores the parent frame.
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;

 private:
  CallbackFrame frame_;
  sched::RegionScope region_;
  sched::ContextScope context_;
};

// The innermost frame of the calling thread, or null.
CallbackFrame* current_frame();

// The instruction running on this thread whose completion the current callback holds up
// (innermost frame with one), or null.
Instr* current_instr();

// The innermost such instruction of engine `e`, or null; and its frame.
Instr* pending_instr(const Engine* e);
CallbackFrame* pending_frame(const Engine* e);
// pending_frame() among `innermost` and its parents: the frames a thread had at some point
// (a wait kept them), still on its stack.
CallbackFrame* pending_frame_in(const CallbackFrame* innermost, const Engine* e);

// True when the calling thread is one `e` runs: a worker of one of its pools, its device
// backend's completion thread, or a thread inside one of its callbacks.
bool in_engine_context(const Engine* e);

// True when the calling thread runs engine work of any engine (a pool worker, a
// completion thread, or inside a callback): its submissions are admitted over the window.
bool in_any_engine_context();

// Marks this thread as one that completes instructions of `e` outside its pools (a device
// backend's poller).
void set_completion_thread(Engine* e);

}  // namespace flowlane::core
