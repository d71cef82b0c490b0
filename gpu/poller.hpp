// The per-engine poller thread of the CUDA backend (CUDA builds only): it watches the event
// covering the head of every CUDA stream with issued work and completes instructions in
// stream order (gpu/README.md, "The poller").
#pragma once

#include <cstddef>

#include "engine/engine.hpp"

#if FLOWLANE_HAVE_CUDA
#include "gpu/runtime.hpp"

namespace flowlane::gpu {

struct Poller;

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
// Hands a run of issued instructions of one CUDA stream, in issue order, to their engine's
// poller: the last one owns the covering event, the others point to it.
void track(core::Instr* const* run, size_t n);
// Engine destroy, after the drain: stops and joins the poller thread, destroys the pooled
// events (those still attached to instruction records are destroyed when returned).
void stop_poller(core::Engine* e);
// Makes `dev` current on this thread when it is not (a user callback may have changed it).
cudaError_t make_current(int dev);

}  // namespace flowlane::gpu

#endif  // FLOWLANE_HAVE_CUDA
