// Chase–Lev work-stealing deque of Task*, in the C11 formulation of Lê, Pop, Cohen and
// Zappa Nardelli, "Correct and Efficient Work-Stealing for Weak Memory Models" (PPoPP
// 2013), figure 1, with one change: push() publishes with a release *store* of bottom_
// instead of a release fence followed by a relaxed store (equivalent for the thief, which
// synchronizes through its acquire load of bottom_, and visible to ThreadSanitizer, which
// does not model fences).
//
// One owner thread calls push() and pop() at the bottom; any number of thieves call
// steal() at the top. steal() is three-valued as in crossbeam-deque: Empty (nothing to
// take), Success, or Retry (lost a race; the deque may still hold items). Callers retry on
// Retry and give up on Empty.
//
// Growth: only the owner grows the ring (in push). Thieves may still be reading the old
// ring, so old rings are retired, not freed: they are kept until the deque is destroyed.
// Capacities double, so the retired rings together are smaller than the live one (the
// memory bound is 2x the largest ring). The orderings argument is in core/sched/README.md.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/cpu.hpp"
#include "sched/task.hpp"

namespace flowlane::sched {

enum class StealResult { Empty, Success, Retry };

// For pop()/steal(): take an item whatever its tag.
inline constexpr uint64_t kAnyTag = ~uint64_t(0);

class WorkStealingQueue {
 public:
  explicit WorkStealingQueue(int64_t initial_capacity = 256) {
    int64_t cap = 1;
    while (cap < initial_capacity) cap <<= 1;
    auto ring = std::make_unique<Ring>(cap);
    ring_.store(ring.get(), std::memory_order_relaxed);
    rings_.push_back(std::move(ring));
  }
  WorkStealingQueue(const WorkStealingQueue&) = delete;
  WorkStealingQueue& operator=(const WorkStealingQueue&) = delete;

  // Owner only. The slot records item->tag, so that pop()/steal() can filter by tag
  // without reading the task (which a thief may already have run and freed).
  void push(Task* item) {
    int64_t b = bottom_.load(std::memory_order_relaxed);  // only the owner writes bottom_
    Ring* r = ring_.load(std::memory_order_relaxed);       // only the owner writes ring_
    // top_ only grows, so a stale copy overestimates the size: re-read the shared (and,
    // under stealing, contended) top_ only when the ring looks full.
    if (b - top_cache_ > r->capacity - 1) {
      // Acquire pairs with the CAS in steal()/pop(): a thief's read of the slot we are
      // about to reuse happens before our overwrite.
      top_cache_ = top_.load(std::memory_order_acquire);
      if (b - top_cache_ > r->capacity - 1) r = grow(r, top_cache_, b);
    }
    r->put(b, item, item->tag);
    // Publishes the slot (and the task's fields, written before push): pairs with the
    // acquire load of bottom_ in steal().
    bottom_.store(b + 1, std::memory_order_release);
  }

  // Owner only: the most recently pushed item, or nullptr. With a tag other than kAnyTag,
  // only if that item carries the tag (the owner stops at a foreign item: it never digs
  // under it).
  Task* pop(uint64_t want = kAnyTag) {
    int64_t b = bottom_.load(std::memory_order_relaxed) - 1;
    Ring* r = ring_.load(std::memory_order_relaxed);
    // Slot b holds the owner's newest item (only the owner writes slots), and thieves take
    // the oldest, so the tag read here belongs to the item the pop below returns (or loses
    // to a thief when it is the last). On an empty deque the tag is stale, and the pop
    // below finds the deque empty anyway.
    if (want != kAnyTag && r->tag(b) != want) return nullptr;
    bottom_.store(b, std::memory_order_relaxed);
    // Store-load barrier: the store of bottom_ above must be globally visible before top_
    // is read, else a thief (which reads top_ then bottom_ around its own fence) and this
    // pop could both take the last item. Pairs with the fence in steal().
    full_fence();
    int64_t t = top_.load(std::memory_order_relaxed);
    if (t > b) {  // empty: restore
      bottom_.store(b + 1, std::memory_order_relaxed);
      return nullptr;
    }
    Task* item = r->get(b);
    if (t == b) {
      // The last item: race the thieves for it through top_. seq_cst so that the CAS is
      // ordered with thieves' CASes on top_ in the single total order.
      // Pairs with the seq_cst CAS on top_ in steal() (and with the fence there).
      if (!top_.compare_exchange_strong(t, t + 1, std::memory_order_seq_cst, std::memory_order_relaxed))
        item = nullptr;  // a thief won
      bottom_.store(b + 1, std::memory_order_relaxed);
    }
    return item;
  }

  // Any thread. On Success, *out is the oldest item. With a tag other than kAnyTag, Empty
  // when the oldest item carries another tag (it is left for a thief that takes any).
  StealResult steal(Task** out, uint64_t want = kAnyTag) {
    int64_t t = top_.load(std::memory_order_acquire);  // pairs with the CAS of a previous thief/pop
    // Store-load barrier pairing with the fence in pop(): either we see the owner's
    // decremented bottom_, or the owner sees our (later) CAS on top_.
    full_fence();
    int64_t b = bottom_.load(std::memory_order_acquire);  // pairs with the release store in push()
    if (t >= b) return StealResult::Empty;
    // Acquire pairs with the release store of ring_ in grow(): a grown ring's copied
    // slots are visible. The paper uses consume here.
    Ring* r = ring_.load(std::memory_order_acquire);
    Task* item = r->get(t);
    // A stale tag (the slot reused after wrap-around) only makes us skip an item we could
    // have taken, or take one whose CAS below then fails: the CAS decides, as for item.
    if (want != kAnyTag && r->tag(t) != want) return StealResult::Empty;
    // Claims slot t. seq_cst: totally ordered with pop()'s CAS and fence.
    // Pairs with the seq_cst CAS on top_ in pop() and the acquire loads of top_ in push()/steal().
    if (!top_.compare_exchange_strong(t, t + 1, std::memory_order_seq_cst, std::memory_order_relaxed))
      return StealResult::Retry;
    *out = item;
    return StealResult::Success;
  }

  // Approximate (exact when quiescent): for the pre-sleep check and tests.
  bool empty() const {
    // Acquire pairs with the CASes on top_ in steal()/pop() and the release store of bottom_ in push().
    int64_t t = top_.load(std::memory_order_acquire);
    int64_t b = bottom_.load(std::memory_order_acquire);
    return b <= t;
  }
  int64_t size() const {
    // Acquire pairs with the CASes on top_ in steal()/pop() and the release store of bottom_ in push().
    int64_t t = top_.load(std::memory_order_acquire);
    int64_t b = bottom_.load(std::memory_order_acquire);
    return b > t ? b - t : 0;
  }
  // Owner only (or quiescent): current ring capacity.
  int64_t capacity() const { return ring_.load(std::memory_order_relaxed)->capacity; }

 private:
  struct Ring {
    explicit Ring(int64_t cap)
        : capacity(cap), mask(cap - 1), slots(new std::atomic<Task*>[size_t(cap)]), tags(new std::atomic<uint64_t>[size_t(cap)]) {}
    // Slots are atomics (relaxed) because a thief may read a slot the owner is
    // overwriting after wrap-around; the thief's CAS on top_ then fails and it discards
    // the value, but the access itself must not be a data race.
    Task* get(int64_t i) const { return slots[size_t(i & mask)].load(std::memory_order_relaxed); }
    uint64_t tag(int64_t i) const { return tags[size_t(i & mask)].load(std::memory_order_relaxed); }
    void put(int64_t i, Task* x, uint64_t tag) {
      slots[size_t(i & mask)].store(x, std::memory_order_relaxed);
      tags[size_t(i & mask)].store(tag, std::memory_order_relaxed);
    }
    const int64_t capacity;
    const int64_t mask;
    std::unique_ptr<std::atomic<Task*>[]> slots;
    std::unique_ptr<std::atomic<uint64_t>[]> tags;
  };

  [[gnu::cold, gnu::noinline]] Ring* grow(Ring* old, int64_t t, int64_t b) {
    auto bigger = std::make_unique<Ring>(old->capacity * 2);
    for (int64_t i = t; i < b; ++i) bigger->put(i, old->get(i), old->tag(i));
    Ring* r = bigger.get();
    rings_.push_back(std::move(bigger));  // the old ring stays alive: thieves may hold it
    // Publishes the copied slots: pairs with the acquire load of ring_ in steal().
    ring_.store(r, std::memory_order_release);
    return r;
  }

  // top_ and bottom_ on separate cache lines: thieves hammer top_, the owner bottom_.
  alignas(64) std::atomic<int64_t> top_{0};
  alignas(64) std::atomic<int64_t> bottom_{0};
  int64_t top_cache_ = 0;  // owner only: a past value of top_ (<= top_)
  alignas(64) std::atomic<Ring*> ring_{nullptr};
  std::vector<std::unique_ptr<Ring>> rings_;  // owner only: the live ring and every retired one
};

}  // namespace flowlane::sched
