// Fork–join parallel loop on the pool (fl_parallel_for): [begin, end) is cut into chunks of
// at most `grain` indices, claimed dynamically from one atomic counter by up to size()
// participants: the calling thread and size() - 1 helper tasks. When the chunks run out the
// caller waits until no participant is inside a body (not for helpers that have not
// started): on a worker of the pool it helps (runs other tasks), from any other thread it
// blocks. The first failing chunk's status is returned and no participant claims a chunk
// after it.
#pragma once

#include <cstdint>

#include "sched/pool.hpp"
#include "flowlane/flowlane.h"

namespace flowlane::sched {

using RangeFn = fl_status_t (*)(uint64_t lo, uint64_t hi, void* user_data);

struct ParallelForResult {
  fl_status_t status = FL_OK;  // FL_OK, or the first failure a body returned
  uint64_t failed_lo = 0;      // the failing chunk, when status != FL_OK
  uint64_t failed_hi = 0;
};

// The grain used for grain == 0: about 8 chunks per worker, at least 1 index.
uint64_t default_grain(uint64_t count, unsigned workers);

// Requires begin <= end and body != nullptr (checked by the C layer).
ParallelForResult parallel_for(Pool& pool, uint64_t begin, uint64_t end, uint64_t grain, RangeFn body,
                               void* user_data);

}  // namespace flowlane::sched
