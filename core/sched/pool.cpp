// The work-stealing pool. Protocols (deque orderings, sleep/wake): core/sched/README.md.
//
// A worker looks for work in this order: its own deque (LIFO), the injection queue (FIFO,
// work submitted from outside), then random victims' deques (FIFO end). Having found
// nothing it spins for a short while, then parks on the notifier: prepare_wait, one more
// full scan, then commit_wait. submit() publishes and calls notify_one(), which costs a
// fence and a load when no worker sleeps.
#include "sched/pool.hpp"

#include <algorithm>
#include <climits>
#include <thread>
#include <vector>

#ifndef FL_UNDER_TSAN
#define FL_UNDER_TSAN 0
#endif
#if FL_UNDER_TSAN
#include <deque>
#include <mutex>
#else
#include <concurrentqueue.h>
#endif

#include "base/cpu.hpp"
#include "base/error.hpp"  // FL_TLS
#include "sched/notifier.hpp"
#include "sched/topology.hpp"
#include "sched/wsq.hpp"

namespace flowlane::sched {

namespace {

// Rounds of "look everywhere" a worker makes before parking. Each round ends with a
// pause; after kYieldAfter rounds it also yields. Short: an idle engine must cost ~0 CPU.
// 512 rounds are on the order of 50-100 us: long enough to catch the next task of a
// fork-join burst without a futex round trip, short enough to be invisible when idle.
constexpr int kSpinRounds = 512;
constexpr int kYieldAfter = 256;

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

}  // namespace

struct Worker {
  WorkStealingQueue deque;
  InjectionQueue::Token* token = nullptr;  // for the injection queue
  uint64_t rng = 0;
  unsigned index = 0;
  // Written by the owning worker only (load + store, no locked RMW), read by stats().
  std::atomic<uint64_t> steals{0};
  std::atomic<uint64_t> parks{0};
  static void bump(std::atomic<uint64_t>& c) { c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  std::thread thread;
};

struct Pool::Impl {
  std::vector<std::unique_ptr<Worker>> workers;
  InjectionQueue injection;
  Notifier notifier;
  std::atomic<bool> stop{false};

  Task* find_local(Worker& w) {
    if (Task* t = w.deque.pop()) return t;
    Task* t = nullptr;
    if (injection.try_dequeue(*w.token, t)) return t;
    return nullptr;
  }

  // One pass over the other workers' deques starting at a random victim. Sets *retry when
  // a steal lost a race (the victim may still hold work).
  Task* steal_round(Worker& w, bool* retry) {
    size_t n = workers.size();
    if (n <= 1) return nullptr;
    size_t start = size_t(xorshift(w.rng) % n);
    for (size_t k = 0; k < n; ++k) {
      Worker& v = *workers[(start + k) % n];
      if (&v == &w) continue;
      Task* t = nullptr;
      StealResult r = v.deque.steal(&t);
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
    return steal_round(w, retry);
  }

  void worker_main(Worker& w);
};

namespace {
// The current thread's worker and pool, for on_worker() and submit().
FL_TLS thread_local const void* tls_pool = nullptr;  // the Pool::Impl this thread works for
FL_TLS thread_local Worker* tls_worker = nullptr;  // initial-exec: read on every submit (core/error.hpp)
}  // namespace

void Pool::Impl::worker_main(Worker& w) {
  tls_pool = this;
  tls_worker = &w;
  InjectionQueue::Token token(injection);
  w.token = &token;
  for (;;) {
    bool retry = false;
    Task* t = find_any(w, &retry);
    for (int round = 0; t == nullptr && round < kSpinRounds; ++round) {
      cpu_relax();
      if (round >= kYieldAfter) std::this_thread::yield();
      retry = false;
      t = find_any(w, &retry);
    }
    if (t == nullptr) {
      // Park: announce, re-check everything (Dekker pair with submit()), then sleep.
      notifier.prepare_wait();
      retry = false;
      t = find_any(w, &retry);
      if (t == nullptr && !retry) {
        // stop: seq_cst load after prepare_wait's fence; the destructor stores stop and
        // then notifies, so either we see it here or we receive its token.
        if (stop.load(std::memory_order_seq_cst)) {
          notifier.cancel_wait();
          break;
        }
        if (notifier.commit_wait()) Worker::bump(w.parks);
        continue;
      }
      notifier.cancel_wait();
      if (t == nullptr) continue;  // a steal lost a race: look again
    }
    t->run(t);
  }
  w.token = nullptr;
  tls_worker = nullptr;
  tls_pool = nullptr;
}

Pool::Pool(unsigned num_workers) : impl_(std::make_unique<Impl>()) {
  unsigned n = num_workers ? num_workers : logical_core_count();
  n = std::min<unsigned>(n, Notifier::kMaxWaiters);
  impl_->workers.reserve(n);
  for (unsigned i = 0; i < n; ++i) {
    auto w = std::make_unique<Worker>();
    w->index = i;
    w->rng = 0x9E3779B97F4A7C15ull * (i + 1);
    impl_->workers.push_back(std::move(w));
  }
  // Start threads only after every Worker exists: thieves index the vector.
  for (auto& w : impl_->workers) {
    Worker* wp = w.get();
    Impl* impl = impl_.get();
    wp->thread = std::thread([impl, wp] { impl->worker_main(*wp); });
  }
}

Pool::~Pool() {
  impl_->stop.store(true, std::memory_order_seq_cst);
  impl_->notifier.notify_all();
  for (auto& w : impl_->workers)
    if (w->thread.joinable()) w->thread.join();
}

unsigned Pool::size() const { return unsigned(impl_->workers.size()); }

bool Pool::on_worker() const { return tls_pool == impl_.get(); }

int worker_index(const Pool& pool) {
  return tls_pool == pool.impl_.get() ? int(tls_worker->index) : -1;
}

void Pool::submit(Task* t) {
  if (tls_pool == impl_.get()) {
    tls_worker->deque.push(t);
  } else {
    impl_->injection.enqueue(t);
  }
  impl_->notifier.notify_one();
}

void Pool::yield(Task* t) {
  if (tls_pool != impl_.get()) {
    submit(t);
    return;
  }
  impl_->injection.enqueue(t);
  // This worker dequeues it as soon as its own deque is empty (find_local); only other
  // work ahead of it here is a reason to wake a sleeper.
  if (!tls_worker->deque.empty()) impl_->notifier.notify_one();
}

bool Pool::run_one() {
  Worker* w = tls_pool == impl_.get() ? tls_worker : nullptr;
  if (w == nullptr) return false;
  bool retry = false;
  Task* t = impl_->find_any(*w, &retry);
  if (t == nullptr) return false;
  t->run(t);
  return true;
}

void Pool::relax() {
  // help_until's loop: a pause per failed attempt, and now and then a yield so that a
  // preempted thread that holds the awaited child can run on an oversubscribed machine.
  thread_local unsigned n = 0;
  cpu_relax();
  if ((++n & 63) == 0) std::this_thread::yield();
}

unsigned Pool::parked_workers() const { return impl_->notifier.waiters(); }

PoolStats Pool::stats() const {
  PoolStats s;
  for (auto& w : impl_->workers) {
    s.steals += w->steals.load(std::memory_order_relaxed);
    s.parks += w->parks.load(std::memory_order_relaxed);
  }
  return s;
}

}  // namespace flowlane::sched
