// fl_parallel_for on the pool: dynamic chunk claiming. See core/parallel_for.hpp.
#include "core/parallel_for.hpp"

#include <algorithm>
#include <atomic>
#include <memory>

namespace flowlane::core {

namespace {

struct ForState {
  RangeFn body;
  void* user_data;
  uint64_t begin;
  uint64_t end;
  uint64_t grain;
  uint64_t chunks;
  alignas(64) std::atomic<uint64_t> next{0};  // the next unclaimed chunk
  std::atomic<bool> stop{false};               // a chunk failed: claim nothing more
  std::atomic<bool> failed{false};             // the first failure has been recorded
  ParallelForResult result;                    // written by the first failing chunk only
  Latch latch{0};
};

// Claims and runs chunks until none is left or one failed.
void drain(ForState& s) {
  for (;;) {
    // Relaxed: stop is a hint; a chunk claimed just before a failure became visible may
    // still run (the guarantee is about chunks claimed after the failing one returned).
    if (s.stop.load(std::memory_order_relaxed)) return;
    uint64_t c = s.next.fetch_add(1, std::memory_order_relaxed);
    if (c >= s.chunks) return;
    uint64_t lo = s.begin + c * s.grain;
    uint64_t hi = s.end - lo > s.grain ? lo + s.grain : s.end;
    fl_status_t st = s.body(lo, hi, s.user_data);
    if (st != FL_OK) {
      s.stop.store(true, std::memory_order_relaxed);
      // The winner writes result; the waiter reads it after the latch (acquire) or after
      // its own drain returned (same thread), so plain fields suffice.
      if (!s.failed.exchange(true, std::memory_order_relaxed)) s.result = {st, lo, hi};
      return;
    }
  }
}

struct Helper : Task {
  ForState* state = nullptr;
  static void run_task(Task* t) {
    ForState& s = *static_cast<Helper*>(t)->state;
    drain(s);
    s.latch.count_down();  // last access to s: the caller may return right after
  }
};

}  // namespace

uint64_t default_grain(uint64_t count, unsigned workers) {
  uint64_t parts = uint64_t(std::max(1u, workers)) * 8;
  uint64_t g = count / parts + (count % parts != 0);
  return std::max<uint64_t>(g, 1);
}

ParallelForResult parallel_for(Pool& pool, uint64_t begin, uint64_t end, uint64_t grain, RangeFn body,
                               void* user_data) {
  if (begin >= end) return {};
  uint64_t count = end - begin;
  if (grain == 0) grain = default_grain(count, pool.size());
  uint64_t chunks = count / grain + (count % grain != 0);

  ForState s;
  s.body = body;
  s.user_data = user_data;
  s.begin = begin;
  s.end = end;
  s.grain = grain;
  s.chunks = chunks;

  // The caller is always one of the participants (the C contract: "the calling thread
  // helps"), so at most size() threads run bodies: the caller and size() - 1 helpers. From
  // outside the pool this also hides the workers' wake-up latency behind the caller's
  // first chunks.
  uint64_t participants = std::min<uint64_t>(chunks, pool.size());
  uint64_t helpers = participants - 1;
  if (helpers == 0) {  // one chunk, or a one-worker pool: the caller runs everything
    drain(s);
    return s.result;
  }
  Helper local[4];
  std::unique_ptr<Helper[]> heap;
  Helper* hs = local;
  if (helpers > 4) {
    heap.reset(new Helper[helpers]);
    hs = heap.get();
  }
  s.latch.add(int64_t(helpers));
  for (uint64_t i = 0; i < helpers; ++i) {
    hs[i].run = &Helper::run_task;
    hs[i].state = &s;
    pool.submit(&hs[i]);
  }
  drain(s);
  s.latch.wait(pool);
  return s.result;
}

}  // namespace flowlane::core
