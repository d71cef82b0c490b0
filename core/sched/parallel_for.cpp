// fl_parallel_for on the pool: lazy binary splitting. See sched/parallel_for.hpp.
//
// State: one Loop on the caller's stack. `pending` (a Latch) counts the pieces split off
// and not finished; it starts at 0 (the caller's own range is not counted: the caller
// waits only after running it). A thread splits only a range it is running, and a piece it
// runs is counted until it has finished splitting and running, so the count cannot reach
// zero while any part of the loop is unfinished: the caller's wait ends exactly when every
// piece has run. A piece's count_down is its last access to the Loop (the Latch rule), so
// the Loop may live on the caller's stack.
//
// Splitting: a thread splits when its own deque is empty, i.e. a thief took the last piece
// it left there (or it never left one). So while no thread is idle there is about one
// stealable piece per running participant, and each steal makes its victim split once
// more. A thread that has no deque in the pool (a worker of another pool, or a program
// thread when every external slot is leased) cannot tell: it splits its range up front
// into a few pieces per worker, which go to the injection queue, and runs the last one.
#include "sched/parallel_for.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>

#include "base/recycler.hpp"
#include "sched/latch.hpp"
#include "sched/pool_impl.hpp"

namespace flowlane::sched {

namespace {

struct Loop;

// A range split off for a thief.
struct Piece : Task {
  Loop* loop = nullptr;
  uint64_t lo = 0;
  uint64_t hi = 0;
};

struct Loop {
  Pool* pool;
  RangeFn body;
  void* user_data;
  const void* context;  // the caller's (current_context()): current while any thread runs bodies
  LoopObserver* observer;
  uint64_t grain;     // a body call covers at most this many indices
  uint64_t presplit;  // a thread without a deque here splits ranges longer than this up front
  Latch pending{0};   // pieces split off and not finished
  std::atomic<bool> stop{false};    // a body failed: start nothing more
  std::atomic<bool> failed{false};  // the first failure has been recorded
  ParallelForResult result;         // written by the first failing body's thread only

  // Runs [lo, hi) on the calling thread, splitting off upper halves while its deque is
  // empty, and reports the share it ran.
  void run(uint64_t lo, uint64_t hi) {
    if (observer != nullptr) observer->begin();
    const uint64_t first = lo;
    Worker* w = local_worker(*pool);
    uint64_t up_front = presplit;
    while (lo < hi) {
      // Relaxed: a body that starts after the failure became visible is not called; one
      // racing with it may be, which is allowed ("first failure" is first in time).
      if (stop.load(std::memory_order_relaxed)) break;
      const uint64_t left = hi - lo;
      if (left >= 2 * grain && (w != nullptr ? w->deque.empty() : left > up_front)) {
        // Keep the lower half (whole grains), hand the upper one to thieves.
        const uint64_t keep = left / 2 / grain * grain;
        if (split(lo + keep, hi)) {
          hi = lo + keep;
          continue;
        }
        w = nullptr, up_front = UINT64_MAX;  // out of memory: run the rest here, unsplit
      }
      const uint64_t end = left > grain ? lo + grain : hi;
      fl_status_t st = body(lo, end, user_data);
      if (st != FL_OK) {
        fail(st, lo, end);
        lo = end;  // (the share reported includes the failing call)
        break;
      }
      lo = end;
    }
    if (observer != nullptr) observer->end(lo - first);
  }

  // Hands [lo, hi) to thieves; false when out of memory (nothing was handed over).
  bool split(uint64_t lo, uint64_t hi) {
    Piece* p = nullptr;
    try {
      p = Recycler<Piece>::get();
    } catch (...) {
      return false;
    }
    p->run = &Loop::run_piece;
    p->tag = kRegionTop;  // Pool::submit sets the caller's region
    p->loop = this;
    p->lo = lo;
    p->hi = hi;
    pending.add(1);  // before the piece can run: its count_down is its last access
    try {
      pool->submit(p);
    } catch (...) {  // out of memory growing a deque: the piece was not published
      pending.count_down();
      Recycler<Piece>::put(p);
      return false;
    }
    return true;
  }

  void fail(fl_status_t st, uint64_t lo, uint64_t hi) {
    // The winner writes result; the caller reads it after the pieces' count_downs (acq_rel
    // on the latch) or on its own thread.
    if (!failed.exchange(true, std::memory_order_relaxed)) result = {st, lo, hi};
    stop.store(true, std::memory_order_relaxed);  // see the load in run()
  }

  static void run_piece(Task* t) {
    auto* p = static_cast<Piece*>(t);
    Loop* loop = p->loop;
    const uint64_t lo = p->lo, hi = p->hi;
    Recycler<Piece>::put(p);  // nothing of the piece is used below
    {
      // The caller's context is alive while any piece runs: the caller waits for them all.
      ContextScope context(loop->context);
      loop->run(lo, hi);
    }
    loop->pending.count_down();  // the last access to the loop: the caller may return now
  }
};

}  // namespace

uint64_t auto_grain(uint64_t count, unsigned participants) {
  uint64_t parts = uint64_t(std::max(1u, participants)) * 64;
  return std::max<uint64_t>(count / parts, 1);
}

ParallelForResult parallel_for(Pool& pool, uint64_t begin, uint64_t end, uint64_t grain, RangeFn body,
                               void* user_data, LoopObserver* observer) {
  if (begin >= end) return {};
  // A program thread takes part: it runs its share and the pieces nobody stole, and its
  // splits are pushes onto its own deque (core/sched/README.md, "Program threads"). The
  // loop is a region of its own, so that its wait helps with the loop's pieces only.
  std::optional<RegionScope> region;
  if (Pool::current() == nullptr) region.emplace(RegionScope::kFresh);
  Participation part(pool);
  const uint64_t count = end - begin;
  const unsigned participants = pool.size() + (part.joined() ? 1 : 0);
  Loop loop;
  loop.pool = &pool;
  loop.body = body;
  loop.user_data = user_data;
  loop.context = current_context();
  loop.observer = observer;
  loop.grain = grain != 0 ? grain : auto_grain(count, participants);
  loop.presplit = std::max(loop.grain, count / (4 * uint64_t(participants)));
  loop.run(begin, end);
  loop.pending.wait();
  return loop.result;
}

}  // namespace flowlane::sched
