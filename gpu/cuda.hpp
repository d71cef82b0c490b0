// Internals of the CUDA backend shared by its files (backend.cpp: issue, runs, events;
// complete.cpp: completion in stream order by whoever is there; poller.cpp: the poller
// thread, the fallback; value_edges.cpp: device edges by stream memory operations;
// launch.cpp: what each instruction kind enqueues; hops.cpp: per-hop timestamps) and by the
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

#include "base/spinlock.hpp"
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
  // DeviceBackend::defer_completion). Incremented by the lane runner; decremented by
  // whoever completed one (release, pairs with the acquire load in defer_completion: a lane
  // runner that reads 0 completes after every earlier one).
  std::atomic<uint64_t> inflight{0};

  // --- completion (gpu/complete.cpp; gpu/README.md, "Completion") ---
  // Covered runs in issue (= stream) order: appended by the lane runner (cover), taken
  // from the front by whoever holds `completing`. The lock guards only the deque's
  // structure: nobody holds it while calling CUDA or completing.
  SpinLock fifo_lock;
  std::deque<Instr*> launched;
  // launched.size() and how many of them need the poller (DeviceRecord::needs_poller),
  // readable without the lock: hints for who looks at this stream (seq_cst: see watched).
  std::atomic<uint64_t> queued{0};
  std::atomic<uint64_t> heavy{0};
  // The completion try-lock: its holder queries the head's event and completes, in stream
  // order; a thread that finds it held goes on (somebody is completing this stream).
  SpinLock completing;
  // Its lane is launching on it and completes it itself between launches (set at a flush
  // that stays, cleared when the lane leaves): the poller and waiting threads keep out of
  // the driver for it meanwhile, unless something queued needs the poller (`heavy`).
  std::atomic<bool> watched{false};
  // In the poller's lists (its incoming list or its active streams). Lanes hand a stream
  // over by setting it (exchange false -> true); the poller clears it when it drops the
  // stream and then looks at `queued` and `watched` again: seq_cst store-load pairs, so
  // neither a hand-over nor a drop is lost.
  std::atomic<bool> registered{false};
  bool in_active = false;         // poller thread only: in its active list
  StreamState* next_of_engine = nullptr;  // the engine's stream states (Poller::all), set before publication

  // --- value edges (gpu/value_edges.cpp) ---
  // This stream's slot: the seq (Instr::seq) of its last instruction with a value
  // successor, written by the stream after that instruction (cuStreamWriteValue64) and
  // waited for by consumers' streams (cuStreamWaitValue64, >=). 0: none yet. Assigned when
  // the stream is created (an index into the process's slab for its device).
  int value_slot = -1;
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
  // Its completion runs user code (a cleanup, an object's release callback, a completion
  // hook): only the poller completes it (gpu/README.md, "Completion"). Set when its run is
  // covered, by the lane runner.
  bool needs_poller = false;

  // --- value edges (gpu/value_edges.cpp) ---
  // Whether a consumer on another lane waits for a value written after this instruction:
  // kValueOpen until the lane launched it (or decided it never will), then closed.
  // Consumers' submitters CAS open -> wanted (DeviceBackend::value_edge); the lane runner
  // exchanges it to closed right after the launch and writes the value if it was wanted.
  static constexpr uint8_t kValueOpen = 0, kValueWanted = 1, kValueClosed = 2;
  std::atomic<uint8_t> value_gate{kValueOpen};
  // This instruction waits for values (a Dep::kValueWait entry), or read the output of one
  // that may still be poisoned after its issue: it completes only after those predecessors
  // have completed, and is skipped if one of them failed (value_edges.cpp).
  bool check_preds = false;

  // --- per-hop timestamps (gpu/hops.hpp; FLOWLANE_GPU_HOPS), steady_clock ns ---
  int64_t t_submit = 0, t_issue = 0, t_launched = 0, t_covered = 0;
};

// i's record, created on first use.
DeviceRecord& record_of(Instr* i);

// Whether `fn` is one of the backend's own launch functions (a kernel, a copy or memset:
// launch.cpp), which run no user code and check their launch call's status themselves.
bool internal_launch(fl_host_fn fn);

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
