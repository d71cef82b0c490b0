// Fork–join parallel loop on the pool (fl_parallel_for), by lazy binary splitting (Tzannes,
// Caragea, Barua and Vishkin, PPoPP 2010): the calling thread starts with all of
// [begin, end) and calls the body on pieces of at most `grain` indices from its front.
// Before each call, if the range is still longer than the split threshold and the thread's
// own deque is empty (nobody can steal anything of it), it splits off the upper half as a
// task on its deque. A thief that steals such a half runs it the same way, so halves are
// split again exactly when other threads are looking for work: no shared counter is touched
// per index, only per split. The caller takes part as a worker of the pool
// (sched::Participation) when it is a program thread; when it has run its share it waits
// for the halves that were stolen, helping meanwhile, and never for a worker to wake up (a
// half nobody stole is on its own deque, and it runs it itself). The first failing piece's
// status is returned and no piece starts after the failure is seen.
#pragma once

#include <cstdint>

#include "sched/pool.hpp"
#include "flowlane/flowlane.h"

namespace flowlane::sched {

using RangeFn = fl_status_t (*)(uint64_t lo, uint64_t hi, void* user_data);

struct ParallelForResult {
  fl_status_t status = FL_OK;  // FL_OK, or the first failure a body returned
  uint64_t failed_lo = 0;      // the failing piece, when status != FL_OK
  uint64_t failed_hi = 0;
};

// Who ran how much of a loop, for traces: on the thread that runs them, begin() before and
// end(items) after each run of a range the thread started with or stole (items: the
// indices it ran of it). Called outside the bodies; must not throw.
class LoopObserver {
 public:
  virtual void begin() = 0;
  virtual void end(uint64_t items) = 0;

 protected:
  ~LoopObserver() = default;
};

// grain == 0 chooses the grain: about 1/64 of a participant's share, at least 1 index (the
// pieces split further while threads are idle).
uint64_t auto_grain(uint64_t count, unsigned participants);

// Requires begin <= end and body != nullptr (checked by the C layer). `observer` may be null.
ParallelForResult parallel_for(Pool& pool, uint64_t begin, uint64_t end, uint64_t grain, RangeFn body,
                               void* user_data, LoopObserver* observer = nullptr);

}  // namespace flowlane::sched
