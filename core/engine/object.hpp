// Dependence objects: the things instructions read and write, and the engine's set of live
// objects. Per object the engine keeps the last writer and the readers since it; the rules
// that use them are Recorder's (deps.hpp). An object lives while the caller's handle or an
// in-flight instruction references it; the last reference runs its release callback.
//
// Owns: Objects owns the list of live objects (under mu_, so that destroy can run every
// release callback) and each object's lifetime (refs, release). The dependency state
// (lock, last_writer, readers) is Recorder's; Waits reads it under the object's lock.
// Calls: the release callback inside a kRelease CallbackScope (context.hpp), for the
// instruction whose completion drops the last reference, after Lane::hand_off_taken (a
// lane this thread took on must not wait behind the callback); Engine::recycle (the users an
// object still references when it goes), Engine::forget_handle (destroy).
// Called by: the C API (create, release), Recorder (a reference per operand, taken at
// submission), Executor::complete (release_ref per operand), engine destroy (release_all).
// Atomics: refs, acq_rel decrements (release_ref: the last dropper sees every user's writes
// before running release) with the relaxed increments of Recorder (an operand's reference is
// taken by the submitter, which holds another one: the caller's handle or an instruction's).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "base/spinlock.hpp"
#include "flowlane/flowlane.h"

namespace flowlane::core {

class Engine;
struct Instr;

// Two cache lines: what submitters use (the lock and the dependency state) and the
// reference count, which every completing instruction decrements. On one line, each
// completion on a worker took the line away from the thread submitting the next user.
struct alignas(64) Object {
  Engine* engine = nullptr;
  uint64_t handle = 0;  // the caller's fl_object_t* value (0 once stale)
  void* user_data = nullptr;
  fl_release_fn release = nullptr;

  SpinLock lock;                // guards the fields below
  Instr* last_writer = nullptr; // referenced
  std::vector<Instr*> readers;  // referenced; the reads since last_writer

  // Objects' intrusive list of live objects (under its mutex).
  Object* prev = nullptr;
  Object* next = nullptr;

  // One reference for the caller's handle plus one per in-flight instruction using it.
  alignas(64) std::atomic<int64_t> refs{1};
};

class Objects {
 public:
  explicit Objects(Engine& e) : engine_(e) {}

  // A new object holding the caller's reference (its handle is the caller's to set). The
  // callers refuse creation during destroy themselves (fl_object_create, fl_comm_create),
  // each in its own name.
  Object* create(void* user_data, fl_release_fn release);
  // Drops a reference; the last one runs the object's release callback, in a callback
  // frame for `completing` (the instruction whose completion drops it, or null), and frees it.
  void release_ref(Object* o, Instr* completing = nullptr) {
    // acq_rel: the last dropper sees every user's writes before running release.
    // Pairs with the other droppers' fetch_sub here (completions and fl_object_release).
    if (o->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    destroy(o, completing);
  }
  // Engine destroy, once every instruction completed: makes the handles of the objects the
  // caller still holds stale and runs their release callbacks.
  void release_all();

 private:
  void destroy(Object* o, Instr* completing);

  Engine& engine_;
  std::mutex mu_;
  Object* head_ = nullptr;
};

}  // namespace flowlane::core
