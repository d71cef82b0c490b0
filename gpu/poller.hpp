// The per-engine poller thread of the CUDA backend (CUDA builds only): it watches the event
// covering the head of every CUDA stream with issued work and completes instructions in
// stream order (gpu/README.md, "The poller").
#pragma once

#include <cstddef>

#include "engine/engine.hpp"

namespace flowlane::gpu {

struct Poller;

// The engine's poller, started on first use.
Poller* poller_of(core::Engine* e);
// Hands a run of issued instructions of one CUDA stream, in issue order, to their engine's
// poller: the last one owns the covering event, the others point to it.
void track(core::Instr* const* run, size_t n);
// Engine destroy, after the drain: stops and joins the poller thread.
void stop_poller(core::Engine* e);

}  // namespace flowlane::gpu
