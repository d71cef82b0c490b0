// GPU entry points (communicators and collectives: core/comm.cpp). The exported symbol set
// is the same in every build: a CPU-only build answers FL_ERR_UNSUPPORTED. In a CUDA build
// the fl_submit_* calls copy their launch description into the instruction record and
// queue it through the common submission path with a launch trampoline as its function;
// the lane runner launches it and the engine's GPU poller completes it (gpu/README.md).
#include <cstring>
#include <string>

#include "capi/src/capi_common.hpp"

#if FLOWLANE_HAVE_CUDA
#include "gpu/backend.hpp"
#include "gpu/cuda.hpp"
#endif

using namespace flowlane;

namespace {

#if FLOWLANE_HAVE_CUDA

using gpu::DeviceFnHeader;
using gpu::KernelHeader;
using gpu::MemcpyHeader;
using gpu::Op;

constexpr uint64_t kMaxArgs = 1024;
constexpr uint64_t kMaxArgBytes = 32768;  // CUDA's kernel parameter limit is 32764 bytes (sm_70+)
constexpr size_t kArgAlign = 16;

size_t align_up(size_t n) { return (n + kArgAlign - 1) & ~(kArgAlign - 1); }

core::Stream* cuda_stream_from(fl_stream_t* stream, const char* fn) {
  core::Stream* s = stream_from(stream, fn);
  if (s->device.type != FL_DEVICE_CUDA)
    fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": the stream (" + s->describe() +
                                      ") is not a CUDA stream; get one with fl_stream_get({FL_DEVICE_CUDA, i}, "
                                      "FL_STREAM_COMPUTE/H2D/D2H/COLLECTIVE)");
  return s;
}

void check_flags(uint64_t flags, const char* fn) {
  if ((flags & ~uint64_t(FL_SUBMIT_NONBLOCKING)) != 0)
    fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": unknown flags " + std::to_string(flags) +
                                      " (only FL_SUBMIT_NONBLOCKING is defined)");
}

uint32_t dim_or_one(uint32_t v) { return v == 0 ? 1 : v; }

// --- kernels ---------------------------------------------------------------------------

void fill_kernel(core::Instr* i, const void* ctx) {
  const auto& in = *static_cast<const fl_kernel_instr_t*>(ctx);
  const size_t n = size_t(in.num_args);
  size_t size = align_up(sizeof(KernelHeader) + n * sizeof(uint32_t));
  for (size_t k = 0; k < n; ++k) size += align_up(size_t(in.arg_sizes[k]));
  i->payload.resize(size);
  unsigned char* base = i->payload.data();
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
  auto* i = reinterpret_cast<core::Instr*>(ctx);
  const unsigned char* base = i->payload.data();
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
  cudaError_t r = cudaLaunchKernel(h.func, dim3(h.grid[0], h.grid[1], h.grid[2]),
                                   dim3(h.block[0], h.block[1], h.block[2]), ptrs, size_t(h.shared_mem_bytes),
                                   gpu::cuda_stream(i->stream));
  if (r != cudaSuccess) {
    (void)cudaGetLastError();  // consumed here: reported as this instruction's failure
    i->error = gpu::cuda_message(r, "cudaLaunchKernel");
    return FL_ERR_CUDA;
  }
  return FL_OK;
}

// --- device functions ------------------------------------------------------------------

void fill_device_fn(core::Instr* i, const void* ctx) {
  const auto& in = *static_cast<const fl_device_instr_t*>(ctx);
  DeviceFnHeader h{Op::kDeviceFn, in.fn};
  i->payload.resize(sizeof h);
  std::memcpy(i->payload.data(), &h, sizeof h);
}

fl_status_t launch_device_fn(fl_instr_ctx_t* ctx, void* user_data) {
  auto* i = reinterpret_cast<core::Instr*>(ctx);
  DeviceFnHeader h;
  std::memcpy(&h, i->payload.data(), sizeof h);
  return h.fn(ctx, static_cast<void*>(gpu::cuda_stream(i->stream)), user_data);
}

// --- copies ----------------------------------------------------------------------------

void fill_memcpy(core::Instr* i, const void* ctx) {
  const auto& in = *static_cast<const fl_memcpy_instr_t*>(ctx);
  MemcpyHeader h{Op::kMemcpy, in.kind, in.value, in.dst, in.src, in.bytes};
  i->payload.resize(sizeof h);
  std::memcpy(i->payload.data(), &h, sizeof h);
}

fl_status_t launch_memcpy(fl_instr_ctx_t* ctx, void*) {
  auto* i = reinterpret_cast<core::Instr*>(ctx);
  MemcpyHeader h;
  std::memcpy(&h, i->payload.data(), sizeof h);
  cudaStream_t cs = gpu::cuda_stream(i->stream);
  cudaError_t r;
  const char* call = "cudaMemcpyAsync";
  switch (h.kind) {
    case FL_MEMCPY_H2D: r = cudaMemcpyAsync(h.dst, h.src, size_t(h.bytes), cudaMemcpyHostToDevice, cs); break;
    case FL_MEMCPY_D2H: r = cudaMemcpyAsync(h.dst, h.src, size_t(h.bytes), cudaMemcpyDeviceToHost, cs); break;
    case FL_MEMCPY_D2D: r = cudaMemcpyAsync(h.dst, h.src, size_t(h.bytes), cudaMemcpyDeviceToDevice, cs); break;
    default:
      call = "cudaMemsetAsync";
      r = cudaMemsetAsync(h.dst, int(h.value & 0xff), size_t(h.bytes), cs);
      break;
  }
  if (r != cudaSuccess) {
    (void)cudaGetLastError();
    i->error = gpu::cuda_message(r, call);
    return FL_ERR_CUDA;
  }
  return FL_OK;
}

fl_status_t status_of(cudaError_t r) {
  if (r == cudaErrorNoDevice || r == cudaErrorInvalidDevice || r == cudaErrorInsufficientDriver) return FL_ERR_NO_DEVICE;
  if (r == cudaErrorMemoryAllocation) return FL_ERR_NO_MEMORY;
  return FL_ERR_CUDA;
}

[[noreturn]] void cuda_fail(cudaError_t r, const char* fn, const char* call) {
  (void)cudaGetLastError();
  fail(status_of(r), std::string(fn) + ": " + gpu::cuda_message(r, call));
}

// The part every fl_submit_{kernel,device,memcpy} shares: each descriptor carries operands,
// a name and flags; `launch` enqueues the work on the lane, `fill` copies what the launch
// needs out of the descriptor into the record at submit.
template <class Desc>
fl_instr_id submit_device_work(core::Stream* s, const Desc* instr, core::InstrKind kind, fl_host_fn launch,
                               void (*fill)(core::Instr*, const void*), const char* fn,
                               void* user_data = nullptr, fl_release_fn cleanup = nullptr) {
  SubmitArgs a;
  a.kind = kind;
  a.fn = launch;
  a.user_data = user_data;
  a.cleanup = cleanup;
  a.operands = instr->operands;
  a.num_operands = instr->num_operands;
  a.name = instr->name;
  a.nonblocking = (instr->flags & FL_SUBMIT_NONBLOCKING) != 0;
  a.api = fn;
  a.fill = fill;
  a.fill_ctx = instr;
  return submit_instruction(s, a);
}

#else

[[noreturn]] void gpu_unavailable(const char* fn) { unsupported_without_cuda(fn); }


#endif

}  // namespace

extern "C" {

#if FLOWLANE_HAVE_CUDA

FL_API fl_status_t fl_cuda_device_count(int32_t* out_count) {
  return guard([&]() -> fl_status_t {
    require_out(out_count, "fl_cuda_device_count", "out_count");
    *out_count = int32_t(gpu::device_count());
    return FL_OK;
  });
}

FL_API fl_status_t fl_submit_kernel(fl_stream_t* stream, const fl_kernel_instr_t* instr, fl_instr_id* out_instr_id) {
  return guard([&]() -> fl_status_t {
    const char* fn = "fl_submit_kernel";
    core::Stream* s = cuda_stream_from(stream, fn);
    check_desc(instr, fn, "fl_kernel_instr_t");
    if (instr->func == nullptr) fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_kernel: func is NULL");
    check_flags(instr->flags, fn);
    if (instr->num_args > kMaxArgs)
      fail(FL_ERR_OUT_OF_RANGE, "fl_submit_kernel: num_args " + std::to_string(instr->num_args) + " exceeds " +
                                    std::to_string(kMaxArgs));
    if (instr->num_args > 0 && (instr->args == nullptr || instr->arg_sizes == nullptr))
      fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_kernel: num_args is " + std::to_string(instr->num_args) +
                                        " but args or arg_sizes is NULL");
    uint64_t total = 0;
    for (uint64_t k = 0; k < instr->num_args; ++k) {
      if (instr->args[k] == nullptr || instr->arg_sizes[k] == 0)
        fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_kernel: argument " + std::to_string(k) +
                                          " has a NULL pointer or a zero size");
      total += instr->arg_sizes[k];
      if (total > kMaxArgBytes)
        fail(FL_ERR_OUT_OF_RANGE, "fl_submit_kernel: the arguments exceed " + std::to_string(kMaxArgBytes) +
                                      " bytes (CUDA's kernel parameter limit)");
    }
    fl_instr_id id = submit_device_work(s, instr, core::InstrKind::kKernel, &launch_kernel, &fill_kernel, fn);
    if (out_instr_id) *out_instr_id = id;
    return FL_OK;
  });
}

FL_API fl_status_t fl_submit_device(fl_stream_t* stream, const fl_device_instr_t* instr, fl_instr_id* out_instr_id) {
  return guard([&]() -> fl_status_t {
    const char* fn = "fl_submit_device";
    core::Stream* s = cuda_stream_from(stream, fn);
    check_desc(instr, fn, "fl_device_instr_t");
    if (instr->fn == nullptr) fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_device: fn is NULL");
    check_flags(instr->flags, fn);
    // cleanup runs after the GPU work completed (Engine::complete_device).
    fl_instr_id id = submit_device_work(s, instr, core::InstrKind::kDeviceFn, &launch_device_fn, &fill_device_fn, fn,
                                        instr->user_data, instr->cleanup);
    if (out_instr_id) *out_instr_id = id;
    return FL_OK;
  });
}

FL_API fl_status_t fl_submit_memcpy(fl_stream_t* stream, const fl_memcpy_instr_t* instr, fl_instr_id* out_instr_id) {
  return guard([&]() -> fl_status_t {
    const char* fn = "fl_submit_memcpy";
    core::Stream* s = cuda_stream_from(stream, fn);
    check_desc(instr, fn, "fl_memcpy_instr_t");
    check_flags(instr->flags, fn);
    if (instr->kind < FL_MEMCPY_H2D || instr->kind > FL_MEMSET)
      fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_memcpy: kind " + std::to_string(instr->kind) +
                                        " is unknown (FL_MEMCPY_H2D, FL_MEMCPY_D2H, FL_MEMCPY_D2D or FL_MEMSET)");
    if (instr->bytes > 0 && instr->dst == nullptr) fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_memcpy: dst is NULL");
    if (instr->bytes > 0 && instr->kind != FL_MEMSET && instr->src == nullptr)
      fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_memcpy: src is NULL");
    if (instr->kind == FL_MEMSET && instr->value > 0xff)
      fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_memcpy: FL_MEMSET value " + std::to_string(instr->value) +
                                        " is not a byte (0..255)");
    fl_instr_id id = submit_device_work(s, instr, core::InstrKind::kMemcpy, &launch_memcpy, &fill_memcpy, fn);
    if (out_instr_id) *out_instr_id = id;
    return FL_OK;
  });
}

FL_API fl_status_t fl_host_alloc_pinned(uint64_t bytes, void** out_ptr) {
  return guard([&]() -> fl_status_t {
    require_out(out_ptr, "fl_host_alloc_pinned", "out_ptr");
    if (bytes == 0) fail(FL_ERR_INVALID_ARGUMENT, "fl_host_alloc_pinned: bytes is 0");
    void* p = nullptr;
    cudaError_t r = cudaHostAlloc(&p, size_t(bytes), cudaHostAllocDefault);
    if (r != cudaSuccess) cuda_fail(r, "fl_host_alloc_pinned", "cudaHostAlloc");
    *out_ptr = p;
    return FL_OK;
  });
}

FL_API fl_status_t fl_host_free_pinned(void* ptr) {
  return guard([&]() -> fl_status_t {
    if (ptr == nullptr) return FL_OK;
    cudaError_t r = cudaFreeHost(ptr);
    if (r != cudaSuccess) cuda_fail(r, "fl_host_free_pinned", "cudaFreeHost");
    return FL_OK;
  });
}

FL_API fl_status_t fl_cuda_priority_range(int32_t device, int32_t* out_least, int32_t* out_greatest) {
  return guard([&]() -> fl_status_t {
    require_out(out_least, "fl_cuda_priority_range", "out_least");
    require_out(out_greatest, "fl_cuda_priority_range", "out_greatest");
    const int n = gpu::device_count();
    if (device < 0 || device >= n)
      fail(FL_ERR_NO_DEVICE, "fl_cuda_priority_range: CUDA device " + std::to_string(device) +
                                 " does not exist: this process sees " + std::to_string(n) + " CUDA device(s)");
    int saved = -1;
    cudaError_t r = cudaGetDevice(&saved);
    if (r != cudaSuccess) cuda_fail(r, "fl_cuda_priority_range", "cudaGetDevice");
    if (saved != device && (r = cudaSetDevice(device)) != cudaSuccess)
      cuda_fail(r, "fl_cuda_priority_range", "cudaSetDevice");
    int least = 0, greatest = 0;
    r = cudaDeviceGetStreamPriorityRange(&least, &greatest);
    if (saved != device) (void)cudaSetDevice(saved);  // leave the caller's current device as it was
    if (r != cudaSuccess) cuda_fail(r, "fl_cuda_priority_range", "cudaDeviceGetStreamPriorityRange");
    *out_least = least;
    *out_greatest = greatest;
    return FL_OK;
  });
}

FL_API fl_status_t fl_stream_set_priority(fl_stream_t* stream, int32_t priority, int32_t* out_applied) {
  return guard([&]() -> fl_status_t {
    const char* fn = "fl_stream_set_priority";
    core::Stream* s = cuda_stream_from(stream, fn);
    if (s->submitted.load(std::memory_order_acquire) != 0)
      fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": the stream (" + s->describe() +
                                        ") already has instructions; set its priority before the first one");
    int32_t least = 0, greatest = 0;
    fl_status_t st = fl_cuda_priority_range(s->device.index, &least, &greatest);
    if (st != FL_OK) fail(st, std::string(fn) + ": " + fl_last_error_message());
    // CUDA: a lower number is a higher priority; greatest <= least.
    int32_t applied = priority < greatest ? greatest : (priority > least ? least : priority);
    gpu::state_of(s)->priority = applied;
    if (out_applied) *out_applied = applied;
    return FL_OK;
  });
}

#else  // CPU-only build

FL_API fl_status_t fl_cuda_device_count(int32_t* out_count) {
  return guard([&]() -> fl_status_t {
    require_out(out_count, "fl_cuda_device_count", "out_count");
    gpu_unavailable("fl_cuda_device_count");
  });
}

FL_API fl_status_t fl_submit_kernel(fl_stream_t* stream, const fl_kernel_instr_t* instr, fl_instr_id* out_instr_id) {
  (void)stream, (void)instr, (void)out_instr_id;
  return guard([&]() -> fl_status_t { gpu_unavailable("fl_submit_kernel"); });
}

FL_API fl_status_t fl_submit_device(fl_stream_t* stream, const fl_device_instr_t* instr, fl_instr_id* out_instr_id) {
  (void)stream, (void)instr, (void)out_instr_id;
  return guard([&]() -> fl_status_t { gpu_unavailable("fl_submit_device"); });
}

FL_API fl_status_t fl_submit_memcpy(fl_stream_t* stream, const fl_memcpy_instr_t* instr, fl_instr_id* out_instr_id) {
  (void)stream, (void)instr, (void)out_instr_id;
  return guard([&]() -> fl_status_t { gpu_unavailable("fl_submit_memcpy"); });
}

FL_API fl_status_t fl_host_alloc_pinned(uint64_t bytes, void** out_ptr) {
  (void)bytes, (void)out_ptr;
  return guard([&]() -> fl_status_t { gpu_unavailable("fl_host_alloc_pinned"); });
}

FL_API fl_status_t fl_host_free_pinned(void* ptr) {
  (void)ptr;
  return guard([&]() -> fl_status_t { gpu_unavailable("fl_host_free_pinned"); });
}

FL_API fl_status_t fl_cuda_priority_range(int32_t device, int32_t* out_least, int32_t* out_greatest) {
  (void)device, (void)out_least, (void)out_greatest;
  return guard([&]() -> fl_status_t { gpu_unavailable("fl_cuda_priority_range"); });
}

FL_API fl_status_t fl_stream_set_priority(fl_stream_t* stream, int32_t priority, int32_t* out_applied) {
  (void)stream, (void)priority, (void)out_applied;
  return guard([&]() -> fl_status_t { gpu_unavailable("fl_stream_set_priority"); });
}

#endif

}  // extern "C"
