// Program threads taking part in a pool's work: external slots and their leases. Protocol
// and the argument that no task is stranded: core/sched/README.md, "Program threads".
//
// An external slot is a Worker record without a thread: a Chase–Lev deque plus counters,
// kept in Pool::Impl::ext and scanned by every thief (steal_round) and by the re-check a
// worker makes before it sleeps. A program thread leases one slot of a pool at a time:
//
//   lease     Pool::submit of a fork–join task (not a lane's), or a Participation scope,
//             from a thread that is no pool's worker and holds no lease of this pool: the
//             first free slot is taken with a CAS on `leased` (acquire), or a new one is
//             made (under ext_mu, published by a release store of ext_count).
//   use       the lessee is the deque's owner: push, pop. Thieves steal at the other end.
//   let go    at the end of an outermost Participation when the deque is empty; when the
//             thread leases a slot of another pool (it holds one lease at a time); at thread
//             exit. `leased` is cleared with a release store, so the next lessee (acquire
//             CAS) sees every owner-side write of this one (bottom_, the ring, counters).
//             Tasks still in the deque stay stealable: the slot stays in the pool's array,
//             leased or not, and its pushes already notified the workers.
//
// A slot is freed by whichever of the pool (release_slots(), at destruction) and the
// lessee drops the last reference: a thread whose lease outlived its pool lets go of a slot
// that still exists. The thread-local lease names the pool by id, never reused, so a lease
// of a destroyed pool never matches a pool made later at the same address.
#include <atomic>
#include <memory>
#include <mutex>

#include "base/error.hpp"  // FL_TLS
#include "sched/pool_impl.hpp"

namespace flowlane::sched {

namespace {

// The calling thread's lease: a slot of the pool whose id is t_lease_pool (0: none).
FL_TLS thread_local Worker* t_lease_slot = nullptr;
FL_TLS thread_local uint64_t t_lease_pool = 0;

void unref(Worker* s) {
  // acq_rel: the last owner sees every other owner's accesses before freeing (pairs with
  // the other reference holder's fetch_sub here).
  if (s->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete s;
}

// Lets go of the calling thread's lease, if any.
void drop_lease() {
  Worker* s = t_lease_slot;
  if (s == nullptr) return;
  t_lease_slot = nullptr;
  t_lease_pool = 0;
  // Hands the deque's owner side to the next lessee: pairs with the acquire CAS in
  // lease_slot().
  s->leased.store(false, std::memory_order_release);
  unref(s);
}

// Lets go of the lease when the thread exits (constructed by the thread's first lease).
struct LeaseReaper {
  ~LeaseReaper() { drop_lease(); }
};

void watch_thread_exit() {
  static thread_local LeaseReaper reaper;
  (void)reaper;
}

}  // namespace

Worker* Pool::Impl::leased_slot() {
  if (t_lease_pool == id) return t_lease_slot;
  return lease_slot();
}

Worker* Pool::Impl::lease_slot() {
  drop_lease();  // one lease at a time: the thread is taking part in this pool now
  Worker* s = nullptr;
  // Pairs with the release store below: the slots under the count are made.
  unsigned n = ext_count.load(std::memory_order_acquire);
  for (unsigned k = 0; k < n && s == nullptr; ++k) {
    bool free = false;
    // Acquire pairs with the release store in drop_lease(): the previous lessee's owner-side
    // writes (the deque's bottom and ring, the counters) happen before ours.
    if (!ext[k]->leased.load(std::memory_order_relaxed) &&
        ext[k]->leased.compare_exchange_strong(free, true, std::memory_order_acquire, std::memory_order_relaxed))
      s = ext[k];
  }
  if (s == nullptr) {
    std::lock_guard<std::mutex> lock(ext_mu);
    n = ext_count.load(std::memory_order_relaxed);  // written under ext_mu only
    if (n == kMaxExternalSlots) return nullptr;
    // Never throws (it runs inside submit(), after a count was taken): out of memory, the
    // thread goes on without a slot.
    std::unique_ptr<Worker> slot;
    try {
      slot.reset(new Worker());
    } catch (...) {
      return nullptr;
    }
    slot->external = true;
    slot->index = capacity + n;
    slot->rng = 0x9E3779B97F4A7C15ull * (capacity + n + 1);
    slot->pool_id = id;
    slot->refs.store(1, std::memory_order_relaxed);  // the pool's; published below
    slot->leased.store(true, std::memory_order_relaxed);
    s = slot.release();
    ext[n] = s;
    // Publishes the slot to thieves and to quiescent(): pairs with their acquire loads of
    // ext_count (steal_round(), quiescent(), stats(), leased_slots(), the loop above).
    ext_count.store(n + 1, std::memory_order_release);
  }
  s->refs.fetch_add(1, std::memory_order_relaxed);  // the lessee's (the pool holds one: it cannot drop to 0)
  t_lease_slot = s;
  t_lease_pool = id;
  watch_thread_exit();
  return s;
}

void Pool::Impl::release_slots() {
  // acquire: pairs with the release store in lease_slot() (every slot made is seen).
  unsigned n = ext_count.load(std::memory_order_acquire);
  for (unsigned k = 0; k < n; ++k) unref(ext[k]);
}

Participation::Participation(Pool& pool) {
  if (detail::t_pool != nullptr) return;  // a worker (of any pool), or taking part already
  Worker* s = pool.impl_->leased_slot();
  if (s == nullptr) return;  // every slot is leased: wait as a stranger does
  slot_ = s;
  detail::t_pool = pool.impl_.get();
  tls_worker = s;
  detail::t_pool_object = &pool;
}

Participation::~Participation() {
  if (slot_ == nullptr) return;
  detail::t_pool = nullptr;
  tls_worker = nullptr;
  detail::t_pool_object = nullptr;
  // The owner's view of its deque is exact on its side (bottom_); a stale top_ only makes
  // it look non-empty, and the lease is kept until a later wait or the thread's exit.
  if (slot_->deque.empty()) drop_lease();
}

}  // namespace flowlane::sched
