// The per-engine poller thread of the CUDA backend (CUDA builds only): the fallback that
// completes device work in stream order when no lane runner or waiting thread does
// (gpu/complete.hpp): streams are handed to it (hand_to_poller) when their lane leaves them
// or when what they queue runs user code; it watches the event covering each one's head
// (gpu/README.md, "The poller"). It also holds the engine's GPU resources and settings.
#pragma once

#include <cstddef>

#include "engine/engine.hpp"

#if FLOWLANE_HAVE_CUDA
#include "gpu/runtime.hpp"

namespace flowlane::gpu {

struct Poller;
struct StreamState;

// The engine's poller, started on first use (its first CUDA stream). It also holds the
// engine's GPU resources: the event pool (per device), freed after the drain.
Poller* poller_of(core::Engine* e);
// The pooled events of the engine (events are created with cudaEventDisableTiming when the
// device's free list is empty, so after warm-up nothing is created on the hot path). The
// device must be current. After the drain (stop_poller) a returned event is destroyed.
cudaError_t event_get(Poller* p, int device, cudaEvent_t* out);
void event_put(Poller* p, int device, cudaEvent_t e);
// The CUDA streams of the engine (lane runner at a stream's first launch; after the drain
// for release). At most cuda_stream_budget() per device: FLOWLANE_CUDA_STREAMS, else
// CUDA_DEVICE_MAX_CONNECTIONS (the device's hardware queues), else 8. Beyond it, a device
// stream shares the least used CUDA stream (of its kind where possible); COLLECTIVE
// streams are never shared (NCCL kernels wait for their peers). The device must be current.
int cuda_stream_budget();
cudaError_t acquire_cuda_stream(Poller* p, int device, uint32_t kind, int priority, cudaStream_t* out);
void release_cuda_stream(Poller* p, int device, cudaStream_t cs);
// A CUDA stream of the engine was created / destroyed (after the drain): the last one
// destroyed frees the poller and what it holds.
void stream_attached(Poller* p);
void stream_detached(Poller* p);
// Hands a stream with queued work (gpu/complete.hpp) to its engine's poller, unless it has
// it already (StreamState::registered); wakes the poller if it sleeps.
void hand_to_poller(StreamState* ss);
// A stream state of the engine was created: listed for waiting threads (all_streams).
void stream_listed(Poller* p, StreamState* ss);
// The engine's stream states, newest first (append-only until the engine is stopped).
StreamState* all_streams(Poller* p);

// Who completes what, per engine, read from the environment when the engine's poller starts
// (so tests and A/B runs can change them between engines):
//   FLOWLANE_GPU_COMPLETE  which threads besides the poller complete device work: a list
//                          of `lane` and `waiter` (default "lane,waiter"); "poller": only
//                          the poller, as before (for A/B measurements);
//   FLOWLANE_GPU_VALUE_EDGES=1  device edges across lanes by stream memory operations
//                          where they are safe (gpu/value_edges.hpp); default 0.
struct Settings {
  bool lane_completes = true;
  bool waiter_completes = true;
  bool value_edges = false;
};
const Settings& settings_of(Poller* p);
// The engine's completion counters (gpu/hops.hpp).
struct Counters;
Counters& counters_of(Poller* p);
// Engine destroy, after the drain: stops and joins the poller thread, destroys the pooled
// events (those still attached to instruction records are destroyed when returned).
void stop_poller(core::Engine* e);
// Makes `dev` current on this thread when it is not (a user callback may have changed it).
cudaError_t make_current(int dev);

}  // namespace flowlane::gpu

#endif  // FLOWLANE_HAVE_CUDA
