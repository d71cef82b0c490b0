// Task groups (fl_task_group_*): fork–join for recursive work, as tbb::task_group and
// rayon::scope. spawn() hands a function to the pool; wait() waits until every task of the
// group (including those its tasks spawn into it while it waits) has finished, helping with
// tasks of the caller's own region meanwhile (sched::wait), and returns the first failure.
// A program thread's spawns carry the group's own region, and its untimed wait takes part
// in the pool (sched::Participation) helping with that region only: the group's tasks and
// their children.
//
// Counting: `count_` holds one unit per spawned, unfinished task. A task's unit is dropped
// by the task itself, after it ran (and after any spawn it made into the group, which took
// its own unit first), so the count reaches zero only when the group is quiet. The count
// word is the latch of sched/latch.hpp (a futex with a sleeper bit), reused after each wait.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "flowlane/flowlane.h"
#include "sched/latch.hpp"
#include "sched/pool.hpp"

namespace flowlane::sched {

class TaskGroup {
 public:
  TaskGroup() = default;
  explicit TaskGroup(Pool& pool) : pool_(&pool) {}
  TaskGroup(const TaskGroup&) = delete;
  TaskGroup& operator=(const TaskGroup&) = delete;

  // Binds a recycled group to a pool (the group must be idle).
  void reset(Pool& pool) {
    pool_ = &pool;
    failed_.store(false, std::memory_order_relaxed);
    region_.store(0, std::memory_order_relaxed);  // idle: no task carries it
  }

  // Schedules fn(user_data); cleanup(user_data) (may be null) runs once after fn ran or
  // was skipped. May throw std::bad_alloc (nothing is scheduled then).
  void spawn(fl_task_fn fn, void* user_data, fl_release_fn cleanup);

  // Waits for every task; returns FL_OK or the first failure (its text in *message), and
  // clears the failure so the group can be used again. FL_ERR_TIMEOUT once `deadline`
  // passes with tasks unfinished, FL_ERR_CANCELLED (and watch->gave_up set: a task may
  // return FL_ERR_CANCELLED itself) once watch->stop is set with tasks unfinished (`watch`,
  // when given, is told when the wait blocks: latch.hpp): the tasks go on, and a failure
  // stays for the next wait.
  fl_status_t wait(std::string* message, const Deadline& deadline = Deadline::forever(), BlockWatch* watch = nullptr);
  // The end of a wait that saw the group idle (wait() calls it then): rearms the latch and
  // returns FL_OK or the first failure, as wait() does. For a caller that saw idle() true
  // since its wait began.
  fl_status_t result(std::string* message);
  // Wakes the threads blocked in wait() so that they look at their watch's stop flag.
  void wake_waiters() { latch_.wake(); }

  // No task is spawned and unfinished.
  bool idle() const { return latch_.done(); }
  // Tasks spawned and unfinished (a snapshot, for messages).
  int64_t unfinished() const { return latch_.pending(); }
  // The context (sched/task.hpp) the group's tasks run under on a thread that has none of
  // its own (a worker that took one): set by the layer above while the group is idle, for a
  // group created inside one of its callbacks (core/engine/context.hpp); null otherwise.
  void set_context(const void* context) { context_ = context; }
  // The calling thread's innermost running task is one of this group's: waiting for or
  // destroying the group there would wait for itself.
  bool inside_own_task() const;
  // The group of the calling thread's innermost running task, or null (the thread runs no
  // group's task).
  static const TaskGroup* running();
  // A pointer-sized slot of the calling thread's innermost running task, this run only, for
  // the layer above (null when the thread runs no group's task): what it puts there is handed
  // to the function set_task_end() installed once the task's function has returned, before
  // its cleanup and before its group may finish (the engine's groups borrow the owner of the
  // running task's group there: core/engine/fork_join.hpp). Only the running thread touches
  // the slot.
  static void** running_slot();
  // Installs that function (once, before any slot is set).
  static void set_task_end(void (*fn)(void* slot));
  // An opaque pointer the layer above keeps with the group (the engine's record of it), set
  // while the group is idle; the pool never reads it.
  void set_owner(const void* owner) { owner_ = owner; }
  const void* owner() const { return owner_; }

 private:
  struct Item;
  static void run_item(Task* t);

  // The group's isolation region (sched/task.hpp), allocated by the first spawn from a
  // program thread: its tasks carry it, and a program thread waiting for the group helps
  // with that region only. 0: none yet. Tasks spawned from other tasks keep theirs.
  uint64_t region();

  Pool* pool_ = nullptr;
  const void* context_ = nullptr;
  const void* owner_ = nullptr;
  std::atomic<uint64_t> region_{0};
  Latch latch_{0};
  std::atomic<bool> failed_{false};  // a task failed: unstarted ones are skipped
  // The first failure's record. Written by a failing task and taken (and reset) by wait(),
  // which may run at the same time when another thread spawns into the group while it is
  // waited for: both sides hold failure_mu_. recorded_ is also read without it, by wait()'s
  // fast path (no failure: no lock).
  std::mutex failure_mu_;
  std::atomic<bool> recorded_{false};  // the first failure's status and text are set
  fl_status_t status_ = FL_OK;       // under failure_mu_
  std::string message_;              // under failure_mu_
};

}  // namespace flowlane::sched
