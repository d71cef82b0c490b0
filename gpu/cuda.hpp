// Internals of the CUDA backend shared by gpu/backend.cpp (runtime: streams, events,
// poller) and gpu/gpu_api.cpp (entry points, launch trampolines). CUDA builds only.
#pragma once

#if !FLOWLANE_HAVE_CUDA
#error "gpu/cuda.hpp is for CUDA builds only"
#endif

#include <cuda_runtime.h>

#include <cstdint>
#include <deque>
#include <string>

#include "flowlane/flowlane.h"

namespace flowlane::core {
struct Stream;
struct Instr;
}  // namespace flowlane::core

namespace flowlane::gpu {

// Backend state of one CUDA stream (core::Stream::backend).
struct StreamState {
  core::Stream* stream = nullptr;
  int device = 0;
  // Set by fl_stream_set_priority before the first instruction; applied when the CUDA
  // stream is created, at the first launch (lane runner).
  int priority = 0;
  cudaStream_t cs = nullptr;  // lane runner only; destroyed after the engine drained
  // Poller thread only: launched instructions in launch (= stream) order.
  std::deque<core::Instr*> launched;
  bool polled = false;  // poller only: in the poller's list of streams with launched work
};

StreamState* state_of(core::Stream* s);  // s->backend

// "cudaErrorInvalidConfiguration (invalid configuration argument) from cudaLaunchKernel"
std::string cuda_message(cudaError_t e, const char* call);

// The CUDA stream of a device stream (created at its first launch; valid inside launch
// trampolines and device functions).
cudaStream_t cuda_stream(core::Stream* s);

// Payload of a device instruction (core::Instr::payload), written at submit.
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
