// C entry points of communicators and collectives (fl_comm_*, fl_submit_collective). The
// backends — host memory (FL_COMM_HOST_FAKE) and NCCL (FL_COMM_NCCL, CUDA builds) — live
// in comm/.
#include <string>

#include "boundary.hpp"
#include "engine/capture.hpp"
#include "comm/dump.hpp"
#include "submit.hpp"
#include "tables.hpp"

using namespace flowlane;
using namespace flowlane::capi;

extern "C" {

FL_API fl_status_t fl_comm_get_unique_id(fl_comm_backend_t backend, fl_comm_unique_id_t* out_id) {
  return guard([&]() -> fl_status_t {
    require_out(out_id, "fl_comm_get_unique_id", "out_id");
    // A C caller may pass any value: read the bits, never the enum (comm::unique_id refuses
    // unknown backends).
    comm::unique_id(uint32_t(enum_bits(backend)), out_id);
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
    comm::Communicator* c = comm::create(e, *desc, *id);
    uint64_t h = comm_table().insert(c);
    if (h == 0) {
      comm::destroy(c);
      fail(FL_ERR_NO_MEMORY, "fl_comm_create: the process-wide communicator table is full");
    }
    c->handle.store(h, std::memory_order_relaxed);
    *out_comm = handle_cast<fl_comm_t>(h);
    return FL_OK;
  });
}

FL_API fl_status_t fl_comm_destroy(fl_comm_t* comm) {
  return guard([&]() -> fl_status_t {
    if (comm == nullptr) return FL_OK;
    comm::Communicator* c = comm_from(comm, "fl_comm_destroy");
    if (comm_table().erase(handle_bits(comm)) == nullptr)
      fail(FL_ERR_INVALID_HANDLE, "fl_comm_destroy: the communicator was destroyed concurrently");
    comm::destroy(c);
    return FL_OK;
  });
}

FL_API fl_status_t fl_submit_collective(fl_stream_t* stream, fl_comm_t* comm, const fl_collective_instr_t* instr,
                                        fl_instr_id* out_instr_id) {
  return guard([&]() -> fl_status_t {
    const char* fn = "fl_submit_collective";
    comm::Communicator* c = comm_from(comm, fn);
    core::Stream* s = stream_from(stream, fn);
    // Before the communicator counts it: a refused collective must not take a sequence number.
    if (core::capture_of(*s->engine) != nullptr)
      fail(FL_ERR_CAPTURING, std::string(fn) + ": collectives cannot be captured into a program (each launch would "
                                               "have to advance the communicator's sequence numbers on every rank); "
                                               "submit them eagerly, between launches");
    check_desc(instr, fn, "fl_collective_instr_t");
    core::Instr* i = begin_submit(*s->engine, instr->operands, instr->num_operands, fn);
    fl_instr_id id = c->submit(s, i, *instr);
    if (out_instr_id) *out_instr_id = id;
    return FL_OK;
  });
}

FL_API fl_status_t fl_comm_dump(fl_comm_t* comm, const char* path) {
  return guard([&]() -> fl_status_t {
    comm::Communicator* c = comm_from(comm, "fl_comm_dump");
    comm::dump_on_demand(*c, path);
    return FL_OK;
  });
}

}  // extern "C"
