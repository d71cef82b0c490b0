// GPU entry points (communicators and collectives: core/comm.cpp). The exported symbol set is the same in every build:
// a CPU-only build answers FL_ERR_UNSUPPORTED; the CUDA backend (gpu/, issue 5) is not
// written yet, so a CUDA build currently answers FL_ERR_UNSUPPORTED too, saying so.
#include <string>

#include "capi/src/capi_common.hpp"

using namespace flowlane;

namespace {
[[noreturn]] void gpu_unavailable(const char* fn) {
#if FLOWLANE_HAVE_CUDA
  fail(FL_ERR_UNSUPPORTED, std::string(fn) + ": the CUDA backend is not implemented in this version yet");
#else
  unsupported_without_cuda(fn);
#endif
}
}  // namespace

extern "C" {

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

}  // extern "C"
