// Recycler<T>: a free list of T records for a type allocated and freed on hot paths
// (instruction records, task-group tasks, task groups). Each thread keeps a cache; records
// move between threads (one thread takes, another gives back) through a process-wide depot
// in batches of kBatch, so the depot's mutex is taken once per kBatch records, never per
// record, and steady-state use allocates nothing. A record keeps whatever it holds (vector
// capacity, strings) across reuse: resetting it is the user's business.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "base/error.hpp"  // FL_TLS

namespace flowlane {

template <class T>
class Recycler {
 public:
  static constexpr size_t kBatch = 128;

  // A record from this thread's cache, the depot, or new (may throw std::bad_alloc).
  static T* get() {
    if (__builtin_expect(t_cache_ptr == nullptr && t_exited, 0)) return new T();  // thread exit: see ThreadCache
    auto& c = cache().free;
    if (c.empty()) {
      Depot& d = depot();
      std::lock_guard<std::mutex> lock(d.mu);
      if (!d.batches.empty()) {
        c.swap(d.batches.back());
        // The emptied vector keeps its capacity for the next batch given away (put()):
        // moving batches allocates and frees nothing in steady state.
        try {
          d.spares.push_back(std::move(d.batches.back()));
        } catch (...) {
          // Out of memory: the vector is freed with its slot instead.
        }
        d.batches.pop_back();
      }
    }
    if (c.empty()) return new T();
    T* x = c.back();
    c.pop_back();
    // The next record is usually one another thread last wrote (records move between the
    // thread that takes them and the one that gives them back): ask for its first lines,
    // for writing, now, so that fetching them overlaps the caller's use of this one.
    if (!c.empty()) {
      const char* next = reinterpret_cast<const char*>(c.back());
      __builtin_prefetch(next, 1, 3);
      if constexpr (sizeof(T) > 64) __builtin_prefetch(next + 64, 1, 3);
    }
    return x;
  }

  // Never throws (it runs on paths that have published state): out of memory, the record is
  // freed instead of kept.
  static void put(T* x) noexcept {
    if (__builtin_expect(t_cache_ptr == nullptr && t_exited, 0)) {  // thread exit: see ThreadCache
      delete x;
      return;
    }
    std::vector<T*>* c = nullptr;
    try {
      c = &cache().free;
      c->push_back(x);
    } catch (...) {
      delete x;
      return;
    }
    if (c->size() >= 2 * kBatch) {  // keep kBatch locally, give a batch away
      try {
        Depot& d = depot();
        std::lock_guard<std::mutex> lock(d.mu);
        d.batches.reserve(d.batches.size() + 1);  // may throw: nothing has moved yet
        std::vector<T*> batch;
        if (!d.spares.empty()) {  // an emptied batch's vector, with its capacity
          batch = std::move(d.spares.back());
          d.spares.pop_back();
        }
        batch.assign(c->end() - kBatch, c->end());  // may throw (no spare): nothing has moved yet
        d.batches.push_back(std::move(batch));      // within the reserved capacity
        c->resize(c->size() - kBatch);
      } catch (...) {
        // Out of memory: the records stay in this thread's cache.
      }
    }
  }

 private:
  struct Depot {
    std::mutex mu;
    std::vector<std::vector<T*>> batches;  // full batches of kBatch records
    std::vector<std::vector<T*>> spares;   // emptied batches' vectors, reused by put()
  };
  static Depot& depot() {
    static Depot* d = new Depot();  // never destroyed: thread caches may flush at exit
    return *d;
  }

  struct ThreadCache {
    std::vector<T*> free;
    // Thread exit: hand the records to the depot in batches. Code that runs later on this
    // thread (another thread_local's destructor calling flowlane) gets and frees records
    // with plain new and delete, without a cache.
    ~ThreadCache() {
      t_cache_ptr = nullptr;
      t_exited = true;
      while (free.size() >= kBatch) {
        std::vector<T*> batch(free.end() - kBatch, free.end());
        free.resize(free.size() - kBatch);
        std::lock_guard<std::mutex> lock(depot().mu);
        depot().batches.push_back(std::move(batch));
      }
      for (T* x : free) delete x;
    }
  };

  // The fast path reads a trivial initial-exec pointer; the owning thread_local (whose
  // destructor flushes the cache at thread exit) is touched only when a thread first
  // allocates its cache.
  static ThreadCache& cache() {
    if (t_cache_ptr == nullptr) {
      t_cache_owner = std::make_unique<ThreadCache>();
      t_cache_ptr = t_cache_owner.get();
    }
    return *t_cache_ptr;
  }
  FL_TLS static inline thread_local ThreadCache* t_cache_ptr = nullptr;
  FL_TLS static inline thread_local bool t_exited = false;
  static inline thread_local std::unique_ptr<ThreadCache> t_cache_owner;
};

}  // namespace flowlane
