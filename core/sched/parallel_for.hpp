// Fork–join parallel loop on the pool (fl_parallel_for): [begin, end) is cut into chunks of
// at most `grain` indices, claimed dynamically from one atomic counter by up to size()
// participants: the calling thread and size() - 1 helper tasks. grain 0 claims guided
// ranges instead: each claim takes a share of what remains (remaining / (2 * participants),
// at least guided_min_claim()), so the last claims are small and the participants finish
// together. When the chunks run out the
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

// grain == 0 claims guided ranges (a share of what remains, shrinking towards the end); the
// smallest claim is about 1/64 of a worker's share, at least 1 index.
uint64_t guided_min_claim(uint64_t count, unsigned workers);

// Requires begin <= end and body != nullptr (checked by the C layer).
ParallelForResult parallel_for(Pool& pool, uint64_t begin, uint64_t end, uint64_t grain, RangeFn body,
                               void* user_data);

}  // namespace flowlane::sched
