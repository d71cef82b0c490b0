// Generation-checked, typed handle tables: what every fl_*_t* of the C API really is.
//
// A C handle is not a pointer to the live object: it packs a slot index, the handle's type
// and the slot's generation into the pointer value,
//
//   // [ 32-bit generation | 4-bit type | 28-bit slot index (>= 1) ]
//
// so a handle used after release finds a newer generation in its slot, and a handle of
// one type given where another is expected has the wrong type: both are answered with
// FL_ERR_INVALID_HANDLE instead of touching freed or foreign memory.
//
// A slot's generation g moves through three states per use, g = 4k + 1 live (the handle
// carries it), 4k + 3 claimed (a destructor owns the handle: lookups still find it, a second
// claim or erase fails), 4k + 4 dead (free, until insert() makes it 4k + 5 live). Every
// destructor that waits or checks before it frees (task groups wait for their tasks, task
// graphs refuse while running, the engine drains) first claims the handle with one CAS, so
// that of two concurrent calls exactly one goes on and the other is answered
// FL_ERR_INVALID_HANDLE without touching what the first one frees; the others erase it
// with one CAS. The claim's owner then erases it with a plain store (erase_claimed()) or
// gives it back (unclaim()). Slots live in segments
// that are allocated on demand and never freed while the process runs (type-stable
// memory), so a lookup never dereferences freed storage. Released slots are recycled
// through a free list, so a program that creates and drops handles in a loop of millions
// keeps a flat footprint; a slot whose generation would wrap around is retired instead of
// recycled, so a released handle can never become valid again.
//
// Using a handle concurrently with the call that releases it is a race in the caller
// (as with free()); sequential use-after-release is always detected, and so is a second
// destructor call racing with the first (claim() / erase()).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <new>
#include <vector>

namespace flowlane::capi {

static_assert(sizeof(void*) == 8, "flowlane handles need 64-bit pointers");

enum class HandleType : uint32_t {
  kEngine = 1, kStream = 2, kObject = 3, kGraph = 4, kComm = 5, kGroup = 6,
  kProgram = 7,  // fl_program_t (capture and replay)
};

inline constexpr uint32_t kIndexBits = 28;
inline constexpr uint32_t kIndexMask = (1u << kIndexBits) - 1;

// The type recorded in a handle's bits (whether or not the handle is live).
inline HandleType handle_type(uint64_t h) { return HandleType(uint32_t(h) >> kIndexBits); }

template <class T, HandleType kType>
class HandleTable {
 public:
  // `max_generation` is the last live generation a slot may carry (tests lower it to reach
  // the wrap-around quickly); it must be 4k + 1.
  explicit HandleTable(uint32_t max_generation = UINT32_MAX - 2) : max_gen_(max_generation) {}

  // Registers p; returns a non-zero handle value, or 0 when the table is full.
  uint64_t insert(T* p) {
    uint32_t index;
    ThreadCache* tc = thread_cache();
    if (tc != nullptr && tc->free.empty() && !refill(tc)) return 0;
    if (tc != nullptr) {  // this thread's own slots: no lock
      index = tc->free.back();
      tc->free.pop_back();
    } else {
      std::lock_guard<std::mutex> lock(mu_);  // allocation path only; lookups take no lock
      if (!free_.empty()) {
        index = free_.back();
        free_.pop_back();
      } else {
        index = next_++;
        if (!map_segment(index)) return 0;
      }
    }
    Slot& s = *slot(index);
    s.ptr.store(p, std::memory_order_relaxed);
    // Publishes ptr: pairs with the acquire load of gen in lookup() and the acquire CAS in
    // claim() / erase(). A free slot is dead (4k, 0 for a fresh one): live is 4k + 1.
    uint32_t gen = (s.gen.load(std::memory_order_relaxed) & ~kStateMask) + kLive;
    s.gen.store(gen, std::memory_order_release);
    return (uint64_t(gen) << 32) | (uint64_t(kType) << kIndexBits) | index;
  }

  // The object of a live (or claimed) handle of this type, or nullptr for 0, unknown,
  // stale, released or foreign (other type) handles.
  T* lookup(uint64_t h) const {
    const Slot* s = live_slot(h);
    if (s == nullptr) return nullptr;
    const uint32_t gen = uint32_t(h >> 32);
    // Live or claimed: a claimed handle stays usable until its destructor erases it (a task
    // spawns into its own group while the group's destroy waits for it).
    if ((s->gen.load(std::memory_order_acquire) | kClaimedBit) != (gen | kClaimedBit)) return nullptr;  // pairs with insert()
    return s->ptr.load(std::memory_order_relaxed);
  }

  // A live handle kept by an object that checks it on every call (a task group its
  // engine's): the slot's generation word, the generation the handle carries and the object
  // it named when ref() was called. Slots are type-stable memory, so the word can be read
  // after the handle was erased (it then holds a later generation) and get() costs one
  // load and a compare instead of a decode of the handle.
  struct Ref {
    const std::atomic<uint32_t>* gen = nullptr;
    uint32_t live = 0;
    T* ptr = nullptr;
    // The object while the handle is live or claimed (as lookup()), else null. Only for a
    // Ref whose ptr was non-null when ref() made it.
    T* get() const {
      // Acquire pairs with the release stores of gen in insert(), unclaim(), erase_claimed().
      return (gen->load(std::memory_order_acquire) | kClaimedBit) == (live | kClaimedBit) ? ptr : nullptr;
    }
  };
  // h's Ref; its ptr is null (and get() must not be called) when lookup(h) is null.
  Ref ref(uint64_t h) const {
    const Slot* s = live_slot(h);
    if (s == nullptr) return Ref{};
    const uint32_t gen = uint32_t(h >> 32);
    // Acquire pairs with the release store in insert(), as in lookup().
    if ((s->gen.load(std::memory_order_acquire) | kClaimedBit) != (gen | kClaimedBit)) return Ref{};
    return Ref{&s->gen, gen, s->ptr.load(std::memory_order_relaxed)};
  }

  // Claims a live handle for its destructor: returns its object, or nullptr when h is not
  // live (stale, erased, or claimed by another caller: exactly one of concurrent claims and
  // erases of a handle succeeds). The handle stays valid for lookups until erase_claimed().
  T* claim(uint64_t h) {
    Slot* s = live_slot(h);
    if (s == nullptr) return nullptr;
    uint32_t gen = uint32_t(h >> 32);
    // acq_rel: acquire orders our read of ptr after the inserter's store (pairs with the
    // release store in insert()); release orders what the previous owner did before a later
    // claim of the same live generation (unclaim() stores it back).
    if (!s->gen.compare_exchange_strong(gen, gen + kClaimedBit, std::memory_order_acq_rel)) return nullptr;
    return s->ptr.load(std::memory_order_relaxed);
  }
  // Gives a claim back (the destructor did not go on): the handle is live again.
  void unclaim(uint64_t h) {
    // release pairs with the acquire CAS of a later claim() or erase().
    slot(uint32_t(h) & kIndexMask)->gen.store(uint32_t(h >> 32), std::memory_order_release);
  }
  // Erases a handle the caller claimed: a plain store, the claim excludes every other writer.
  void erase_claimed(uint64_t h) {
    const uint32_t gen = uint32_t(h >> 32);
    // release: the erase happens before a later insert() of the slot (which reaches it
    // through free_ under mu_, or this thread's own cache); pairs with the acquire loads
    // and CASes of gen in lookup(), claim() and erase() of the same slot.
    slot(uint32_t(h) & kIndexMask)->gen.store(gen + kDead, std::memory_order_release);
    recycle(uint32_t(h) & kIndexMask, gen);
  }
  // Invalidates a live handle; returns the object it named, or nullptr if h was not live
  // (stale, erased, or claimed: exactly one of concurrent claims and erases succeeds).
  T* erase(uint64_t h) {
    Slot* s = live_slot(h);
    if (s == nullptr) return nullptr;
    uint32_t gen = uint32_t(h >> 32);
    // The CAS makes exactly one of two racing erasers (or claimers) win; the dead
    // generation marks the slot free until insert() gives it a new live one. acq_rel:
    // acquire orders our read of ptr after the inserter's store (pairs with the release
    // store in insert()); release orders the erase before a later insert.
    if (!s->gen.compare_exchange_strong(gen, gen + kDead, std::memory_order_acq_rel)) return nullptr;
    T* p = s->ptr.load(std::memory_order_relaxed);  // left in place: lookups check gen first
    recycle(uint32_t(h) & kIndexMask, gen);
    return p;
  }

 private:
  static constexpr uint32_t kSegmentSize = 1u << 14;
  static constexpr uint32_t kSegments = 1u << (kIndexBits - 14);  // 2^28 slots per type

  struct Slot {
    std::atomic<uint32_t> gen{0};
    std::atomic<T*> ptr{nullptr};
  };
  // Slots per cache line: a thread cache takes fresh slots a whole line at a time, so that
  // two threads that create and drop handles in a loop (a task group per recursive call on
  // every worker) never write to one line (false sharing made fl_task_group_create/destroy
  // miss the cache on every call).
  static constexpr uint32_t kLineBytes = 64;
  static constexpr uint32_t kSlotsPerLine = kLineBytes / sizeof(Slot);
  static_assert(kLineBytes % sizeof(Slot) == 0 && kSegmentSize % kSlotsPerLine == 0);

  // Generation states (see the top of the file).
  static constexpr uint32_t kStateMask = 3;
  static constexpr uint32_t kLive = 1;        // 4k + 1
  static constexpr uint32_t kClaimedBit = 2;  // 4k + 3 = live | kClaimedBit
  static constexpr uint32_t kDead = 3;        // 4k + 4 = live + kDead

  // The slot of a handle of this type with a live generation in its bits, or null.
  Slot* live_slot(uint64_t h) const {
    const uint32_t index = uint32_t(h) & kIndexMask;
    const uint32_t gen = uint32_t(h >> 32);
    if (index == 0 || (gen & kStateMask) != kLive || handle_type(h) != kType) return nullptr;
    return slot(index);
  }

  // Puts an erased slot (its last live generation `gen`) back on a free list, unless its
  // next generation would pass max_gen_: then it is retired.
  void recycle(uint32_t index, uint32_t gen) {
    if (gen >= max_gen_) return;  // the next generation would wrap: retire the slot
    ThreadCache* tc = thread_cache();
    if (tc != nullptr && tc->free.size() < kThreadCacheSize) {
      tc->free.push_back(index);  // capacity reserved when the cache was made: no allocation
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(index);
  }

  Slot* slot(uint32_t index) const {
    uint32_t seg = index / kSegmentSize;
    if (seg >= kSegments) return nullptr;
    Slot* base = segments_[seg].load(std::memory_order_acquire);  // pairs with release in insert()
    return base ? base + (index % kSegmentSize) : nullptr;
  }

  // A thread keeps up to kThreadCacheSize of the slots it released and reuses them first,
  // so create/release loops (a task group per recursive call) take no lock; at thread exit
  // they go back to the table's list (tables are never destroyed).
  static constexpr size_t kThreadCacheSize = 64;
  struct ThreadCache {
    HandleTable* table = nullptr;
    std::vector<uint32_t> free;
    ~ThreadCache() {
      // Later uses on this exiting thread (another thread_local's destructor calling the C
      // API) go through the locked list instead of this destroyed cache.
      t_cache = nullptr;
      t_exited = true;
      if (table == nullptr || free.empty()) return;
      std::lock_guard<std::mutex> lock(table->mu_);
      table->free_.insert(table->free_.end(), free.begin(), free.end());
    }
  };
  // The calling thread's cache for this table, or null: one cache per thread and table
  // type, bound to the first instance that asks (the C API has one instance per type;
  // another instance of the same type, as in tests, goes through the locked list).
  ThreadCache* thread_cache() {
    // The fast path reads a trivial thread-local pointer; the owning thread_local (whose
    // destructor gives the slots back) is touched only the first time.
    ThreadCache* tc = t_cache;
    if (__builtin_expect(tc == nullptr, 0)) {
      if (t_exited) return nullptr;
      tc = make_thread_cache();
    }
    return tc != nullptr && tc->table == this ? tc : nullptr;
  }
  [[gnu::cold]] ThreadCache* make_thread_cache() {
    static thread_local ThreadCache owner;
    try {
      owner.free.reserve(kThreadCacheSize);
    } catch (...) {
      return nullptr;  // out of memory: the locked list works without a cache
    }
    owner.table = this;
    t_cache = &owner;
    return t_cache;
  }
  __attribute__((tls_model("initial-exec"))) static inline thread_local ThreadCache* t_cache = nullptr;
  __attribute__((tls_model("initial-exec"))) static inline thread_local bool t_exited = false;

  // Makes the segment of `index` exist (under mu_); false when the table is full.
  bool map_segment(uint32_t index) {
    if (index >= kSegments * kSegmentSize) return false;
    auto& seg = segments_[index / kSegmentSize];
    if (seg.load(std::memory_order_relaxed) == nullptr) {
      // Line-aligned, so that a line of slots is one cache line.
      Slot* base = new (std::align_val_t(kLineBytes)) Slot[kSegmentSize];
      seg.store(base, std::memory_order_release);  // pairs with acquire in slot()
    }
    return true;
  }

  // Fills an empty thread cache: slots other threads gave back first (so that a thread that
  // only creates while others only release keeps the table's size flat), else a fresh
  // cache line of slots. False when the table is full.
  bool refill(ThreadCache* tc) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      tc->free.push_back(free_.back());
      free_.pop_back();
      return true;
    }
    const uint32_t first = next_;
    const uint32_t end = (first / kSlotsPerLine + 1) * kSlotsPerLine;  // the rest of first's line
    if (!map_segment(end - 1)) {
      if (!map_segment(first)) return false;
      next_ = first + 1;
      tc->free.push_back(first);
      return true;
    }
    next_ = end;
    for (uint32_t i = end; i-- > first;) tc->free.push_back(i);  // handed out lowest first
    return true;
  }

  const uint32_t max_gen_;
  mutable std::mutex mu_;
  std::vector<uint32_t> free_;
  uint32_t next_ = 1;  // slot 0 is never used: a zero handle is NULL
  std::array<std::atomic<Slot*>, kSegments> segments_{};
};

template <class Handle>
inline Handle* handle_cast(uint64_t h) {
  return reinterpret_cast<Handle*>(static_cast<uintptr_t>(h));
}
template <class Handle>
inline uint64_t handle_bits(const Handle* h) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(h));
}

}  // namespace flowlane::capi
