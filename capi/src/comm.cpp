// C entry points of communicators and collectives (fl_comm_*, fl_submit_collective). The
// backends — host memory (FL_COMM_HOST_FAKE), NCCL (FL_COMM_NCCL, CUDA builds) and
// transports (fl_comm_create_transport) — live in comm/.
#include <string>

#include "boundary.hpp"
#include "engine/capture.hpp"
#include "comm/dump.hpp"
#include "submit.hpp"
#include "tables.hpp"

using namespace flowlane;
using namespace flowlane::capi;

namespace {
// Registers a new communicator's handle (destroying it when the table is full).
fl_comm_t* publish(comm::Communicator* c, const char* fn) {
  uint64_t h = comm_table().insert(c);
  if (h == 0) {
    comm::destroy(c);
    fail(FL_ERR_NO_MEMORY, std::string(fn) + ": the process-wide communicator table is full");
  }
  c->handle.store(h, std::memory_order_relaxed);
  return handle_cast<fl_comm_t>(h);
}
}  // namespace

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
    *out_comm = publish(comm::create(e, *desc, *id), "fl_comm_create");
    return FL_OK;
  });
}


FL_API fl_status_t fl_comm_create_transport(fl_engine_t* engine, const fl_comm_desc_t* desc,
                                            const fl_comm_transport_t* transport, fl_comm_t** out_comm) {
  // The transport's destroy runs if this fails, whatever the reason: until the communicator
  // owns its state, `owned` does.
  bool owned = transport != nullptr && transport->destroy != nullptr;
  const fl_status_t st = guard([&]() -> fl_status_t {
    const char* fn = "fl_comm_create_transport";
    if (transport == nullptr) fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": transport is NULL");
    core::Engine* e = engine_from(engine, fn);
    check_desc(desc, fn, "fl_comm_desc_t");
    check_desc(transport, fn, "fl_comm_transport_t");
    require_out(out_comm, fn, "out_comm");
    if (transport->start == nullptr || transport->test == nullptr || transport->destroy == nullptr)
      fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": the transport's start, test and destroy must not be NULL");
    if (transport->name == nullptr || transport->name[0] == 0)
      fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": the transport's name is NULL or empty");
    if (transport->flags != 0)
      fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": transport flags " + std::to_string(transport->flags) +
                                        " are unknown (0)");
    fl_comm_desc_t d = *desc;
    d.backend = 0;  // not read: the transport moves the bytes
    d.device = 0;
    comm::Communicator* c = comm::create_transport(e, d, *transport, &owned);  // clears `owned` once it owns the state
    *out_comm = publish(c, fn);
    return FL_OK;
  });
  if (st != FL_OK && owned) transport->destroy(transport->state);
  return st;
}

// Here rather than beside fl_last_error_message: the libraries that need it are the
// transports' (libflowlane_mpi.so).
FL_API fl_status_t fl_set_last_error_message(fl_status_t status, const char* message) {
  try {
    set_last_error(message != nullptr ? message : "");
  } catch (...) {  // out of memory: the status says it all
  }
  return status;
}

FL_API fl_status_t fl_comm_set_timeout(fl_comm_t* comm, uint64_t timeout_ms) {
  return guard([&]() -> fl_status_t {
    comm::set_timeout(*comm_from(comm, "fl_comm_set_timeout"), timeout_ms);
    return FL_OK;
  });
}

FL_API fl_status_t fl_comm_get_env(fl_comm_env_t* out_env) {
  return guard([&]() -> fl_status_t {
    check_desc(out_env, "fl_comm_get_env", "fl_comm_env_t");
    comm::launcher_env(out_env);
    return FL_OK;
  });
}

FL_API fl_status_t fl_comm_rendezvous_file(const char* dir, const char* key, uint64_t rank, uint64_t nranks,
                                           uint64_t timeout_ms, fl_comm_unique_id_t* inout_id) {
  return guard([&]() -> fl_status_t {
    if (inout_id == nullptr) fail(FL_ERR_INVALID_ARGUMENT, "fl_comm_rendezvous_file: inout_id is NULL");
    comm::rendezvous_file(dir, key, rank, nranks, timeout_ms, inout_id);
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
