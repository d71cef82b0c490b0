// Generation-checked handle tables.
//
// A C handle is not a pointer to the live object: it packs a slot index and the slot's
// generation into the pointer value,
//
//   // [ 32-bit generation | 32-bit slot index (>= 1) ]
//
// so a handle used after release finds a newer generation in its slot and is answered
// with FL_ERR_INVALID_HANDLE instead of touching freed memory. Slots live in segments
// that are allocated on demand and never freed while the process runs (type-stable
// memory), so a lookup never dereferences freed storage. Released slots are recycled
// through a free list; a program that creates and drops handles in a loop of millions
// keeps a flat footprint.
//
// Using a handle concurrently with the call that releases it is a race in the caller
// (as with free()); sequential use-after-release is always detected.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace flowlane {

static_assert(sizeof(void*) == 8, "flowlane handles need 64-bit pointers");

template <class T>
class HandleTable {
 public:
  // Registers p; returns a non-zero handle value.
  uint64_t insert(T* p) {
    uint32_t index;
    {
      std::lock_guard<std::mutex> lock(mu_);  // allocation path only; lookups take no lock
      if (!free_.empty()) {
        index = free_.back();
        free_.pop_back();
      } else {
        index = next_++;
        if (index >= kSegments * kSegmentSize) return 0;
        auto& seg = segments_[index / kSegmentSize];
        if (seg.load(std::memory_order_relaxed) == nullptr)
          seg.store(new Slot[kSegmentSize], std::memory_order_release);  // pairs with acquire in slot()
      }
    }
    Slot& s = *slot(index);
    s.ptr.store(p, std::memory_order_relaxed);
    // Publishes ptr: pairs with the acquire load of gen in lookup().
    uint32_t gen = s.gen.load(std::memory_order_relaxed) | 1u;  // odd = live
    s.gen.store(gen, std::memory_order_release);
    return (uint64_t(gen) << 32) | index;
  }

  // The object of a live handle, or nullptr for 0, unknown, stale or released handles.
  T* lookup(uint64_t h) const {
    uint32_t index = uint32_t(h);
    uint32_t gen = uint32_t(h >> 32);
    if (index == 0 || (gen & 1u) == 0) return nullptr;
    const Slot* s = slot(index);
    if (s == nullptr) return nullptr;
    if (s->gen.load(std::memory_order_acquire) != gen) return nullptr;  // pairs with release in insert()
    return s->ptr.load(std::memory_order_relaxed);
  }

  // Invalidates h; returns the object it named, or nullptr if h was not live.
  T* erase(uint64_t h) {
    uint32_t index = uint32_t(h);
    uint32_t gen = uint32_t(h >> 32);
    if (index == 0 || (gen & 1u) == 0) return nullptr;
    Slot* s = slot(index);
    if (s == nullptr) return nullptr;
    // The CAS makes exactly one of two racing erasers win; the next (even) generation
    // marks the slot dead until insert() gives it a new odd one.
    if (!s->gen.compare_exchange_strong(gen, gen + 1, std::memory_order_acq_rel)) return nullptr;
    T* p = s->ptr.exchange(nullptr, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(index);
    return p;
  }

 private:
  static constexpr uint32_t kSegmentSize = 1u << 14;
  static constexpr uint32_t kSegments = 1u << 12;  // 64 Mi live handles per type

  struct Slot {
    std::atomic<uint32_t> gen{0};
    std::atomic<T*> ptr{nullptr};
  };

  Slot* slot(uint32_t index) const {
    uint32_t seg = index / kSegmentSize;
    if (seg >= kSegments) return nullptr;
    Slot* base = segments_[seg].load(std::memory_order_acquire);  // pairs with release in insert()
    return base ? base + (index % kSegmentSize) : nullptr;
  }

  mutable std::mutex mu_;
  std::vector<uint32_t> free_;
  uint32_t next_ = 1;
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

}  // namespace flowlane
