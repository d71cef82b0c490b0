// Run by load_test.cpp with FLOWLANE_CUDART_PATH / FLOWLANE_NCCL_PATH set: links only
// libflowlane (never a CUDA runtime), does CPU work, then asks for the GPU and NCCL, and
// prints one line per step: "<step>: <status name> <value> | <message>".
#include <cstdio>

#include "flowlane/flowlane.h"

namespace {
void line(const char* step, fl_status_t st, long value) {
  std::printf("%s: %s %ld | %s\n", step, fl_status_name(st), value, st == FL_OK ? "" : fl_last_error_message());
}
}  // namespace

int main() {
  fl_engine_t* e = nullptr;
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = 2;
  fl_status_t st = fl_engine_create(&d, &e);
  line("engine", st, 0);
  if (st != FL_OK) return 1;
  // CPU work is unaffected by a missing CUDA runtime.
  fl_stream_t* hs = nullptr;
  long ran = 0;
  st = fl_stream_get(e, 0, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST, &hs);
  if (st == FL_OK) {
    fl_host_instr_t h = FL_HOST_INSTR_INIT;
    h.fn = [](fl_instr_ctx_t*, void* u) -> fl_status_t {
      ++*static_cast<long*>(u);
      return FL_OK;
    };
    h.user_data = &ran;
    st = fl_submit_host(hs, &h, nullptr);
    if (st == FL_OK) st = fl_engine_synchronize(e);
  }
  line("cpu", st, ran);
  int32_t n = -1;
  st = fl_cuda_device_count(&n);
  line("device_count", st, n);
  fl_stream_t* gs = nullptr;
  st = fl_stream_get(e, 0, fl_device_t{FL_DEVICE_CUDA, 0}, FL_STREAM_COMPUTE, &gs);
  line("cuda_stream", st, 0);
  void* pinned = nullptr;
  st = fl_host_alloc_pinned(64, &pinned);
  line("pinned", st, 0);
  if (st == FL_OK) fl_host_free_pinned(pinned);
  fl_comm_unique_id_t id;
  st = fl_comm_get_unique_id(FL_COMM_NCCL, &id);
  line("nccl", st, 0);
  fl_engine_destroy(e);
  std::fflush(stdout);
  return 0;
}
