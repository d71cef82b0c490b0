// Communicators and collectives (fl_comm_*, fl_submit_collective). Not implemented yet.
#include <string>

#include "capi/src/capi_common.hpp"

using namespace flowlane;

extern "C" {

FL_API fl_status_t fl_comm_get_unique_id(uint32_t backend, fl_comm_unique_id_t* out_id) {
  (void)backend, (void)out_id;
  return guard([&]() -> fl_status_t {
    fail(FL_ERR_UNSUPPORTED, "fl_comm_get_unique_id: communicators are not implemented in this version yet");
  });
}

FL_API fl_status_t fl_comm_create(fl_engine_t* engine, const fl_comm_desc_t* desc, const fl_comm_unique_id_t* id,
                                  fl_comm_t** out_comm) {
  (void)engine, (void)desc, (void)id, (void)out_comm;
  return guard([&]() -> fl_status_t {
    fail(FL_ERR_UNSUPPORTED, "fl_comm_create: communicators are not implemented in this version yet");
  });
}

FL_API fl_status_t fl_comm_destroy(fl_comm_t* comm) {
  return guard([&]() -> fl_status_t {
    if (comm == nullptr) return FL_OK;
    fail(FL_ERR_INVALID_HANDLE, "fl_comm_destroy: not a communicator (communicators are not implemented yet)");
  });
}

FL_API fl_status_t fl_submit_collective(fl_stream_t* stream, fl_comm_t* comm, const fl_collective_instr_t* instr,
                                        fl_instr_id* out_instr_id) {
  (void)stream, (void)comm, (void)instr, (void)out_instr_id;
  return guard([&]() -> fl_status_t {
    fail(FL_ERR_UNSUPPORTED, "fl_submit_collective: collectives are not implemented in this version yet");
  });
}

}  // extern "C"
