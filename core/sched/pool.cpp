// The work-stealing pool. Protocols (deque orderings, sleep/wake, regions, spare workers):
// core/sched/README.md.
//
// A worker's top-level loop looks for work in this order: its own deque (LIFO), the
// injection queue (FIFO, work submitted from outside), then random victims' deques (FIFO
// end). Having found nothing it spins for a short while, then parks on the notifier:
// prepare_wait, one more full scan, then commit_wait. submit() publishes and calls
// notify_one(), which costs a fence and a load when no worker sleeps.
//
// A worker waiting inside a task (Pool::wait) looks only for tasks of its own region, in
// its own deque's top and at the oldest end of victims' deques, and never in the injection
// queue; with none left it blocks, counted in `blocked`, and spare worker number k runs
// while k < blocked (the spare stands in for a blocked worker).
#include "sched/pool.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <mutex>
#include <thread>
#include <vector>

#include "base/cpu.hpp"
#include "base/env.hpp"
#include "base/error.hpp"  // FL_TLS
#include "sched/pool_impl.hpp"
#include "sched/topology.hpp"

namespace flowlane::sched {

namespace {

// Rounds of "look everywhere" a worker makes before parking, and the wall time they may
// take. Short: an idle engine must cost ~0 CPU. Each round ends with a pause; the second
// half also yields, so that a thread sharing this worker's CPU (the submitter, when there
// are more threads than CPUs) runs instead of the spin. 512 rounds are on the order of
// 100 us on an idle machine: long enough to catch the next task of a fork-join burst
// without a futex round trip, short enough to be invisible when idle.
// The wall-time bound, checked after every yield: on a machine where other threads keep
// the CPUs busy, a yield gives the CPU away for the rest of a time slice (milliseconds),
// and a worker that is spinning, not parked, is not woken by new work either. Bounded by
// rounds only, an idle episode took 256 such slices, and every hand-off and the pool's
// destruction waited for them; now one long yield ends the spin, and the worker parks.
constexpr int kSpinRounds = 512;
constexpr int64_t kSpinMaxNs = 100'000;
constexpr int kClockEvery = 32;  // rounds between two reads of the clock while not yielding

// Pool ids (Pool::Impl::id): never reused, so a lease naming a destroyed pool never
// matches a new one made at the same address.
std::atomic<uint64_t> g_pool_ids{1};

}  // namespace

// The current thread's worker and pool (sched/pool_impl.hpp).
namespace detail {
constinit FL_TLS thread_local const void* t_pool = nullptr;
constinit FL_TLS thread_local Pool* t_pool_object = nullptr;
}  // namespace detail
constinit FL_TLS thread_local Worker* tls_worker = nullptr;

namespace {

// The calling thread's region (sched/task.hpp). kFresh until a fresh scope's region is
// first asked for; regions are handed out in blocks per thread, so opening one touches no
// shared cache line.
FL_TLS thread_local uint64_t t_next_region = 0;
FL_TLS thread_local uint64_t t_region_end = 0;
std::atomic<uint64_t> g_region_blocks{kFirstRegion};
constexpr uint64_t kRegionBlock = uint64_t(1) << 16;
}  // namespace

uint64_t new_region() {
  if (t_next_region == t_region_end) {
    t_next_region = g_region_blocks.fetch_add(kRegionBlock, std::memory_order_relaxed);
    t_region_end = t_next_region + kRegionBlock;
  }
  return t_next_region++;
}

namespace detail {
// kFresh: a thread's work outside every scope is a region of its own, allocated when it
// first submits (a program thread's fork–join work is isolated from another's).
constinit FL_TLS thread_local uint64_t t_region = RegionScope::kFresh;  // sched/task.hpp: RegionScope
constinit FL_TLS thread_local const void* t_context = nullptr;  // sched/task.hpp: current_context()
}  // namespace detail

void Pool::Impl::park_spare(Worker& w) {
  // A spare that may not run: its deque's leftovers go to the others, then it sleeps until
  // `blocked` grows. Dekker pair with BlockedScope: it increments blocked (seq_cst) before
  // bumping the epoch; we read the epoch before re-checking blocked (seq_cst), and the
  // futex compares the epoch atomically with the sleep, so an increment after our check
  // changes the word and the wait returns at once.
  // Work this spare leaves behind must not sleep with it: tasks in its deque, and a task it
  // yielded to the injection queue at its last task boundary (Pool::yield() does not
  // notify when the yielding worker's deque is empty: it expects to dequeue the task
  // itself, which a spare that parks never does). A base worker parked meanwhile would
  // never wake for them, so always pass one wake-up on (a fence and a load when nobody
  // sleeps; the woken worker's scan finds the work or parks again).
  notifier.notify_one();
  for (;;) {
    // Pairs with the fetch_add of spare_epoch in BlockedScope() and ~Pool(), which come
    // after their increment of blocked / store of stop (the pattern described above).
    uint32_t epoch = spare_epoch.load(std::memory_order_seq_cst);
    // Pairs with the seq_cst store of stop in ~Pool() (and may_run() with BlockedScope()).
    if (stop.load(std::memory_order_seq_cst) || may_run(w)) return;
    futex_wait(&spare_epoch, epoch);
  }
}

void Pool::Impl::worker_main(Worker& w) {
  detail::t_pool = this;
  tls_worker = &w;
  InjectionQueue::Token token(injection);
  w.token = &token;
  const bool spare = w.index >= base;
  for (;;) {
    if (spare && !may_run(w)) {
      park_spare(w);
      // Pairs with the seq_cst store of stop in ~Pool() (seen by park_spare() already).
      if (stop.load(std::memory_order_seq_cst)) break;
      continue;
    }
    bool retry = false;
    Task* t = find_any(w, &retry);
    if (t == nullptr) {
      const auto spin_start = std::chrono::steady_clock::now();
      for (int round = 1; t == nullptr && round <= kSpinRounds; ++round) {
        cpu_relax();
        const bool yield = round > kSpinRounds / 2;
        if (yield) std::this_thread::yield();
        if ((yield || round % kClockEvery == 0) &&
            std::chrono::steady_clock::now() - spin_start > std::chrono::nanoseconds(kSpinMaxNs))
          break;
        retry = false;
        t = find_any(w, &retry);
      }
    }
    if (t == nullptr) {
      // Park: announce, re-check everything (Dekker pair with submit()), then sleep.
      notifier.prepare_wait();
      retry = false;
      t = find_any(w, &retry);
      if (t == nullptr && !retry) {
        // stop: seq_cst load after prepare_wait's fence; the destructor stores stop and
        // then notifies, so either we see it here or we receive its token.
        // Store-load pair: ~Pool() stores stop, then fences in notify_all(); we counted
        // ourselves and fenced in prepare_wait(), then load stop.
        if (stop.load(std::memory_order_seq_cst)) {
          notifier.cancel_wait();
          break;
        }
        if (notifier.commit_wait()) Worker::bump(w.parks);
        // A spare that may no longer run consumed a token meant for work: pass it on.
        if (spare && !may_run(w)) notifier.notify_one();
        continue;
      }
      notifier.cancel_wait();
      if (t == nullptr) continue;  // a steal lost a race: look again
    }
    run(w, t);
  }
  w.token = nullptr;
  tls_worker = nullptr;
  detail::t_pool = nullptr;
  detail::t_pool_object = nullptr;
}

Pool::Pool(unsigned num_workers, const void* owner) : impl_(std::make_unique<Impl>()) {
  unsigned n = num_workers ? num_workers : logical_core_count();
  n = std::min<unsigned>(n, Notifier::kMaxWaiters - kMaxSpareWorkers);
  impl_->owner = owner;
  impl_->id = g_pool_ids.fetch_add(1, std::memory_order_relaxed);
  impl_->base = n;
  impl_->capacity = n + kMaxSpareWorkers;
  impl_->workers.reset(new std::unique_ptr<Worker>[impl_->capacity]);
  // Threads start only after every base Worker exists (thieves index the array up to
  // `started`); spares are added one at a time later.
  for (unsigned i = 0; i < n; ++i) {
    auto w = std::make_unique<Worker>();
    w->index = i;
    w->rng = 0x9E3779B97F4A7C15ull * (i + 1);
    impl_->workers[i] = std::move(w);
  }
  impl_->started.store(n, std::memory_order_release);  // pairs with the acquire in steal_round()
  for (unsigned i = 0; i < n; ++i) {
    Worker* wp = impl_->workers[i].get();
    Impl* impl = impl_.get();
    wp->thread = std::thread([impl, wp, this] {
      detail::t_pool_object = this;
      impl->worker_main(*wp);
    });
  }
}

Pool::~Pool() {
  // Store-load pair with worker_main()'s load of stop after prepare_wait() (through the
  // fence in notify_all()), and read by park_spare() after the epoch bump below.
  impl_->stop.store(true, std::memory_order_seq_cst);
  impl_->notifier.notify_all();
  // Pairs with the seq_cst load of spare_epoch in park_spare(): a spare that read the old
  // epoch either sees stop or has its futex_wait return at once.
  impl_->spare_epoch.fetch_add(1, std::memory_order_seq_cst);
  futex_wake(&impl_->spare_epoch, INT_MAX);
  unsigned n;
  {
    // No spare is started after this: BlockedScope checks `stop` under the same lock.
    std::lock_guard<std::mutex> lock(impl_->spawn_mu);
    n = impl_->started.load(std::memory_order_acquire);  // pairs with release in Pool(), BlockedScope()
  }
  for (unsigned i = 0; i < n; ++i)
    if (impl_->workers[i]->thread.joinable()) impl_->workers[i]->thread.join();
  impl_->release_slots();
}

unsigned Pool::size() const { return impl_->base; }

int64_t caller_spin_ns() {
  static const int64_t ns = env_count("FLOWLANE_WAIT_SPIN_NS", kCallerSpinNs, 10'000'000);  // at most 10 ms
  return ns;
}

int64_t async_spin_ns() {
  static const int64_t ns = std::max(caller_spin_ns(), env_count("FLOWLANE_ASYNC_WAIT_SPIN_NS", kAsyncSpinNs, 100'000'000));
  return ns;
}

const void* Pool::current_owner() { return detail::t_pool_object != nullptr ? detail::t_pool_object->impl_->owner : nullptr; }

int worker_index(const Pool& pool) {
  return detail::t_pool == pool.impl_.get() ? int(tls_worker->index) : -1;
}

void Pool::submit(Task* t) {
  const bool lane = t->tag == kLaneTag;
  if (!lane) t->tag = current_region();
  Worker* w = nullptr;
  if (detail::t_pool == impl_.get()) {
    w = tls_worker;  // a worker, or a program thread taking part
  } else if (!lane && detail::t_pool == nullptr) {
    // A program thread's fork–join spawn goes to the deque it leases (participation.cpp).
    // A worker of another pool keeps to the injection queue: it never takes part here.
    w = impl_->leased_slot();
  }
  // Counted before it is published (see quiescent()).
  if (w != nullptr) {
    Worker::bump(w->submitted);
    w->deque.push(t);
  } else {
    impl_->injected.fetch_add(1, std::memory_order_relaxed);
    impl_->injection.enqueue(t);
  }
  impl_->notifier.notify_one();
}

void Pool::yield(Task* t) {
  if (detail::t_pool != impl_.get()) {
    submit(t);
    return;
  }
  Worker::bump(tls_worker->submitted);
  impl_->injection.enqueue(t);
  // This worker dequeues it as soon as its own deque is empty (find_local); only other
  // work ahead of it here is a reason to wake a sleeper.
  if (!tls_worker->deque.empty()) impl_->notifier.notify_one();
}

bool Pool::run_one() {
  if (detail::t_pool != impl_.get()) return false;
  Task* t = impl_->find_in_region(*tls_worker, current_region());
  if (t == nullptr) return false;
  Impl::run(*tls_worker, t);
  return true;
}

void Pool::relax(unsigned n) {
  cpu_relax();
  if ((n & 63) == 0) std::this_thread::yield();
}

Pool::BlockedScope::BlockedScope(Pool& p) {
  if (tls_worker->external) return;  // a program thread taking part: the pool lacks no worker
  pool_ = &p;
  Impl& im = *p.impl_;
  // seq_cst: pairs with the seq_cst loads in may_run() (see park_spare()).
  unsigned nb = im.blocked.fetch_add(1, std::memory_order_seq_cst) + 1;
  unsigned want = std::min(im.base + nb, im.capacity);  // workers needed to stand in for every blocked one
  // Pairs with the release stores of started below and in Pool() (re-read under spawn_mu).
  if (im.started.load(std::memory_order_acquire) < want) {
    std::lock_guard<std::mutex> lock(im.spawn_mu);
    unsigned have = im.started.load(std::memory_order_relaxed);
    if (have < want && !im.stop.load(std::memory_order_relaxed)) {
      auto w = std::make_unique<Worker>();
      w->index = have;
      w->rng = 0x9E3779B97F4A7C15ull * (have + 1);
      Worker* wp = w.get();
      im.workers[have] = std::move(w);
      im.started.store(have + 1, std::memory_order_release);  // pairs with the acquire in steal_round()
      Pool* pool = &p;
      Impl* impl = &im;
      wp->thread = std::thread([impl, wp, pool] {
        detail::t_pool_object = pool;
        impl->worker_main(*wp);
      });
    }
  }
  // After the increment of blocked: pairs with the seq_cst load of spare_epoch in
  // park_spare(), which reads the epoch before blocked (the pattern described there).
  im.spare_epoch.fetch_add(1, std::memory_order_seq_cst);
  futex_wake(&im.spare_epoch, INT_MAX);
}

Pool::BlockedScope::~BlockedScope() {
  if (pool_ == nullptr) return;
  // The spare standing in for us notices at its next task boundary and parks again.
  // Pairs with the seq_cst load of blocked in may_run().
  pool_->impl_->blocked.fetch_sub(1, std::memory_order_seq_cst);
}

unsigned Pool::parked_workers() const { return impl_->notifier.waiters(); }
unsigned Pool::blocked_workers() const { return impl_->blocked.load(std::memory_order_relaxed); }
unsigned Pool::spare_workers() const { return impl_->started.load(std::memory_order_relaxed) - impl_->base; }
unsigned Pool::external_slots() const { return impl_->ext_count.load(std::memory_order_relaxed); }
unsigned Pool::leased_slots() const {
  // pairs with the release store in lease_slot() (the slots below the count are valid)
  unsigned n = impl_->ext_count.load(std::memory_order_acquire), leased = 0;
  for (unsigned i = 0; i < n; ++i) leased += impl_->ext[i]->leased.load(std::memory_order_relaxed) ? 1 : 0;
  return leased;
}

PoolStats Pool::stats() const {
  PoolStats s;
  auto add = [&s](const Worker& w) {
    s.steals += w.steals.load(std::memory_order_relaxed);
    s.parks += w.parks.load(std::memory_order_relaxed);
    s.tasks += w.finished.load(std::memory_order_relaxed);
  };
  unsigned n = impl_->started.load(std::memory_order_acquire);  // pairs with release in Pool(), BlockedScope()
  for (unsigned i = 0; i < n; ++i) add(*impl_->workers[i]);
  n = impl_->ext_count.load(std::memory_order_acquire);  // pairs with the release store in lease_slot()
  for (unsigned i = 0; i < n; ++i) add(*impl_->ext[i]);
  return s;
}

bool Pool::quiescent() const {
  // Finished counts first, submitted counts second. A task's submits are counted before
  // its own finish (release), so a finish we count carries its children's submits into
  // the sums read after it (acquire): equal sums mean every task submitted so far ran.
  // External slots count as workers: their lessees count what they submit and run.
  const Impl& im = *impl_;
  // started and ext_count: pair with the release stores in Pool(), BlockedScope() and
  // lease_slot() (the slots below them are valid).
  unsigned n = im.started.load(std::memory_order_acquire);
  unsigned x = im.ext_count.load(std::memory_order_acquire);
  uint64_t finished = 0, submitted = 0;
  // Pairs with the release bump of finished in Impl::run().
  for (unsigned i = 0; i < n; ++i) finished += im.workers[i]->finished.load(std::memory_order_acquire);
  for (unsigned i = 0; i < x; ++i) finished += im.ext[i]->finished.load(std::memory_order_acquire);  // pairs as above
  // Pairs with the release stores of started and ext_count, as above.
  n = im.started.load(std::memory_order_acquire);
  x = im.ext_count.load(std::memory_order_acquire);  // pairs as the line above
  // These pair with no release (submit() and yield() count relaxed): the acquire loads of
  // finished above are what order them after the counted tasks' submits.
  for (unsigned i = 0; i < n; ++i) submitted += im.workers[i]->submitted.load(std::memory_order_acquire);
  for (unsigned i = 0; i < x; ++i) submitted += im.ext[i]->submitted.load(std::memory_order_acquire);  // see above
  submitted += im.injected.load(std::memory_order_acquire);  // pairs with nothing either: see above
  return submitted == finished;
}

void Pool::wait_quiescent() {
  for (unsigned n = 0; !quiescent(); ++n) {
    if (n < 64)
      cpu_relax();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(n < 1024 ? 10 : 200));
  }
}

}  // namespace flowlane::sched
