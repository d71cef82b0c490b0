// The engine's hooks into the CUDA backend (issue 5). Compiled in every build: in a
// CPU-only build device_count() is 0, stream_state_create() returns null and the other
// hooks are never reached (no CUDA stream can exist). The protocol — launch on the lane
// runner, completion by the engine's poller thread, launch edges between CUDA streams —
// is written down in gpu/README.md.
#pragma once

#include <cstddef>
#include <string>

#include "flowlane/flowlane.h"

namespace flowlane::core {
class Engine;
struct Stream;
struct Instr;
}  // namespace flowlane::core

namespace flowlane::gpu {

// CUDA devices visible to this process (cached after the first call); 0 in a CPU-only
// build or when cudaGetDeviceCount fails (no driver, no device).
int device_count();

// Backend state of a CUDA stream (priority, the lazily created cudaStream_t, the poller's
// FIFO of launched instructions). Created with the interned stream; destroyed after the
// engine drained. Null in a CPU-only build.
void* stream_state_create(core::Stream* s);
void stream_state_destroy(core::Stream* s);

// On the lane runner, for a device instruction that is not skipped: makes the device
// current, creates the CUDA stream on first use, makes the stream wait for the events of
// its cross-stream device predecessors, calls i->fn (the launch trampoline or the user's
// device function) and checks cudaGetLastError. Records no event (record_event does).
// Returns FL_OK, or a failure status with i->error set (the detail, without the
// instruction's name).
fl_status_t launch(core::Instr* i);

// On the lane runner, after the launch of `last`: records a pooled event on its CUDA
// stream into last->event. It covers `last` and the instructions launched on that stream
// before it that have no event yet. FL_OK, or FL_ERR_CUDA with last->error set.
fl_status_t record_event(core::Instr* last);

// Hands a run of launched instructions of one CUDA stream, in launch order, to their
// engine's poller: the last one has an event, the others are covered by it (Instr::cover).
// The poller completes them (Engine::complete_device) once that event completed or faulted.
void track(core::Instr* const* run, size_t n);

// Engine destroy, after the drain: stops and joins the poller thread.
void engine_stop(core::Engine* e);

// Returns i->event to its device's pool (Engine::recycle).
void event_release(core::Instr* i);

}  // namespace flowlane::gpu
