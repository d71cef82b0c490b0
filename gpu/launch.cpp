// What each kind of device instruction enqueues on its CUDA stream (the launch functions
// run by CudaBackend::issue), how its launch description is copied into the instruction's
// record at submit, and the C API's other CUDA calls (pinned memory, stream priorities).
#include "gpu/backend.hpp"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#if FLOWLANE_HAVE_CUDA

#include "gpu/cuda.hpp"
#include "gpu/hops.hpp"

namespace flowlane::gpu {

namespace {

constexpr uint64_t kMaxArgs = 1024;
constexpr uint64_t kMaxArgBytes = 32764;  // CUDA's kernel parameter limit (sm_70+, CUDA 12.1+)
constexpr size_t kArgAlign = 16;

size_t align_up(size_t n) { return (n + kArgAlign - 1) & ~(kArgAlign - 1); }

uint32_t dim_or_one(uint32_t v) { return v == 0 ? 1 : v; }

// --- kernels ---------------------------------------------------------------------------

void fill_kernel(Instr* i, const fl_kernel_instr_t& in) {
  const size_t n = size_t(in.num_args);
  size_t size = align_up(sizeof(KernelHeader) + n * sizeof(uint32_t));
  for (size_t k = 0; k < n; ++k) size += align_up(size_t(in.arg_sizes[k]));
  std::vector<unsigned char>& payload = record_of(i).payload;
  payload.resize(size);
  std::memset(payload.data(), 0, size);  // no stale bytes in the padding the kernel is handed
  unsigned char* base = payload.data();
  KernelHeader h{};
  h.op = Op::kKernel;
  h.num_args = uint32_t(n);
  h.func = in.func;
  h.grid[0] = dim_or_one(in.grid.x), h.grid[1] = dim_or_one(in.grid.y), h.grid[2] = dim_or_one(in.grid.z);
  h.block[0] = dim_or_one(in.block.x), h.block[1] = dim_or_one(in.block.y), h.block[2] = dim_or_one(in.block.z);
  h.shared_mem_bytes = in.shared_mem_bytes;
  std::memcpy(base, &h, sizeof h);
  size_t off = align_up(sizeof(KernelHeader) + n * sizeof(uint32_t));
  for (size_t k = 0; k < n; ++k) {
    uint32_t o = uint32_t(off);
    std::memcpy(base + sizeof(KernelHeader) + k * sizeof(uint32_t), &o, sizeof o);
    std::memcpy(base + off, in.args[k], size_t(in.arg_sizes[k]));  // the argument bytes, copied now
    off += align_up(size_t(in.arg_sizes[k]));
  }
}

fl_status_t launch_kernel(fl_instr_ctx_t* ctx, void*) {
  auto* i = reinterpret_cast<Instr*>(ctx);
  const unsigned char* base = record_of(i).payload.data();
  KernelHeader h;
  std::memcpy(&h, base, sizeof h);
  void* inline_ptrs[64];
  std::vector<void*> heap_ptrs;
  void** ptrs = inline_ptrs;
  if (h.num_args > 64) {
    heap_ptrs.resize(h.num_args);
    ptrs = heap_ptrs.data();
  }
  for (uint32_t k = 0; k < h.num_args; ++k) {
    uint32_t o;
    std::memcpy(&o, base + sizeof(KernelHeader) + k * sizeof(uint32_t), sizeof o);
    ptrs[k] = const_cast<unsigned char*>(base + o);
  }
  cudaError_t r = cu().cudaLaunchKernel(h.func, dim3(h.grid[0], h.grid[1], h.grid[2]),
                                   dim3(h.block[0], h.block[1], h.block[2]), ptrs, size_t(h.shared_mem_bytes),
                                   static_cast<cudaStream_t>(cuda_stream(i->stream)));
  if (r != cudaSuccess) {
    (void)cu().cudaGetLastError();  // consumed here: reported as this instruction's failure
    i->error = cuda_message(r, "cudaLaunchKernel") + note_fault(state_of(i->stream)->device, r, i);
    if (r == cudaErrorInvalidDeviceFunction)
      i->error += ": the kernel is not registered with the CUDA runtime libflowlane uses (" + cuda_library() +
                  "); a program linked with another runtime instance (cudart_static, a second libcudart) must "
                  "link the shared libcudart, or launch from an fl_submit_device function";
    return FL_ERR_CUDA;
  }
  return FL_OK;
}

// --- device functions ------------------------------------------------------------------

void fill_device_fn(Instr* i, const fl_device_instr_t& in) {
  DeviceFnHeader h{Op::kDeviceFn, in.fn};
  std::vector<unsigned char>& payload = record_of(i).payload;
  payload.resize(sizeof h);
  std::memcpy(payload.data(), &h, sizeof h);
}

fl_status_t launch_device_fn(fl_instr_ctx_t* ctx, void* user_data) {
  auto* i = reinterpret_cast<Instr*>(ctx);
  DeviceFnHeader h;
  DeviceRecord& rec = record_of(i);
  std::memcpy(&h, rec.payload.data(), sizeof h);
  rec.may_enqueue = true;  // it may enqueue work and then fail: that failure completes after an event
  return h.fn(ctx, static_cast<void*>(static_cast<cudaStream_t>(cuda_stream(i->stream))), user_data);
}

// --- copies ----------------------------------------------------------------------------

void fill_memcpy(Instr* i, const fl_memcpy_instr_t& in) {
  MemcpyHeader h{Op::kMemcpy, in.kind, in.value, in.dst, in.src, in.bytes};
  std::vector<unsigned char>& payload = record_of(i).payload;
  payload.resize(sizeof h);
  std::memcpy(payload.data(), &h, sizeof h);
}

fl_status_t launch_memcpy(fl_instr_ctx_t* ctx, void*) {
  auto* i = reinterpret_cast<Instr*>(ctx);
  MemcpyHeader h;
  std::memcpy(&h, record_of(i).payload.data(), sizeof h);
  cudaStream_t cs = static_cast<cudaStream_t>(cuda_stream(i->stream));
  cudaError_t r;
  const char* call = "cudaMemcpyAsync";
  switch (h.kind) {
    case FL_MEMCPY_H2D: r = cu().cudaMemcpyAsync(h.dst, h.src, size_t(h.bytes), cudaMemcpyHostToDevice, cs); break;
    case FL_MEMCPY_D2H: r = cu().cudaMemcpyAsync(h.dst, h.src, size_t(h.bytes), cudaMemcpyDeviceToHost, cs); break;
    case FL_MEMCPY_D2D: r = cu().cudaMemcpyAsync(h.dst, h.src, size_t(h.bytes), cudaMemcpyDeviceToDevice, cs); break;
    default:
      call = "cudaMemsetAsync";
      r = cu().cudaMemsetAsync(h.dst, int(h.value & 0xff), size_t(h.bytes), cs);
      break;
  }
  if (r != cudaSuccess) {
    (void)cu().cudaGetLastError();
    i->error = cuda_message(r, call) + note_fault(state_of(i->stream)->device, r, i);
    return FL_ERR_CUDA;
  }
  return FL_OK;
}

// Pageable host memory: cudaMemcpyAsync would return only after the copy, a host wait on
// the lane runner behind whatever the stream runs first (device edges never block the
// host; behind a spinning kernel it deadlocks). Refused at submit rather than staged.
void refuse_pageable(const void* p, const char* which) {
  cudaPointerAttributes a{};
  cudaError_t r = cu().cudaPointerGetAttributes(&a, p);
  if (r != cudaSuccess) (void)cu().cudaGetLastError();  // older runtimes: cudaErrorInvalidValue for pageable memory
  if (r == cudaSuccess && a.type != cudaMemoryTypeUnregistered) return;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  fail(FL_ERR_INVALID_ARGUMENT,
       std::string("fl_submit_memcpy: ") + which + " " + buf +
           " is pageable host memory, which cudaMemcpyAsync copies synchronously (the lane would wait on the "
           "host for the stream); allocate it with fl_host_alloc_pinned, or pin it with cudaHostRegister");
}

}  // namespace

// ---- submission ----------------------------------------------------------------------------

fl_host_fn prepare_kernel(Instr* i, const fl_kernel_instr_t& in) {
  if (in.func == nullptr) fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_kernel: func is NULL");
  if (in.num_args > kMaxArgs)
    fail(FL_ERR_OUT_OF_RANGE, "fl_submit_kernel: num_args " + std::to_string(in.num_args) + " exceeds " +
                                  std::to_string(kMaxArgs));
  if (in.num_args > 0 && (in.args == nullptr || in.arg_sizes == nullptr))
    fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_kernel: num_args is " + std::to_string(in.num_args) +
                                      " but args or arg_sizes is NULL");
  uint64_t total = 0;
  for (uint64_t k = 0; k < in.num_args; ++k) {
    if (in.args[k] == nullptr || in.arg_sizes[k] == 0)
      fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_kernel: argument " + std::to_string(k) +
                                        " has a NULL pointer or a zero size");
    total += in.arg_sizes[k];
    if (total > kMaxArgBytes)
      fail(FL_ERR_OUT_OF_RANGE, "fl_submit_kernel: the arguments exceed " + std::to_string(kMaxArgBytes) +
                                    " bytes (CUDA's kernel parameter limit)");
  }
  fill_kernel(i, in);
  if (hops_on()) record_of(i).t_submit = hop_now();
  return &launch_kernel;
}

fl_host_fn prepare_device_fn(Instr* i, const fl_device_instr_t& in) {
  if (in.fn == nullptr) fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_device: fn is NULL");
  fill_device_fn(i, in);
  if (hops_on()) record_of(i).t_submit = hop_now();
  return &launch_device_fn;
}

fl_host_fn prepare_memcpy(Instr* i, const fl_memcpy_instr_t& in) {
  if (in.kind < FL_MEMCPY_H2D || in.kind > FL_MEMSET)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_memcpy: kind " + std::to_string(in.kind) +
                                      " is unknown (FL_MEMCPY_H2D, FL_MEMCPY_D2H, FL_MEMCPY_D2D or FL_MEMSET)");
  if (in.bytes > 0 && in.dst == nullptr) fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_memcpy: dst is NULL");
  if (in.bytes > 0 && in.kind != FL_MEMSET && in.src == nullptr)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_memcpy: src is NULL");
  if (in.kind == FL_MEMSET && in.value > 0xff)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_memcpy: FL_MEMSET value " + std::to_string(in.value) +
                                      " is not a byte (0..255)");
  if (in.bytes > 0 && in.kind == FL_MEMCPY_H2D) refuse_pageable(in.src, "src");
  if (in.bytes > 0 && in.kind == FL_MEMCPY_D2H) refuse_pageable(in.dst, "dst");
  fill_memcpy(i, in);
  if (hops_on()) record_of(i).t_submit = hop_now();
  return &launch_memcpy;
}

bool internal_launch(fl_host_fn fn) { return fn == &launch_kernel || fn == &launch_memcpy; }

// ---- pinned memory and priorities ----------------------------------------------------------

namespace {

fl_status_t status_of(cudaError_t r) {
  if (r == cudaErrorNoDevice || r == cudaErrorInvalidDevice || r == cudaErrorInsufficientDriver) return FL_ERR_NO_DEVICE;
  if (r == cudaErrorMemoryAllocation) return FL_ERR_NO_MEMORY;
  return FL_ERR_CUDA;
}

[[noreturn]] void cuda_fail(cudaError_t r, const char* fn, const char* call) {
  (void)cu().cudaGetLastError();
  fail(status_of(r), std::string(fn) + ": " + cuda_message(r, call));
}

}  // namespace

void* host_alloc_pinned(uint64_t bytes) {
  if (bytes == 0) fail(FL_ERR_INVALID_ARGUMENT, "fl_host_alloc_pinned: bytes is 0");
  void* p = nullptr;
  cudaError_t r = cu().cudaHostAlloc(&p, size_t(bytes), cudaHostAllocDefault);
  if (r != cudaSuccess) cuda_fail(r, "fl_host_alloc_pinned", "cudaHostAlloc");
  return p;
}

void host_free_pinned(void* p) {
  cudaError_t r = cu().cudaFreeHost(p);
  if (r != cudaSuccess) cuda_fail(r, "fl_host_free_pinned", "cudaFreeHost");
}

void priority_range(int32_t device, int32_t* out_least, int32_t* out_greatest) {
  const int n = device_count();
  if (device < 0 || device >= n)
    fail(FL_ERR_NO_DEVICE, "fl_cuda_priority_range: CUDA device " + std::to_string(device) +
                               " does not exist: this process sees " + std::to_string(n) + " CUDA device(s)");
  int saved = -1;
  cudaError_t r = cu().cudaGetDevice(&saved);
  if (r != cudaSuccess) cuda_fail(r, "fl_cuda_priority_range", "cudaGetDevice");
  if (saved != device && (r = cu().cudaSetDevice(device)) != cudaSuccess) cuda_fail(r, "fl_cuda_priority_range", "cudaSetDevice");
  int least = 0, greatest = 0;
  r = cu().cudaDeviceGetStreamPriorityRange(&least, &greatest);
  if (saved != device) (void)cu().cudaSetDevice(saved);  // leave the caller's current device as it was
  if (r != cudaSuccess) cuda_fail(r, "fl_cuda_priority_range", "cudaDeviceGetStreamPriorityRange");
  *out_least = least;
  *out_greatest = greatest;
}

int32_t set_priority(core::Stream* s, int32_t priority) {
  int32_t least = 0, greatest = 0;
  priority_range(s->device.index, &least, &greatest);
  // CUDA: a lower number is a higher priority; greatest <= least.
  int32_t applied = priority < greatest ? greatest : (priority > least ? least : priority);
  state_of(s)->priority = applied;
  return applied;
}

}  // namespace flowlane::gpu

#else  // CPU-only build: the C API answers FL_ERR_UNSUPPORTED before reaching these.

namespace flowlane::gpu {
namespace {
[[noreturn]] void unsupported(const char* fn) {
  fail(FL_ERR_UNSUPPORTED, std::string(fn) + ": this libflowlane was built without CUDA");
}
}  // namespace
fl_host_fn prepare_kernel(core::Instr*, const fl_kernel_instr_t&) { unsupported("fl_submit_kernel"); }
fl_host_fn prepare_device_fn(core::Instr*, const fl_device_instr_t&) { unsupported("fl_submit_device"); }
fl_host_fn prepare_memcpy(core::Instr*, const fl_memcpy_instr_t&) { unsupported("fl_submit_memcpy"); }
void* host_alloc_pinned(uint64_t) { unsupported("fl_host_alloc_pinned"); }
void host_free_pinned(void*) { unsupported("fl_host_free_pinned"); }
void priority_range(int32_t, int32_t*, int32_t*) { unsupported("fl_cuda_priority_range"); }
int32_t set_priority(core::Stream*, int32_t) { unsupported("fl_stream_set_priority"); }
}  // namespace flowlane::gpu

#endif
