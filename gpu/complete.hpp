// Completion of device work in stream order by whichever thread is there (CUDA builds only;
// gpu/README.md, "Completion"): the lane runner between its launches, a program thread that
// waits for the result, or the engine's poller thread, the fallback. A per-stream try-lock
// (StreamState::completing) makes one of them the completer at a time; the others go on.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpu/cuda.hpp"

namespace flowlane::gpu {

// Who completes (counted per engine, gpu/hops.hpp).
enum class Completer : uint8_t { kPoller = 0, kLane = 1, kWaiter = 2 };

// Lane runner: a run of issued (or deferred) instructions of `ss`, covered by one event, in
// issue order, joins the stream's queue of work to complete.
void append_run(StreamState* ss, Instr* const* run, size_t n);

// Completes, in stream order, the queued instructions of `ss` whose covering event has
// completed (or reports the CUDA error it answers), under the stream's try-lock: returns
// false at once when another thread holds it. A lane runner or a waiting program thread
// stops before an instruction whose completion runs user code (needs_poller); the poller
// completes everything. A value edge's consumer waits for its producers' completion
// (value_edges.cpp). Returns true when it completed at least one instruction.
bool complete_ready(StreamState* ss, Completer who);

// Lane runner: it goes on launching on `ss` and completes it itself (lane_watch), or it
// leaves `ss` (lane_leave): what is queued goes to the poller.
void lane_watch(StreamState* ss);
void lane_leave(StreamState* ss);

// DeviceBackend::help: a program thread waiting for work of engine `e` completes what has
// finished on stream `s` (a device stream), or on every device stream of the engine (s null
// or a host stream). Streams a lane watches are left to it.
bool help_complete(core::Engine* e, core::Stream* s);

// Whether completing `i` runs user code (its cleanup, a completion hook, the release
// callback of an object it uses): then only the poller completes it.
bool needs_poller(Instr* i);

}  // namespace flowlane::gpu
