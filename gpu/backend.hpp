// The CUDA backend: a core::DeviceBackend (engine/device.hpp) that issues device
// instructions on CUDA streams, orders them across streams with pooled events, and
// completes them from a per-engine poller thread. The protocol (runs of launches covered by
// one event, the poller, launch edges) is written down in gpu/README.md.
//
// Declared in every build: in a CPU-only build backend() is null, device_count() is 0 and
// the submission helpers answer FL_ERR_UNSUPPORTED.
#pragma once

#include <cstdint>
#include <string>

#include "engine/engine.hpp"
#include "flowlane/flowlane.h"

namespace flowlane::gpu {

// The process's CUDA backend, or null in a CPU-only build or where the CUDA runtime cannot
// be loaded (gpu/runtime.hpp); the first call loads it.
core::DeviceBackend* backend();

// Where backend() is null: "<fn>: " and why (built without CUDA, or which library, symbol or
// version is missing). Empty where the backend is available.
std::string unavailable(const char* fn);

// CUDA devices visible to this process (cached after the first call); 0 in a CPU-only
// build or when cudaGetDeviceCount fails (no driver, no device).
int device_count();

// Asked by the poller when an instruction's GPU work completed without a CUDA error:
// FL_OK, or the instruction's failure with *detail set (an NCCL collective cut short by an
// abort). Set by a launch function while the instruction is being issued.
using CompletionHook = fl_status_t (*)(core::Instr* i, std::string* detail);
void on_completion(core::Instr* i, CompletionHook hook);

// The cudaStream_t of a device stream, as void* (created at its first launch; valid inside
// launch functions and device functions).
void* cuda_stream(core::Stream* s);

// ---- submission (the C API's fl_submit_kernel / _device / _memcpy) ----------------------
// Each checks what it can of the descriptor (throws with a message naming `fn`), copies the
// launch description into i's device record and returns the launch function to submit as
// the instruction's fn.
fl_host_fn prepare_kernel(core::Instr* i, const fl_kernel_instr_t& in);
fl_host_fn prepare_device_fn(core::Instr* i, const fl_device_instr_t& in);
fl_host_fn prepare_memcpy(core::Instr* i, const fl_memcpy_instr_t& in);

// ---- other calls of the C API ------------------------------------------------------------
void* host_alloc_pinned(uint64_t bytes);            // fl_host_alloc_pinned (throws)
void host_free_pinned(void* p);                     // fl_host_free_pinned (throws)
void priority_range(int32_t device, int32_t* least, int32_t* greatest);  // throws
// fl_stream_set_priority: clamps to the device's range, returns the value applied.
int32_t set_priority(core::Stream* s, int32_t priority);

}  // namespace flowlane::gpu
