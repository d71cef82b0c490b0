// fl_mpi_comm_create and fl_mpi_nccl_comm_create (flowlane_mpi.h; mpi/README.md).
//
// Both are collective over the caller's communicator, and every rank must get the same
// answer, or the ranks that succeeded would wait in their first collective for a rank
// that has no communicator. So the local checks only note a failure; then the ranks agree
// (one MPI_Allreduce of {the lowest failing rank, the check mode, minus the check mode})
// before anything else is made, and agree again once the engine accepted the
// communicator (a bad lane is only found there).
#include <climits>
#include <cstring>
#include <random>
#include <string>

#include "mpi_internal.hpp"

using namespace flowlane::mpi;

namespace {

const uint64_t kKnownFlags = FL_COMM_UNORDERED | FL_MPI_SERIALIZED;

fl_status_t refuse(fl_status_t st, const std::string& why) { return fl_set_last_error_message(st, why.c_str()); }

const char* level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    default: return "MPI_THREAD_MULTIPLE";
  }
}

// MPI is usable: initialized and not finalized. "" or why not.
std::string mpi_usable(const char* fn) {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init)
    return std::string(fn) + ": MPI is not initialized: call MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, "
                             "&provided) first";
  if (fin) return std::string(fn) + ": MPI was finalized (MPI_Finalize)";
  return "";
}

// The ranks of `comm` agree: every rank passes its own failure (or ""), and `mode`; the
// result is "" when every rank succeeded with the same mode, else this rank's reason (its
// own, or the lowest failing rank's). Every rank must call it.
std::string agree(MPI_Comm comm, int rank, const std::string& mine, int64_t mode, const char* fn, bool* mpi_failed) {
  int64_t in[3] = {mine.empty() ? INT64_MAX : int64_t(rank), mode, -mode}, out[3] = {0, 0, 0};
  int code;
  {
    GateLock gate;
    code = MPI_Allreduce(in, out, 3, MPI_INT64_T, MPI_MIN, comm);
  }
  *mpi_failed = code != MPI_SUCCESS;
  if (code != MPI_SUCCESS) return std::string(fn) + ": " + mpi_error(code, "MPI_Allreduce (the ranks' agreement)");
  if (!mine.empty()) return mine;
  if (out[0] != INT64_MAX)
    return std::string(fn) + ": rank " + std::to_string(out[0]) +
           " could not create its communicator (its fl_last_error_message says why), so no rank does";
  if (out[1] != -out[2])
    return std::string(fn) + ": FLOWLANE_COMM_CHECK is not the same on every rank (strict, alongside or off): set it "
                             "alike for the whole job";
  return "";
}

// desc with its ranks taken from the MPI communicator (nranks 0) or checked against it, into
// *d; "" or the disagreement.
std::string take_ranks(const std::string& fn, const fl_comm_desc_t* desc, int size, int rank, fl_comm_desc_t* d) {
  *d = *desc;
  if (desc->nranks == 0) {
    d->nranks = uint64_t(size);
    d->rank = uint64_t(rank);
  } else if (desc->nranks != uint64_t(size) || desc->rank != uint64_t(rank)) {
    return fn + ": desc says rank " + std::to_string(desc->rank) + " of " + std::to_string(desc->nranks) +
           ", but this process is rank " + std::to_string(rank) + " of " + std::to_string(size) +
           " in the MPI communicator (or give nranks 0 to take both from it)";
  }
  return "";
}

// The local checks of fl_mpi_comm_create; "" or the failure.
std::string check_locally(const fl_comm_desc_t* desc, int size, int rank, int provided, fl_comm_desc_t* d) {
  const std::string fn = "fl_mpi_comm_create";
  if ((desc->flags & ~kKnownFlags) != 0)
    return fn + ": flags " + std::to_string(desc->flags) +
           " are unknown (0, FL_COMM_UNORDERED, FL_MPI_SERIALIZED)";
  if (provided < MPI_THREAD_SERIALIZED || (provided == MPI_THREAD_SERIALIZED && (desc->flags & FL_MPI_SERIALIZED) == 0))
    return fn + ": MPI was initialized with " + level_name(provided) +
           ", but flowlane calls MPI from its own threads (a lane runner starts each collective, its progress thread "
           "tests them): initialize MPI with MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided)" +
           (provided == MPI_THREAD_SERIALIZED
                ? ", or pass FL_MPI_SERIALIZED in fl_comm_desc_t.flags if your program makes no MPI call of its own "
                  "while flowlane communicators exist"
                : " (or MPI_THREAD_SERIALIZED with FL_MPI_SERIALIZED in fl_comm_desc_t.flags, if your program makes "
                  "no MPI call of its own while flowlane communicators exist)");
  if (std::string why = take_ranks(fn, desc, size, rank, d); !why.empty()) return why;
  d->flags &= ~FL_MPI_SERIALIZED;
  return "";
}

// The local checks of fl_mpi_nccl_comm_create, the ones every rank must pass; "" or the
// failure (and its status). The lane and the device are among them: found only by
// fl_comm_create, they left the other ranks waiting in NCCL's init for this one
// (FLOWLANE_NCCL_INIT_TIMEOUT_MS, 10 minutes). The stream is the one fl_comm_create gets.
std::string nccl_check_locally(fl_engine_t* engine, const fl_comm_desc_t* desc, int size, int rank, fl_comm_desc_t* d,
                               fl_status_t* status) {
  const std::string fn = "fl_mpi_nccl_comm_create";
  if (std::string why = take_ranks(fn, desc, size, rank, d); !why.empty()) return why;
  const uint32_t lanes = fl_engine_lane_count(engine);  // 0: NULL or stale
  if (lanes == 0) {
    *status = FL_ERR_INVALID_HANDLE;
    return fn + ": engine is NULL or not a live engine";
  }
  if (desc->lane >= lanes) {
    *status = FL_ERR_OUT_OF_RANGE;
    return fn + ": lane " + std::to_string(desc->lane) + " is out of range: this engine has " + std::to_string(lanes) +
           " lanes";
  }
  fl_stream_t* s = nullptr;
  const fl_device_t dev{FL_DEVICE_CUDA, desc->device > INT32_MAX ? INT32_MAX : int32_t(desc->device)};
  if (const fl_status_t st = fl_stream_get(engine, uint32_t(desc->lane), dev, FL_STREAM_COLLECTIVE, &s); st != FL_OK) {
    *status = st;
    return fn + ": " + fl_last_error_message();
  }
  return "";
}

uint64_t random_id() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ uint64_t(rd()) ^ 0x6d7069ull;
}

}  // namespace

extern "C" {

FL_API fl_status_t fl_mpi_comm_create(fl_engine_t* engine, const fl_comm_desc_t* desc, const MPI_Comm* mpi_comm,
                                      fl_comm_t** out_comm) {
  const char* fn = "fl_mpi_comm_create";
  try {
    if (desc == nullptr || mpi_comm == nullptr || out_comm == nullptr)
      return refuse(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": desc, mpi_comm and out_comm must not be NULL");
    if (std::string why = mpi_usable(fn); !why.empty()) return refuse(FL_ERR_INVALID_ARGUMENT, why);
    if (*mpi_comm == MPI_COMM_NULL) return refuse(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": mpi_comm is MPI_COMM_NULL");
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    // Before any call holds the gate: once serialized, every call takes it exclusive.
    if (provided == MPI_THREAD_SERIALIZED && (desc->flags & FL_MPI_SERIALIZED) != 0) serialize_calls();
    int size = 0, rank = 0;
    {
      GateLock gate;
      install_finalize_hook();
      MPI_Comm_size(*mpi_comm, &size);
      MPI_Comm_rank(*mpi_comm, &rank);
    }
    fl_comm_desc_t d;
    const std::string local = check_locally(desc, size, rank, provided, &d);
    const uint64_t check = check_mode();
    bool mpi_failed = false;
    std::string why = agree(*mpi_comm, rank, local, int64_t(check), fn, &mpi_failed);
    if (!why.empty()) return refuse(mpi_failed ? FL_ERR_INTERNAL : FL_ERR_INVALID_ARGUMENT, why);

    // Two duplicates: the data's and the checks' (a check never queues behind data).
    MPI_Comm data = MPI_COMM_NULL, ctl = MPI_COMM_NULL;
    uint64_t id = rank == 0 ? random_id() : 0;
    int code;
    {
      GateLock gate;
      code = MPI_Comm_dup(*mpi_comm, &data);
      if (code == MPI_SUCCESS) code = MPI_Comm_dup(*mpi_comm, &ctl);
      if (code == MPI_SUCCESS) {
        MPI_Comm_set_errhandler(data, MPI_ERRORS_RETURN);
        MPI_Comm_set_errhandler(ctl, MPI_ERRORS_RETURN);
        code = MPI_Bcast(&id, 1, MPI_UINT64_T, 0, ctl);  // the communicator's id in dumps, equal on every rank
      }
      if (code != MPI_SUCCESS) {
        if (data != MPI_COMM_NULL) MPI_Comm_free(&data);
        if (ctl != MPI_COMM_NULL) MPI_Comm_free(&ctl);
      }
    }
    if (code != MPI_SUCCESS) return refuse(FL_ERR_INTERNAL, std::string(fn) + ": " + mpi_error(code, "MPI_Comm_dup"));

    const fl_comm_transport_t t = make_transport(data, ctl, rank, size, id, check);  // owns data and ctl
    fl_comm_t* c = nullptr;
    const fl_status_t st = fl_comm_create_transport(engine, &d, &t, &c);  // on failure it destroyed t
    const std::string mine = st == FL_OK ? "" : fl_last_error_message();
    why = agree(*mpi_comm, rank, mine, 0, fn, &mpi_failed);
    if (!why.empty()) {
      if (c != nullptr) fl_comm_destroy(c);
      return refuse(st != FL_OK ? st : mpi_failed ? FL_ERR_INTERNAL : FL_ERR_INVALID_ARGUMENT, why);
    }
    *out_comm = c;
    return fl_set_last_error_message(FL_OK, "");
  } catch (const std::bad_alloc&) {
    return refuse(FL_ERR_NO_MEMORY, std::string(fn) + ": out of memory");
  } catch (const std::exception& e) {
    return refuse(FL_ERR_INTERNAL, std::string(fn) + ": " + e.what());
  }
}

FL_API fl_status_t fl_mpi_nccl_comm_create(fl_engine_t* engine, const fl_comm_desc_t* desc, const MPI_Comm* mpi_comm,
                                           fl_comm_t** out_comm) {
  const char* fn = "fl_mpi_nccl_comm_create";
  try {
    if (desc == nullptr || mpi_comm == nullptr || out_comm == nullptr)
      return refuse(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": desc, mpi_comm and out_comm must not be NULL");
    if (std::string why = mpi_usable(fn); !why.empty()) return refuse(FL_ERR_INVALID_ARGUMENT, why);
    if (*mpi_comm == MPI_COMM_NULL) return refuse(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": mpi_comm is MPI_COMM_NULL");
    int size = 0, rank = 0;
    {
      GateLock gate;
      MPI_Comm_size(*mpi_comm, &size);
      MPI_Comm_rank(*mpi_comm, &rank);
    }
    fl_comm_desc_t d;
    fl_status_t local_status = FL_ERR_INVALID_ARGUMENT;
    const std::string local = nccl_check_locally(engine, desc, size, rank, &d, &local_status);
    d.backend = FL_COMM_NCCL;
    // Rank 0 makes the id; its status and text travel with it, so a failure there (no NCCL,
    // no device) fails every rank with rank 0's reason.
    struct Packet {
      int32_t status;
      char text[1020];
      fl_comm_unique_id_t id;
    } pkt;
    std::memset(&pkt, 0, sizeof pkt);
    if (rank == 0) {
      pkt.status = fl_comm_get_unique_id(FL_COMM_NCCL, &pkt.id);
      if (pkt.status != FL_OK) std::strncpy(pkt.text, fl_last_error_message(), sizeof pkt.text - 1);
    }
    int code;
    {
      GateLock gate;
      code = MPI_Bcast(&pkt, int(sizeof pkt), MPI_BYTE, 0, *mpi_comm);
    }
    if (code != MPI_SUCCESS) return refuse(FL_ERR_INTERNAL, std::string(fn) + ": " + mpi_error(code, "MPI_Bcast"));
    if (pkt.status != FL_OK)
      return refuse(fl_status_t(pkt.status), std::string(fn) + ": rank 0 could not make the NCCL unique id: " + pkt.text);
    bool mpi_failed = false;
    if (std::string why = agree(*mpi_comm, rank, local, 0, fn, &mpi_failed); !why.empty())
      return refuse(mpi_failed ? FL_ERR_INTERNAL : !local.empty() ? local_status : FL_ERR_INVALID_ARGUMENT, why);
    return fl_comm_create(engine, &d, &pkt.id, out_comm);
  } catch (const std::bad_alloc&) {
    return refuse(FL_ERR_NO_MEMORY, std::string(fn) + ": out of memory");
  }
}

}  // extern "C"
