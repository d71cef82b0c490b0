// Task groups (sched/task_group.hpp).
#include "sched/task_group.hpp"

#include "base/error.hpp"
#include "base/recycler.hpp"

namespace flowlane::sched {

namespace {
// The groups whose tasks the calling thread is running, innermost first (a task that waits
// helps run other tasks on top of itself).
struct RunningFrame {
  const TaskGroup* group;
  RunningFrame* parent;
  void* slot = nullptr;  // the layer above's, for this run of the task (TaskGroup::running_slot)
};
FL_TLS thread_local RunningFrame* t_running = nullptr;
// Called with a run's slot when it is set once the task's function has returned.
void (*g_task_end)(void* slot) = nullptr;
}  // namespace

void** TaskGroup::running_slot() { return t_running != nullptr ? &t_running->slot : nullptr; }

void TaskGroup::set_task_end(void (*fn)(void* slot)) { g_task_end = fn; }

bool TaskGroup::inside_own_task() const {
  // The innermost task only: a task waiting (directly) for its own group. Deeper nesting —
  // a task of this group waiting for another group whose task, run on top of it while it
  // helps, waits for this group — is a cycle of waits the program made.
  return t_running != nullptr && t_running->group == this;
}

const TaskGroup* TaskGroup::running() { return t_running != nullptr ? t_running->group : nullptr; }

struct TaskGroup::Item : Task {
  TaskGroup* group = nullptr;
  fl_task_fn fn = nullptr;
  void* user_data = nullptr;
  fl_release_fn cleanup = nullptr;
};

void TaskGroup::spawn(fl_task_fn fn, void* user_data, fl_release_fn cleanup) {
  Item* item = Recycler<Item>::get();
  item->run = &TaskGroup::run_item;
  item->tag = kRegionTop;  // Pool::submit sets the caller's region
  item->group = this;
  item->fn = fn;
  item->user_data = user_data;
  item->cleanup = cleanup;
  // The unit is taken before the task can run (its drop is the task's last access).
  latch_.add(1);
  if (Pool::current() != nullptr) {
    pool_->submit(item);  // from a task (or a thread taking part): the task's region
    return;
  }
  // From a program thread: the group's own region, so that a wait for this group helps
  // with its tasks and their children only (core/sched/README.md, "Program threads").
  RegionScope scope(region());
  pool_->submit(item);
}

uint64_t TaskGroup::region() {
  // Relaxed: the value is only ever compared with tags, which carry it to other threads
  // through the pool's own publication (submit/steal); two threads racing here agree on
  // the first one stored.
  uint64_t r = region_.load(std::memory_order_relaxed);
  if (r != 0) return r;
  uint64_t mine = new_region();
  return region_.compare_exchange_strong(r, mine, std::memory_order_relaxed) ? mine : r;
}

void TaskGroup::run_item(Task* t) {
  auto* item = static_cast<Item*>(t);
  TaskGroup* g = item->group;
  fl_task_fn fn = item->fn;
  void* ud = item->user_data;
  fl_release_fn cleanup = item->cleanup;
  Recycler<Item>::put(item);  // nothing of the item is used below
  // Relaxed: a task started after the failure became visible is skipped; one racing with
  // it may run, which is allowed (as in task graphs).
  if (!g->failed_.load(std::memory_order_relaxed)) {
    fl_status_t st;
    RunningFrame frame{g, t_running};
    t_running = &frame;
    // A worker that took the task runs it under the group's context; the thread that made
    // the group, helping in wait(), keeps its own (which the group's context stands for).
    const void* own = current_context();
    ContextScope context(own == nullptr && g->context_ != nullptr ? g->context_ : own);
    // The task's failure quotes what a failed call told the task (below), never a message
    // left on this thread by an earlier, unrelated call (the helping caller's own, another
    // callback's on this worker).
    clear_last_error();
    try {
      st = fn(ud);
    } catch (...) {  // a C task must not throw; a C++ one through the C API gets a status
      st = FL_ERR_INTERNAL;
    }
    t_running = frame.parent;
    // What the layer above left in the run's slot ends with the run, while the group (which
    // this task's unit keeps alive) still exists.
    if (frame.slot != nullptr) g_task_end(frame.slot);
    if (st != FL_OK) {
      g->failed_.store(true, std::memory_order_relaxed);
      // The first failing task records its status and the worker's last flowlane error
      // (what the task was told by the call that failed, if any), under the lock that a
      // wait() taking the record at the same time holds too.
      std::lock_guard<std::mutex> lock(g->failure_mu_);
      if (!g->recorded_.load(std::memory_order_relaxed)) {
        g->status_ = st;
        try {
          g->message_ = last_error();
        } catch (...) {
          g->message_.clear();
        }
        g->recorded_.store(true, std::memory_order_relaxed);
      }
    }
  }
  if (cleanup != nullptr) {
    try {
      cleanup(ud);
    } catch (...) {
      // A cleanup must not throw; the task's result stands.
    }
  }
  g->latch_.count_down();  // the last access to the group: a waiter may free it now
}

fl_status_t TaskGroup::wait(std::string* message, const Deadline& deadline, BlockWatch* watch) {
  if (!latch_.done()) {
    bool done;
    if (Pool::current() == nullptr && deadline.infinite()) {
      // A program thread takes part while it waits: it runs the group's tasks and their
      // children (the group's region) instead of sleeping (core/sched/README.md, "Program
      // threads"). Not in a timed wait: a task it ran could hold it past its deadline.
      RegionScope scope(region());
      Participation part(*pool_);
      done = latch_.wait(deadline, watch);
    } else {
      done = latch_.wait(deadline, watch);
    }
    if (!done) {
      if (watch == nullptr || !watch->stopped()) return FL_ERR_TIMEOUT;
      watch->gave_up = true;
      return FL_ERR_CANCELLED;
    }
  }
  return result(message);
}

fl_status_t TaskGroup::result(std::string* message) {
  latch_.rearm();
  // Fast path, no failure: a failure recorded concurrently (by a task spawned meanwhile from
  // another thread) is left to the next wait. The record itself is read under the lock.
  if (!recorded_.load(std::memory_order_relaxed)) return FL_OK;
  std::lock_guard<std::mutex> lock(failure_mu_);
  if (!recorded_.load(std::memory_order_relaxed)) return FL_OK;  // another waiter took it
  fl_status_t st = status_;
  if (message != nullptr) *message = message_;
  status_ = FL_OK;
  message_.clear();
  recorded_.store(false, std::memory_order_relaxed);
  failed_.store(false, std::memory_order_relaxed);
  return st;
}

}  // namespace flowlane::sched
