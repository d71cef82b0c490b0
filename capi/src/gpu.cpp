// C entry points of the GPU backend (collectives: capi/src/comm.cpp). The exported symbol
// set is the same in every build: without the CUDA backend these answer FL_ERR_UNSUPPORTED.
// Each fl_submit_* checks the descriptor's shape here, lets the backend copy the launch
// description into the record (gpu::prepare_*), and submits it like any instruction; the
// lane runner issues it and the backend's poller completes it (gpu/README.md).
#include <string>

#include "boundary.hpp"
#include "gpu/backend.hpp"
#include "submit.hpp"
#include "tables.hpp"

namespace flowlane::capi {
namespace {

void require_cuda(const char* fn) {
  if (gpu::backend() == nullptr) fail(FL_ERR_UNSUPPORTED, gpu::unavailable(fn));
}

core::Stream* cuda_stream_from(fl_stream_t* stream, const char* fn) {
  require_cuda(fn);
  core::Stream* s = stream_from(stream, fn);
  if (s->device.type != FL_DEVICE_CUDA)
    fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": the stream (" + s->describe() +
                                      ") is not a CUDA stream; get one with fl_stream_get({FL_DEVICE_CUDA, i}, "
                                      "FL_STREAM_COMPUTE/H2D/D2H/COLLECTIVE)");
  return s;
}

// The part every fl_submit_{kernel,device,memcpy} shares: each descriptor carries operands,
// a name and flags; `prepare` copies what the launch needs into the record and returns
// the launch function.
template <class Desc, class Prepare>
fl_instr_id submit_device_work(fl_stream_t* stream, const Desc* instr, const char* fn, const char* type,
                               Prepare&& prepare, void* user_data = nullptr, fl_release_fn cleanup = nullptr) {
  core::Stream* s = cuda_stream_from(stream, fn);
  check_desc(instr, fn, type);
  check_submit_flags(instr->flags, fn);
  core::Engine& e = *s->engine;
  core::Instr* i = begin_submit(e, instr->operands, instr->num_operands, fn);
  core::SubmitArgs a;
  try {
    a.fn = prepare(i, *instr);
  } catch (...) {
    e.discard(i);
    throw;
  }
  a.user_data = user_data;
  a.cleanup = cleanup;
  a.name = instr->name;
  a.nonblocking = (instr->flags & FL_SUBMIT_NONBLOCKING) != 0;
  a.api = fn;
  return e.submit(s, i, a);
}

}  // namespace
}  // namespace flowlane::capi

using namespace flowlane;
using namespace flowlane::capi;

extern "C" {

FL_API fl_status_t fl_cuda_device_count(int32_t* out_count) {
  return guard([&]() -> fl_status_t {
    require_out(out_count, "fl_cuda_device_count", "out_count");
    require_cuda("fl_cuda_device_count");
    *out_count = int32_t(gpu::device_count());
    return FL_OK;
  });
}

FL_API fl_status_t fl_submit_kernel(fl_stream_t* stream, const fl_kernel_instr_t* instr, fl_instr_id* out_instr_id) {
  return guard([&]() -> fl_status_t {
    fl_instr_id id = submit_device_work(stream, instr, "fl_submit_kernel", "fl_kernel_instr_t", &gpu::prepare_kernel);
    if (out_instr_id) *out_instr_id = id;
    return FL_OK;
  });
}

FL_API fl_status_t fl_submit_device(fl_stream_t* stream, const fl_device_instr_t* instr, fl_instr_id* out_instr_id) {
  return guard([&]() -> fl_status_t {
    // cleanup runs after the GPU work completed (Executor::complete_async).
    fl_instr_id id = submit_device_work(stream, instr, "fl_submit_device", "fl_device_instr_t", &gpu::prepare_device_fn,
                                        instr ? instr->user_data : nullptr, instr ? instr->cleanup : nullptr);
    if (out_instr_id) *out_instr_id = id;
    return FL_OK;
  });
}

FL_API fl_status_t fl_submit_memcpy(fl_stream_t* stream, const fl_memcpy_instr_t* instr, fl_instr_id* out_instr_id) {
  return guard([&]() -> fl_status_t {
    fl_instr_id id = submit_device_work(stream, instr, "fl_submit_memcpy", "fl_memcpy_instr_t", &gpu::prepare_memcpy);
    if (out_instr_id) *out_instr_id = id;
    return FL_OK;
  });
}

FL_API fl_status_t fl_host_alloc_pinned(uint64_t bytes, void** out_ptr) {
  return guard([&]() -> fl_status_t {
    require_out(out_ptr, "fl_host_alloc_pinned", "out_ptr");
    require_cuda("fl_host_alloc_pinned");
    *out_ptr = gpu::host_alloc_pinned(bytes);
    return FL_OK;
  });
}

FL_API fl_status_t fl_host_free_pinned(void* ptr) {
  return guard([&]() -> fl_status_t {
    require_cuda("fl_host_free_pinned");
    if (ptr != nullptr) gpu::host_free_pinned(ptr);
    return FL_OK;
  });
}

FL_API fl_status_t fl_cuda_priority_range(int32_t device, int32_t* out_least, int32_t* out_greatest) {
  return guard([&]() -> fl_status_t {
    require_out(out_least, "fl_cuda_priority_range", "out_least");
    require_out(out_greatest, "fl_cuda_priority_range", "out_greatest");
    require_cuda("fl_cuda_priority_range");
    gpu::priority_range(device, out_least, out_greatest);
    return FL_OK;
  });
}

FL_API fl_status_t fl_stream_set_priority(fl_stream_t* stream, int32_t priority, int32_t* out_applied) {
  return guard([&]() -> fl_status_t {
    const char* fn = "fl_stream_set_priority";
    core::Stream* s = cuda_stream_from(stream, fn);
    // Pairs with the release store of submitted in Engine::enqueue().
    if (s->submitted.load(std::memory_order_acquire) != 0)
      fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": the stream (" + s->describe() +
                                        ") already has instructions; set its priority before the first one");
    int32_t applied = gpu::set_priority(s, priority);
    if (out_applied) *out_applied = applied;
    return FL_OK;
  });
}

}  // extern "C"
