// The pool's insides, shared by pool.cpp (workers, submit, waits) and participation.cpp
// (program threads that take part: external slots and their leases). Not installed, not
// included outside core/sched. Protocols: core/sched/README.md.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#ifndef FL_UNDER_TSAN
#define FL_UNDER_TSAN 0
#endif
#if FL_UNDER_TSAN
#include <deque>
#else
#include <concurrentqueue.h>
#endif

#include "base/error.hpp"  // FL_TLS
#include "sched/notifier.hpp"
#include "sched/pool.hpp"
#include "sched/wsq.hpp"

namespace flowlane::sched {

// xorshift64* (Vigna): victim selection.
inline uint64_t xorshift(uint64_t& s) {
  s ^= s >> 12;
  s ^= s << 25;
  s ^= s >> 27;
  return s * 2685821657736338717ull;
}

#if FL_UNDER_TSAN
// moodycamel::ConcurrentQueue synchronizes through standalone fences, which
// ThreadSanitizer does not model: it reports races inside the queue that are not there
// (cameron314/concurrentqueue discussions of TSan). Under TSan the injection queue is a
// locked deque so that TSan checks everything else (our deque, notifier, latch, tasks).
class InjectionQueue {
 public:
  struct Token {
    explicit Token(InjectionQueue&) {}
  };
  void enqueue(Task* t) {
    std::lock_guard<std::mutex> lock(mu_);
    q_.push_back(t);
  }
  bool try_dequeue(Token&, Task*& out) {
    std::lock_guard<std::mutex> lock(mu_);
    if (q_.empty()) return false;
    out = q_.front();
    q_.pop_front();
    return true;
  }

 private:
  std::mutex mu_;
  std::deque<Task*> q_;
};
#else
// Lock-free MPMC queue. Consumers (workers) hold a ConsumerToken, which makes them rotate
// over producers cheaply. Producers are arbitrary outside threads, so no producer tokens:
// the queue's implicit per-thread producers already give each thread its own sub-queue
// and a token would have to be looked up per (thread, pool) anyway.
class InjectionQueue {
 public:
  struct Token {
    explicit Token(InjectionQueue& q) : token(q.q_) {}
    moodycamel::ConsumerToken token;
  };
  void enqueue(Task* t) { q_.enqueue(t); }
  bool try_dequeue(Token& t, Task*& out) { return q_.try_dequeue(t.token, out); }

 private:
  moodycamel::ConcurrentQueue<Task*> q_{256};
};
#endif

// A worker's deque and counters. The same record serves as an *external slot*: a deque
// without a thread, leased by a program thread while it takes part in the pool's work
// (participation.cpp); thieves steal from slots exactly as from workers.
struct Worker {
  WorkStealingQueue deque;
  InjectionQueue::Token* token = nullptr;  // for the injection queue (threads only)
  uint64_t rng = 0;
  unsigned index = 0;     // workers: 0 .. capacity-1; external slots: capacity + k
  bool external = false;  // an external slot
  // Written by the owning thread only (load + store, no locked RMW), read by stats() and
  // quiescent(). `submitted` counts tasks this worker submitted, `finished` tasks it ran.
  // A slot's owner is its lessee of the moment; leases hand the slot over with a
  // release/acquire pair (participation.cpp), so one owner's writes precede the next's.
  std::atomic<uint64_t> steals{0};
  std::atomic<uint64_t> parks{0};
  std::atomic<uint64_t> submitted{0};
  std::atomic<uint64_t> finished{0};
  static void bump(std::atomic<uint64_t>& c, std::memory_order mo = std::memory_order_relaxed) {
    c.store(c.load(std::memory_order_relaxed) + 1, mo);
  }
  // External slots only. `leased`: a program thread holds the slot. `refs`: the pool (until
  // it is destroyed) and the lessee (until it lets go); the last one frees the slot, so a
  // thread whose lease outlived the pool lets go of memory that is still there.
  std::atomic<bool> leased{false};
  std::atomic<uint32_t> refs{0};
  uint64_t pool_id = 0;
  std::thread thread;
};

struct Pool::Impl {
  const void* owner = nullptr;
  uint64_t id = 0;    // unique among every pool the process ever made (leases name it)
  unsigned base = 0;  // the pool's parallelism: workers 0 .. base-1 always run
  // Every worker, base then spares, created on demand; slots are never emptied while the
  // pool lives, so thieves index them without a lock. `started` (release store after a
  // slot is filled, acquire loads by thieves) says how many slots are valid.
  std::unique_ptr<std::unique_ptr<Worker>[]> workers;
  unsigned capacity = 0;
  std::atomic<unsigned> started{0};
  std::mutex spawn_mu;  // creating spare workers
  // External slots (participation.cpp), created on demand up to kMaxExternalSlots and
  // never removed while the pool lives; `ext_count` is published as `started` is.
  Worker* ext[kMaxExternalSlots] = {};
  std::atomic<unsigned> ext_count{0};
  std::mutex ext_mu;  // creating external slots
  InjectionQueue injection;
  Notifier notifier;
  std::atomic<bool> stop{false};
  // Tasks submitted from outside the pool (to the injection queue).
  std::atomic<uint64_t> injected{0};
  // Workers blocked in Pool::wait(); spare worker k (index base + k) runs while k < blocked.
  std::atomic<unsigned> blocked{0};
  // Futex word of parked spares: bumped whenever `blocked` grows, and at shutdown.
  std::atomic<uint32_t> spare_epoch{0};

  bool may_run(const Worker& w) const {
    // seq_cst: pairs with the seq_cst increment in BlockedScope (see park_spare()).
    return w.index < base || w.index - base < blocked.load(std::memory_order_seq_cst);
  }

  Task* find_local(Worker& w) {
    if (Task* t = w.deque.pop()) return t;
    Task* t = nullptr;
    if (injection.try_dequeue(*w.token, t)) return t;
    return nullptr;
  }

  // One pass over the other workers' deques and the external slots, starting at a random
  // victim, taking only tasks tagged `want` (kAnyTag: any). Sets *retry when a steal lost a
  // race (the victim may still hold work).
  Task* steal_round(Worker& w, bool* retry, uint64_t want) {
    // Both pair with the release stores of started (Pool(), BlockedScope()) and ext_count
    // (lease_slot()): the slots below them are filled.
    size_t nw = started.load(std::memory_order_acquire);
    size_t n = nw + ext_count.load(std::memory_order_acquire);
    if (n <= 1) return nullptr;
    size_t first = size_t(xorshift(w.rng) % n);
    for (size_t k = 0; k < n; ++k) {
      size_t i = first + k < n ? first + k : first + k - n;
      Worker& v = i < nw ? *workers[i] : *ext[i - nw];
      if (&v == &w) continue;
      Task* t = nullptr;
      StealResult r = v.deque.steal(&t, want);
      if (r == StealResult::Success) {
        Worker::bump(w.steals);
        return t;
      }
      if (r == StealResult::Retry) *retry = true;
    }
    return nullptr;
  }

  Task* find_any(Worker& w, bool* retry) {
    if (Task* t = find_local(w)) return t;
    return steal_round(w, retry, kAnyTag);
  }

  // A waiter's search: its own region only; lane tasks and the injection queue never.
  Task* find_in_region(Worker& w, uint64_t region) {
    if (region == kLaneTag) return nullptr;  // not inside a task: nothing of ours to help with
    if (Task* t = w.deque.pop(region)) return t;
    // The newest task of its own deque may be another region's (work an inner frame left
    // behind) with older ones of ours below it: take the oldest end too, as a thief would.
    Task* t = nullptr;
    if (!w.deque.empty() && w.deque.steal(&t, region) == StealResult::Success) return t;
    bool retry = false;
    return steal_round(w, &retry, region);
  }

  static void run(Worker& w, Task* t) {
    {
      RegionScope scope(t->tag);  // the task's code runs in its region (children inherit it)
      t->run(t);
    }
    // release: every submit the task made (counted before its push) happens-before this
    // count; pairs with the acquire loads in quiescent().
    Worker::bump(w.finished, std::memory_order_release);
  }

  void worker_main(Worker& w);
  void park_spare(Worker& w);

  // participation.cpp: the calling thread's slot in this pool, leased now if it holds none
  // (null when every slot is leased). Only for a thread that is no pool's worker.
  Worker* leased_slot();
  [[gnu::cold, gnu::noinline]] Worker* lease_slot();
  // Drops the pool's reference on every external slot (at destruction, workers joined).
  void release_slots();
};

// The calling thread's pool and worker (a pool's thread, or a program thread while it
// takes part: participation.cpp), for on_worker(), submit() and the waits.
// detail::t_pool (pool.hpp): the Pool::Impl this thread works for; detail::t_pool_object:
// that Pool; tls_worker: its deque (initial-exec TLS: read on every submit).
extern constinit FL_TLS thread_local Worker* tls_worker;

// The calling thread's deque in `pool` (a worker's, or the slot of a program thread taking
// part), or null.
inline Worker* local_worker(const Pool& pool) { return detail::t_pool == pool.impl_.get() ? tls_worker : nullptr; }

}  // namespace flowlane::sched
