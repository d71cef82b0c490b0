// What the GPU host has no profiler for (CUDA builds only): per-hop timestamps of device
// instructions and per-engine completion counters, both off unless asked for.
//   FLOWLANE_GPU_STATS=1     each engine prints, when it is destroyed, who completed its
//                            device instructions (lane runner, waiting thread, poller), the
//                            event queries each made, and its value edges and fallbacks;
//   FLOWLANE_GPU_HOPS=FILE   each completed device instruction appends one line to FILE
//                            (written when its engine is destroyed): its engine's handle,
//                            its id, lane, who completed it, and steady_clock nanoseconds
//                            at submit, issue
//                            (lane runner picks it up), launched, covered (kIssued), seen
//                            complete, completion done. scripts/dev/gpu_hops.py turns
//                            them into per-hop medians and tails.
#pragma once

#include <atomic>
#include <cstdint>

#include "gpu/complete.hpp"
#include "gpu/cuda.hpp"

namespace flowlane::gpu {

struct Counters {
  std::atomic<uint64_t> completed[3] = {};  // by Completer
  std::atomic<uint64_t> queries[3] = {};    // cudaEventQuery calls, by Completer
  std::atomic<uint64_t> value_edges{0};     // cross-lane device edges recorded as value edges
  std::atomic<uint64_t> value_fallbacks{0}; // ... that wanted to be, and took events instead
  std::atomic<uint64_t> value_writes{0};    // cuStreamWriteValue64 after a producer
  std::atomic<uint64_t> value_waits{0};     // cuStreamWaitValue64 before a consumer
  std::atomic<uint64_t> value_releases{0};  // writes for producers that never ran (skipped, failed)
};

bool stats_on();
void count_completion(Poller* p, Completer who);
void count_query(Poller* p, Completer who);
void count(std::atomic<uint64_t>& c);  // relaxed increment when stats_on()
// At engine stop (stop_poller): prints the counters (FLOWLANE_GPU_STATS=1) and appends the
// hops gathered so far to FLOWLANE_GPU_HOPS.
void report_counters(core::Engine* e, const Counters& c);

bool hops_on();
int64_t hop_now();
struct HopTimes {
  uint64_t engine = 0;  // the engine's C handle
  uint64_t id = 0;
  uint32_t lane = 0;
  int64_t submit = 0, issue = 0, launched = 0, covered = 0, seen = 0;
};
// Read before the completion (which may recycle the record), then recorded after it.
HopTimes hop_times(Instr* i, const DeviceRecord& r, int64_t t_seen);
void hop_done(const HopTimes& h, Completer who);

}  // namespace flowlane::gpu
