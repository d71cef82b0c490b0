// The work-stealing pool: one Chase–Lev deque per worker (core/wsq.hpp), an injection
// queue for work from outside (moodycamel::ConcurrentQueue), random-victim stealing, and
// parking on an event count (core/notifier.hpp) after a short spin.
// Protocols: core/sched/README.md.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "sched/task.hpp"

namespace flowlane::sched {

struct PoolStats {
  uint64_t steals = 0;  // tasks taken from another worker's deque
  uint64_t parks = 0;   // times a worker went to sleep
};

// The calling thread's worker index in `pool` (0 .. size()-1), or -1 when it is not one
// of pool's workers.
class Pool;
int worker_index(const Pool& pool);

class Pool {
 public:
  // Starts `num_workers` threads (0 = one per logical core).
  explicit Pool(unsigned num_workers);
  // Joins the workers. Every task submitted before must have run; the owner drains first.
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  unsigned size() const;

  // Schedules t to run exactly once on some worker. Callable from any thread. From a
  // worker of this pool the task goes to that worker's own deque (LIFO for the owner,
  // stealable by others); from elsewhere to the injection queue. Wakes a sleeper if needed.
  void submit(Task* t);

  // Re-queues a task that was running (a lane ending its batch) behind the work already
  // waiting: it goes to the FIFO injection queue, so other tasks of this worker's deque
  // run first, and wakes another worker only when this worker has such other work (a
  // running task being re-queued creates no new parallelism). Off the pool: submit().
  void yield(Task* t);

  // True when the calling thread is one of this pool's workers.
  bool on_worker() const;

  // Runs queued tasks on the calling worker until done() returns true. Only valid
  // on_worker(); used by fork–join so that a worker waiting on its children helps instead
  // of blocking (nested fork–join never deadlocks, even with one worker).
  template <class Done>
  void help_until(Done&& done) {
    while (!done()) {
      if (!run_one()) relax();
    }
  }

  // Runs at most one pending task on the calling worker; false if none was found.
  bool run_one();

  PoolStats stats() const;

  // Workers that are parking or parked right now (between prepare_wait and wake-up). A
  // snapshot, for tests and diagnostics.
  unsigned parked_workers() const;

 private:
  friend int worker_index(const Pool& pool);
  // A brief pause between unsuccessful run_one() calls: a CPU pause, a yield after a while.
  // Not a sleep: the thread is waiting for its own children, which are running elsewhere.
  void relax();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flowlane::sched
