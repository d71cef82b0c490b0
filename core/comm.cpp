// Communicators and collectives (fl_comm_*, fl_submit_collective). The host-memory backend
// (FL_COMM_HOST_FAKE) lives in core/comm_fake.cpp; the NCCL backend (FL_COMM_NCCL) in
// gpu/nccl.cpp, in builds with CUDA and NCCL (otherwise FL_ERR_UNSUPPORTED). NCCL
// communicator handles carry a tag bit (gpu/nccl.hpp), which is how the calls below route.
#include <string>

#include "capi/src/capi_common.hpp"
#include "core/comm_fake.hpp"
#include "core/handles.hpp"
#include "gpu/nccl.hpp"

using namespace flowlane;

extern "C" {

FL_API fl_status_t fl_comm_get_unique_id(uint32_t backend, fl_comm_unique_id_t* out_id) {
  return guard([&]() -> fl_status_t {
    if (backend == FL_COMM_NCCL && gpu::nccl_available()) {
      require_out(out_id, "fl_comm_get_unique_id", "out_id");
      gpu::nccl_unique_id(out_id);
      return FL_OK;
    }
    if (backend == FL_COMM_NCCL && gpu::nccl_compiled())
      fail(FL_ERR_UNSUPPORTED, "fl_comm_get_unique_id: the NCCL backend is not available: this libflowlane has NCCL "
                               "but no CUDA device is visible to this process");
    core::comm_unique_id(backend, out_id);
    return FL_OK;
  });
}

FL_API fl_status_t fl_comm_create(fl_engine_t* engine, const fl_comm_desc_t* desc, const fl_comm_unique_id_t* id,
                                  fl_comm_t** out_comm) {
  return guard([&]() -> fl_status_t {
    core::Engine* e = engine_from(engine, "fl_comm_create");
    check_desc(desc, "fl_comm_create", "fl_comm_desc_t");
    if (id == nullptr) fail(FL_ERR_INVALID_ARGUMENT, "fl_comm_create: id is NULL");
    require_out(out_comm, "fl_comm_create", "out_comm");
    if (desc->backend == FL_COMM_NCCL && gpu::nccl_available()) {
      *out_comm = gpu::nccl_comm_create(e, *desc, *id);
      return FL_OK;
    }
    if (desc->backend == FL_COMM_NCCL && gpu::nccl_compiled())
      fail(FL_ERR_UNSUPPORTED, "fl_comm_create: the NCCL backend is not available: this libflowlane has NCCL but no "
                               "CUDA device is visible to this process");
    core::Comm* c = core::comm_create(e, *desc, *id);
    *out_comm = handle_cast<fl_comm_t>(c->handle);
    return FL_OK;
  });
}

FL_API fl_status_t fl_comm_destroy(fl_comm_t* comm) {
  return guard([&]() -> fl_status_t {
    if (comm == nullptr) return FL_OK;
    if (gpu::nccl_handle(comm)) {
      gpu::nccl_comm_destroy(comm);
      return FL_OK;
    }
    core::comm_destroy(core::comm_from(comm, "fl_comm_destroy"));
    return FL_OK;
  });
}

FL_API fl_status_t fl_submit_collective(fl_stream_t* stream, fl_comm_t* comm, const fl_collective_instr_t* instr,
                                        fl_instr_id* out_instr_id) {
  return guard([&]() -> fl_status_t {
    if (gpu::nccl_handle(comm)) {
      check_desc(instr, "fl_submit_collective", "fl_collective_instr_t");
      fl_instr_id id = gpu::nccl_submit(stream, comm, *instr);
      if (out_instr_id) *out_instr_id = id;
      return FL_OK;
    }
    core::Comm* c = core::comm_from(comm, "fl_submit_collective");
    check_desc(instr, "fl_submit_collective", "fl_collective_instr_t");
    fl_instr_id id = core::comm_submit(c, stream, *instr);
    if (out_instr_id) *out_instr_id = id;
    return FL_OK;
  });
}

}  // extern "C"
