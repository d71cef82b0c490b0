// Internals of the CUDA backend shared by its files (backend.cpp: issue, runs, events;
// poller.cpp: completion; launch.cpp: what each instruction kind enqueues) and by the
// NCCL communicator backend (comm/nccl.cpp, nccl_watch.cpp, nccl_launch.cpp). CUDA builds only.
#pragma once

#if !FLOWLANE_HAVE_CUDA
#error "gpu/cuda.hpp is for CUDA builds only"
#endif

#include "gpu/runtime.hpp"

#include <atomic>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "gpu/backend.hpp"

namespace flowlane::gpu {

using core::Instr;

// Backend state of one CUDA stream (core::Stream::device_state).
struct Poller;

struct StreamState {
  core::Stream* stream = nullptr;
  int device = 0;
  Poller* poller = nullptr;  // the engine's (gpu/poller.hpp): outlives every stream state
  // Set by fl_stream_set_priority before the first instruction; applied when the CUDA
  // stream is created, at the first launch (lane runner).
  int priority = 0;
  cudaStream_t cs = nullptr;  // lane runner only; destroyed after the engine drained
  // Instructions handed to the backend and not completed yet (issued, or deferred:
  // DeviceBackend::defer_completion). Incremented by the lane runner; decremented by the
  // poller after it completed one (release, pairs with the acquire load in
  // defer_completion: a lane runner that reads 0 completes after every earlier one).
  std::atomic<uint64_t> inflight{0};
  // Poller thread only: issued instructions in issue (= stream) order.
  std::deque<Instr*> launched;
  bool polled = false;  // poller only: in the poller's list of streams with issued work
};

inline StreamState* state_of(const core::Stream* s) { return static_cast<StreamState*>(s->device_state); }

// The backend's record of one device instruction (core::Instr::device). It stays attached
// to the instruction record across reuse (so the payload keeps its capacity) and is
// cleared by DeviceBackend::recycle.
struct DeviceRecord {
  // The launch description copied at submit (kernel arguments, copy parameters).
  std::vector<unsigned char> payload;
  // The pooled event recorded after this instruction's run of its stream, if this
  // instruction is the last of the run (it owns the event) — see gpu/README.md, "Events".
  cudaEvent_t event = nullptr;
  // Otherwise the later instruction of the same stream whose event covers this one; holds
  // a reference on it, dropped at recycle.
  Instr* cover = nullptr;
  // Asked by the poller once the GPU work completed without a CUDA error (NCCL: whether an
  // abort cut the collective short).
  CompletionHook hook = nullptr;
  // Its outcome (skipped, cancelled, failed) was decided at issue; it completes in stream
  // order through the poller (DeviceBackend::defer_completion), never as its own failure.
  bool deferred = false;
  // Set while issuing: the launch may have enqueued work even if it then fails (a device
  // function, a collective after ncclGroupStart); its failure completes after an event.
  bool may_enqueue = false;
};

// i's record, created on first use.
DeviceRecord& record_of(Instr* i);

// "CUDA error cudaErrorInvalidConfiguration (invalid configuration argument) from cudaLaunchKernel"
std::string cuda_message(cudaError_t e, const char* call);

// Errors that break the CUDA context (sticky: every later call on the device fails with
// them). The first instruction that reports one — its GPU work faulted, or its launch or
// covering event saw the error first — is noted per device: note_fault returns "" for it
// and for other errors, and for later ones a note naming it, appended to their failure.
bool breaks_context(cudaError_t r);
std::string note_fault(int device, cudaError_t r, Instr* i);

// Payload layouts (DeviceRecord::payload), written at submit by launch.cpp.
enum class Op : uint32_t { kKernel = 1, kDeviceFn = 2, kMemcpy = 3 };

struct KernelHeader {
  Op op;
  uint32_t num_args;
  const void* func;
  uint32_t grid[3];
  uint32_t block[3];
  uint64_t shared_mem_bytes;
  // followed by uint32_t offsets[num_args] (from the payload's start), then the argument
  // bytes, each at a 16-byte aligned offset
};

struct DeviceFnHeader {
  Op op;
  fl_device_fn fn;
};

struct MemcpyHeader {
  Op op;
  uint32_t kind;  // fl_memcpy_kind_t
  uint32_t value;
  void* dst;
  const void* src;
  uint64_t bytes;
};

}  // namespace flowlane::gpu
