// The work-stealing pool: one Chase–Lev deque per worker (sched/wsq.hpp), an injection
// queue for work from outside (moodycamel::ConcurrentQueue), random-victim stealing,
// parking on an event count (sched/notifier.hpp) after a short spin, and waits that never
// run foreign work on top of a suspended frame: a waiting worker helps only with tasks of
// its own isolation region (sched/task.hpp), and when it must block, a spare worker takes
// its place so the pool keeps its parallelism. A program thread that spawns fork–join work
// or waits for it takes part as a worker does (Participation, below): a deque of its own,
// and it helps run its own work while it waits. Protocols: core/sched/README.md.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>

#include "base/cpu.hpp"
#include "base/deadline.hpp"
#include "base/error.hpp"  // FL_TLS
#include "sched/task.hpp"

namespace flowlane::sched {

struct PoolStats {
  uint64_t steals = 0;  // tasks taken from another worker's deque
  uint64_t parks = 0;   // times a worker went to sleep
  uint64_t tasks = 0;   // tasks run
};

// The calling thread's worker index in `pool` (0 .. size()-1 for the base workers, higher
// for spare workers, higher still for a program thread taking part), or -1 when it is not
// one of pool's workers.
class Pool;
struct Worker;

namespace detail {
// The calling thread's pool (its Pool::Impl and the Pool), set on the pool's threads and on a
// program thread taking part (sched/pool_impl.hpp); read inline on the waits' paths.
extern constinit FL_TLS thread_local const void* t_pool;
extern constinit FL_TLS thread_local Pool* t_pool_object;
}  // namespace detail
int worker_index(const Pool& pool);

class Pool {
 public:
  // At most this many spare workers stand in for workers blocked in waits at once. Past
  // it, a blocked worker is not replaced (the state dump says so).
  static constexpr unsigned kMaxSpareWorkers = 256;
  // At most this many program threads hold a deque of the pool at once (Participation);
  // past it, a program thread's spawns go to the injection queue and its waits sleep.
  static constexpr unsigned kMaxExternalSlots = 64;

  // Starts `num_workers` threads (0 = one per logical core). `owner` is an opaque tag the
  // pool's threads report through current_owner() (the engine that created the pool).
  explicit Pool(unsigned num_workers, const void* owner = nullptr);
  // Joins the workers. Every task submitted before must have run; the owner drains first.
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // The pool's parallelism: its base workers (spares only replace blocked ones).
  unsigned size() const;

  // Schedules t to run exactly once on some worker. Callable from any thread. The task
  // takes the submitting thread's region (unless it is a lane task: kLaneTag). From a
  // worker of this pool it goes to that worker's own deque (LIFO for the owner, stealable
  // by others). From a thread that is no pool's worker, a task other than a lane's goes to
  // the deque of the external slot the thread leases (leased now if it holds none; the
  // lease lasts until a wait of the thread's ends with that deque empty: Participation);
  // anything else goes to the injection queue. Wakes a sleeper if needed.
  void submit(Task* t);

  // Re-queues a task that was running (a lane ending its batch) behind the work already
  // waiting: it goes to the FIFO injection queue, so other tasks of this worker's deque
  // run first, and wakes another worker only when this worker has such other work (a
  // running task being re-queued creates no new parallelism). Off the pool: submit().
  void yield(Task* t);

  // True when the calling thread is one of this pool's workers (base or spare), or a
  // program thread taking part in it (inside a Participation).
  bool on_worker() const { return detail::t_pool == impl_.get(); }
  // The pool whose worker the calling thread is, or null.
  static Pool* current() { return detail::t_pool_object; }
  // The owner tag of the pool whose worker the calling thread is, or null.
  static const void* current_owner();

  // Runs at most one pending task of the caller's region on the calling worker; false if
  // none was found (or the caller is not a worker of this pool).
  bool run_one();

  // Waits until done() returns true or `deadline` passes; returns done(). On a worker of
  // this pool: runs tasks of the caller's region meanwhile (never other work: see
  // sched/task.hpp), and when none is left blocks in block(deadline) while a spare worker
  // keeps the pool's parallelism (a program thread taking part blocks without one: the
  // pool has all its workers). Elsewhere: block(deadline). block(d) sleeps on whatever
  // makes done() true and returns once it is, or once d has passed.
  template <class Done, class Block>
  bool wait(Done&& done, Block&& block, const Deadline& deadline = Deadline::forever()) {
    if (done()) return true;
    if (!on_worker()) {
      block(deadline);
      return done();
    }
    for (unsigned idle = 0; !done();) {
      if (run_one()) {
        idle = 0;
        // A steady supply of tasks would otherwise keep a timed wait past its deadline.
        if (!deadline.infinite() && deadline.passed()) return done();
      } else if (++idle < kWaitSpins) {
        relax(idle);
        if ((idle & 63) == 0 && deadline.passed()) return done();
      } else {
        BlockedScope blocked(*this);
        block(deadline);
        return done();
      }
    }
    return true;
  }

  PoolStats stats() const;

  // External slots leased by program threads right now, and made so far (snapshots).
  unsigned leased_slots() const;
  unsigned external_slots() const;

  // True when every task submitted so far has run (none queued, none running). Callers
  // that stop new submissions first (engine destroy) then wait_quiescent() before joining.
  bool quiescent() const;
  void wait_quiescent();

  // Workers that are parking or parked right now (between prepare_wait and wake-up). A
  // snapshot, for tests and diagnostics.
  unsigned parked_workers() const;
  // Workers blocked in wait() right now, and spare workers started so far (snapshots).
  unsigned blocked_workers() const;
  unsigned spare_workers() const;

 private:
  friend int worker_index(const Pool& pool);
  friend Worker* local_worker(const Pool& pool);
  friend class Participation;
  // Rounds of helping/spinning in wait() before the worker blocks: tasks waited for are
  // often short, and a block costs a spare worker's wake-up.
  static constexpr unsigned kWaitSpins = 2048;
  // A brief pause between unsuccessful run_one() calls: a CPU pause, and now and then a
  // yield so that a preempted thread holding the awaited work can run.
  void relax(unsigned n);
  // A worker blocked in wait(): counted, and replaced by a spare while it is. A program
  // thread taking part is not counted (no spare stands in for it).
  class BlockedScope {
   public:
    explicit BlockedScope(Pool& p);
    ~BlockedScope();

   private:
    Pool* pool_ = nullptr;  // null: not counted
  };
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Makes the calling thread take part in `pool`'s work for the lifetime of the scope when it
// is no pool's worker (core/sched/README.md, "Program threads"): it leases one of the pool's
// external slots (a deque of its own that the workers steal from), or keeps the one it
// leases already, and is one of the pool's workers while the scope lasts (on_worker(),
// Pool::current(), current_owner()): waits inside help with tasks of the thread's region,
// its spawns are pushes onto its own deque, and what the tasks it runs call sees the pool
// as theirs. At the end it lets the slot go if its deque is empty (else it keeps it, for
// the work still queued there). Does nothing on a worker (of any pool, or taking part
// already) and when every slot is leased (the thread then waits as before: it sleeps).
// Scopes are opened by the waits of fork–join work: a task group's wait, parallel_for, a
// task graph's run.
class Participation {
 public:
  explicit Participation(Pool& pool);
  ~Participation();
  Participation(const Participation&) = delete;
  Participation& operator=(const Participation&) = delete;
  // The thread takes part (it leased a slot); false on a worker or without a slot.
  bool joined() const { return slot_ != nullptr; }

 private:
  Worker* slot_ = nullptr;
};

// How long a thread that is no pool's worker polls done() in wait() before it blocks:
// FLOWLANE_WAIT_SPIN_NS (0: block at once), else kCallerSpinNs. What a program thread waits
// for is often microseconds away (a GPU kernel's completion seen by the poller, a short
// host instruction), and waking a blocked thread costs a futex wake-up and a reschedule,
// several microseconds on a virtual machine. Bounded, and yielding: an idle engine still
// leaves every core idle.
constexpr int64_t kCallerSpinNs = 50'000;
int64_t caller_spin_ns();

// The same for a wait on work that completes only while someone tests it (a collective's
// transport: a program thread waiting drives its progress rounds as it polls, as MPI_Wait
// drives MPI's, and MPI's non-blocking collectives advance only while tested):
// FLOWLANE_ASYNC_WAIT_SPIN_NS (0: the caller_spin_ns() budget only), else kAsyncSpinNs.
// Longer than kCallerSpinNs: a 64 KiB all-reduce between two processes takes tens of
// microseconds, and a waiter that blocks before it is done leaves its rounds to the
// progress thread, and its own wake-up to a futex (2 ranks on 2 cores, bench_comm_mpi
// --rounds 5, 4 alternating runs with FLOWLANE_ASYNC_WAIT_SPIN_NS=0 and without: 64 KiB
// all-reduce 32.7 -> 24.1 us strict, 24.0 -> 21.5 alongside, raw MPI 17 us).
constexpr int64_t kAsyncSpinNs = 2'000'000;
int64_t async_spin_ns();

// Polls done() for up to budget (and not past the deadline): a CPU pause between
// polls, a yield every kCallerYieldEvery (a preempted thread that would make done() true
// gets the core). Returns done().
template <class Done>
bool caller_spin(Done& done, const Deadline& deadline, int64_t budget = caller_spin_ns()) {
  constexpr unsigned kCallerYieldEvery = 64;
  if (budget <= 0 || deadline.passed()) return false;  // a zero timeout asks once, as it did
  const auto start = std::chrono::steady_clock::now();
  for (unsigned n = 1;; ++n) {
    cpu_relax();
    if (done()) return true;
    if (n % kCallerYieldEvery == 0) {
      if (std::chrono::steady_clock::now() - start >= std::chrono::nanoseconds(budget) || deadline.passed())
        return false;
      std::this_thread::yield();
    }
  }
}

// Waits until done() (or the deadline) on the calling thread, with the rules of
// Pool::wait() for the pool whose worker the thread is; any other thread polls briefly
// (caller_spin), then block()s. Returns done().
template <class Done, class Block>
bool wait(Done&& done, Block&& block, const Deadline& deadline = Deadline::forever(), int64_t spin_ns = caller_spin_ns()) {
  if (Pool* p = Pool::current()) return p->wait(done, block, deadline);
  if (done() || caller_spin(done, deadline, spin_ns)) return true;
  block(deadline);
  return done();
}

}  // namespace flowlane::sched
