// FL_COMM_NCCL: communicators over ncclCommInitRank and collectives as device
// instructions (gpu/nccl.hpp). Sequence numbers per communicator, as the host-fake backend
// assigns them: one submission order per communicator (its lane's COLLECTIVE stream).
#include "gpu/nccl.hpp"

#include "capi/src/capi_common.hpp"

#if FLOWLANE_HAVE_CUDA && FLOWLANE_HAVE_NCCL

#include <nccl.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>

#include "core/handles.hpp"
#include "gpu/backend.hpp"
#include "gpu/cuda.hpp"

namespace flowlane::gpu {

namespace {

constexpr uint64_t kNcclTag = uint64_t(1) << 30;  // in the slot-index half of the handle

struct NcclComm {
  core::Engine* engine = nullptr;
  uint32_t lane = 0;
  int device = 0;
  int rank = 0;
  int nranks = 0;
  ncclComm_t comm = nullptr;
  uint64_t handle = 0;  // with kNcclTag
  std::atomic<int64_t> refs{1};  // the handle's + one per collective in flight
  std::mutex submit_mu;          // sequence assignment and queueing in one order
  uint64_t issued = 0;           // under submit_mu
};

HandleTable<NcclComm>& nccl_table() {
  static HandleTable<NcclComm>* t = new HandleTable<NcclComm>();  // never destroyed, as the others
  return *t;
}

void unref(NcclComm* c) {
  // acq_rel: the last dropper sees every collective's completion before destroying.
  if (c->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (c->comm != nullptr) (void)ncclCommDestroy(c->comm);
  delete c;
}

std::string nccl_message(ncclResult_t r, const char* call) {
  return std::string("NCCL error ") + std::to_string(int(r)) + " (" + ncclGetErrorString(r) + ") from " + call;
}

NcclComm* lookup(const fl_comm_t* h, const char* fn) {
  uint64_t bits = handle_bits(h);
  NcclComm* c = nccl_table().lookup(bits & ~kNcclTag);
  if (c == nullptr)
    fail(FL_ERR_INVALID_HANDLE, std::string(fn) + ": the NCCL communicator handle is stale (destroyed)");
  return c;
}

bool dtype_of(uint32_t t, ncclDataType_t* out) {
  switch (t) {
    case FL_DTYPE_INT8: *out = ncclInt8; return true;
    case FL_DTYPE_UINT8: *out = ncclUint8; return true;
    case FL_DTYPE_INT32: *out = ncclInt32; return true;
    case FL_DTYPE_UINT32: *out = ncclUint32; return true;
    case FL_DTYPE_INT64: *out = ncclInt64; return true;
    case FL_DTYPE_UINT64: *out = ncclUint64; return true;
    case FL_DTYPE_FLOAT16: *out = ncclFloat16; return true;
    case FL_DTYPE_FLOAT32: *out = ncclFloat32; return true;
    case FL_DTYPE_FLOAT64: *out = ncclFloat64; return true;
    case FL_DTYPE_BFLOAT16: *out = ncclBfloat16; return true;
  }
  return false;
}

bool redop_of(uint32_t r, ncclRedOp_t* out) {
  switch (r) {
    case FL_REDOP_SUM: *out = ncclSum; return true;
    case FL_REDOP_PROD: *out = ncclProd; return true;
    case FL_REDOP_MAX: *out = ncclMax; return true;
    case FL_REDOP_MIN: *out = ncclMin; return true;
  }
  return false;
}

// Payload: this header, then num_parts fl_coll_part_t.
struct CollHeader {
  NcclComm* comm;
  uint64_t seq;
  uint64_t num_parts;
};

struct FillCtx {
  NcclComm* comm;
  uint64_t seq;
  const fl_collective_instr_t* in;
};

void fill_collective(core::Instr* i, const void* ctx) {
  const auto& f = *static_cast<const FillCtx*>(ctx);
  CollHeader h{f.comm, f.seq, f.in->num_parts};
  i->payload.resize(sizeof h + size_t(h.num_parts) * sizeof(fl_coll_part_t));
  std::memcpy(i->payload.data(), &h, sizeof h);
  std::memcpy(i->payload.data() + sizeof h, f.in->parts, size_t(h.num_parts) * sizeof(fl_coll_part_t));
}

fl_status_t launch_collective(fl_instr_ctx_t* ctx, void*) {
  auto* i = reinterpret_cast<core::Instr*>(ctx);
  CollHeader h;
  std::memcpy(&h, i->payload.data(), sizeof h);
  const unsigned char* parts = i->payload.data() + sizeof h;
  cudaStream_t cs = cuda_stream(i->stream);
  ncclComm_t comm = h.comm->comm;
  const std::string where = "collective seq " + std::to_string(h.seq) + " of NCCL rank " +
                            std::to_string(h.comm->rank) + "/" + std::to_string(h.comm->nranks);
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) {
    i->error = nccl_message(r, "ncclGroupStart") + " (" + where + ")";
    return FL_ERR_NCCL;
  }
  ncclResult_t first = ncclSuccess;
  uint64_t bad = 0;
  for (uint64_t k = 0; k < h.num_parts && first == ncclSuccess; ++k) {
    fl_coll_part_t p;
    std::memcpy(&p, parts + k * sizeof p, sizeof p);
    ncclDataType_t dt = ncclFloat32;
    ncclRedOp_t op = ncclSum;
    dtype_of(p.dtype, &dt);  // validated at submit
    redop_of(p.redop, &op);
    size_t n = size_t(p.count);
    switch (p.op) {
      case FL_COLL_ALL_REDUCE: r = ncclAllReduce(p.sendbuf, p.recvbuf, n, dt, op, comm, cs); break;
      case FL_COLL_ALL_GATHER: r = ncclAllGather(p.sendbuf, p.recvbuf, n, dt, comm, cs); break;
      case FL_COLL_REDUCE_SCATTER: r = ncclReduceScatter(p.sendbuf, p.recvbuf, n, dt, op, comm, cs); break;
      case FL_COLL_BROADCAST: r = ncclBroadcast(p.sendbuf, p.recvbuf, n, dt, int(p.peer), comm, cs); break;
      case FL_COLL_SEND: r = ncclSend(p.sendbuf, n, dt, int(p.peer), comm, cs); break;
      default: r = ncclRecv(p.recvbuf, n, dt, int(p.peer), comm, cs); break;
    }
    if (r != ncclSuccess) first = r, bad = k;
  }
  ncclResult_t end = ncclGroupEnd();
  if (first != ncclSuccess) {
    i->error = nccl_message(first, "part") + " " + std::to_string(bad) + " (" + where + ")";
    return FL_ERR_NCCL;
  }
  if (end != ncclSuccess) {
    i->error = nccl_message(end, "ncclGroupEnd") + " (" + where + ")";
    return FL_ERR_NCCL;
  }
  return FL_OK;
}

void release_comm_ref(void* user_data) { unref(static_cast<NcclComm*>(user_data)); }

}  // namespace

bool nccl_compiled() { return true; }
bool nccl_available() { return device_count() > 0; }

bool nccl_handle(const fl_comm_t* h) { return h != nullptr && (handle_bits(h) & kNcclTag) != 0; }

void nccl_unique_id(fl_comm_unique_id_t* out) {
  static_assert(sizeof(ncclUniqueId) <= sizeof(fl_comm_unique_id_t), "NCCL unique id does not fit");
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) fail(FL_ERR_NCCL, "fl_comm_get_unique_id: " + nccl_message(r, "ncclGetUniqueId"));
  std::memset(out, 0, sizeof *out);
  std::memcpy(out->internal, &id, sizeof id);
}

fl_comm_t* nccl_comm_create(core::Engine* e, const fl_comm_desc_t& d, const fl_comm_unique_id_t& uid) {
  const char* fn = "fl_comm_create";
  if (d.flags != 0) fail(FL_ERR_INVALID_ARGUMENT, "fl_comm_create: flags " + std::to_string(d.flags) + " are unknown (use 0)");
  if (d.nranks == 0 || d.nranks > 4096)
    fail(FL_ERR_OUT_OF_RANGE, "fl_comm_create: nranks " + std::to_string(d.nranks) + " is out of range (1..4096)");
  if (d.rank >= d.nranks)
    fail(FL_ERR_OUT_OF_RANGE, "fl_comm_create: rank " + std::to_string(d.rank) + " is out of range: the communicator has " +
                                  std::to_string(d.nranks) + " ranks");
  if (d.lane >= e->lane_count())
    fail(FL_ERR_OUT_OF_RANGE, "fl_comm_create: lane " + std::to_string(d.lane) + " is out of range: this engine has " +
                                  std::to_string(e->lane_count()) + " lanes");
  const uint32_t devices = e->device_slots() - 1;
  if (d.device >= devices)
    fail(FL_ERR_NO_DEVICE, "fl_comm_create: CUDA device " + std::to_string(d.device) + " does not exist: this process sees " +
                               std::to_string(devices) + " CUDA device(s)");
  if (e->shutting_down()) fail(FL_ERR_SHUTDOWN, "fl_comm_create: the engine is being destroyed");
  auto* c = new NcclComm();
  c->engine = e;
  c->lane = uint32_t(d.lane);
  c->device = int(d.device);
  c->rank = int(d.rank);
  c->nranks = int(d.nranks);
  int saved = -1;
  (void)cudaGetDevice(&saved);
  cudaError_t cr = cudaSetDevice(c->device);
  if (cr != cudaSuccess) {
    delete c;
    (void)cudaGetLastError();
    fail(FL_ERR_CUDA, std::string(fn) + ": " + cuda_message(cr, "cudaSetDevice"));
  }
  ncclUniqueId id;
  std::memcpy(&id, uid.internal, sizeof id);
  ncclResult_t r = ncclCommInitRank(&c->comm, c->nranks, id, c->rank);
  if (saved >= 0 && saved != c->device) (void)cudaSetDevice(saved);
  if (r != ncclSuccess) {
    delete c;
    fail(FL_ERR_NCCL, std::string(fn) + ": " + nccl_message(r, "ncclCommInitRank"));
  }
  uint64_t h = nccl_table().insert(c);
  if (h == 0) {
    unref(c);
    fail(FL_ERR_NO_MEMORY, "fl_comm_create: the process-wide NCCL communicator table is full");
  }
  c->handle = h | kNcclTag;
  return handle_cast<fl_comm_t>(c->handle);
}

void nccl_comm_destroy(const fl_comm_t* h) {
  NcclComm* c = nccl_table().erase(handle_bits(h) & ~kNcclTag);
  if (c == nullptr) fail(FL_ERR_INVALID_HANDLE, "fl_comm_destroy: the NCCL communicator handle is stale (destroyed twice?)");
  unref(c);
}

fl_instr_id nccl_submit(fl_stream_t* stream_handle, const fl_comm_t* h, const fl_collective_instr_t& in) {
  const char* fn = "fl_submit_collective";
  NcclComm* c = lookup(h, fn);
  core::Stream* s = stream_from(stream_handle, fn);
  if ((in.flags & ~uint64_t(FL_SUBMIT_NONBLOCKING)) != 0)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_collective: unknown flags " + std::to_string(in.flags) +
                                      " (only FL_SUBMIT_NONBLOCKING is defined)");
  if (s->engine != c->engine)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_collective: the stream belongs to another engine than the communicator");
  if (s->lane->id != c->lane || s->kind != FL_STREAM_COLLECTIVE || s->device.type != FL_DEVICE_CUDA ||
      s->device.index != c->device)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_collective: this NCCL communicator issues its collectives on lane " +
                                      std::to_string(c->lane) + "'s COLLECTIVE stream of cuda:" +
                                      std::to_string(c->device) + ", but the stream given is " + s->describe() +
                                      " (DESIGN.md rule 8: one stream, one order per communicator)");
  if (in.num_parts == 0 || in.parts == nullptr)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_collective: parts is NULL or num_parts is 0 (give at least one part)");
  if (in.num_parts > 1024)
    fail(FL_ERR_OUT_OF_RANGE, "fl_submit_collective: num_parts " + std::to_string(in.num_parts) + " exceeds 1024");
  for (uint64_t k = 0; k < in.num_parts; ++k) {
    const fl_coll_part_t& p = in.parts[k];
    std::string at = "fl_submit_collective: part " + std::to_string(k) + ": ";
    ncclDataType_t dt;
    ncclRedOp_t op;
    if (p.op < FL_COLL_ALL_REDUCE || p.op > FL_COLL_RECV)
      fail(FL_ERR_INVALID_ARGUMENT, at + "op " + std::to_string(p.op) + " is unknown (FL_COLL_ALL_REDUCE..FL_COLL_RECV)");
    if (!dtype_of(p.dtype, &dt)) fail(FL_ERR_INVALID_ARGUMENT, at + "dtype " + std::to_string(p.dtype) + " is unknown");
    if ((p.op == FL_COLL_ALL_REDUCE || p.op == FL_COLL_REDUCE_SCATTER) && !redop_of(p.redop, &op))
      fail(FL_ERR_INVALID_ARGUMENT, at + "redop " + std::to_string(p.redop) + " is unknown (sum, prod, max, min)");
    if ((p.op == FL_COLL_BROADCAST || p.op == FL_COLL_SEND || p.op == FL_COLL_RECV) && p.peer >= uint32_t(c->nranks))
      fail(FL_ERR_OUT_OF_RANGE, at + "peer/root " + std::to_string(p.peer) + " is out of range (" +
                                    std::to_string(c->nranks) + " ranks)");
  }
  std::lock_guard<std::mutex> order(c->submit_mu);  // seq order == stream order
  FillCtx f{c, ++c->issued, &in};
  c->refs.fetch_add(1, std::memory_order_relaxed);  // the instruction's; dropped by its cleanup
  SubmitArgs a;
  a.kind = core::InstrKind::kCollective;
  a.fn = &launch_collective;
  a.user_data = c;
  a.cleanup = &release_comm_ref;  // after the GPU work completed
  a.operands = in.operands;
  a.num_operands = in.num_operands;
  a.name = in.name;
  a.nonblocking = (in.flags & FL_SUBMIT_NONBLOCKING) != 0;
  a.api = fn;
  a.fill = &fill_collective;
  a.fill_ctx = &f;
  try {
    return submit_instruction(s, a);
  } catch (...) {  // not queued: neither the sequence number nor the reference is used
    --c->issued;
    c->refs.fetch_sub(1, std::memory_order_relaxed);
    throw;
  }
}

}  // namespace flowlane::gpu

#else  // no NCCL in this build

namespace flowlane::gpu {
bool nccl_compiled() { return false; }
bool nccl_available() { return false; }
bool nccl_handle(const fl_comm_t*) { return false; }
void nccl_unique_id(fl_comm_unique_id_t*) { fail(FL_ERR_UNSUPPORTED, "NCCL is not available in this build"); }
fl_comm_t* nccl_comm_create(core::Engine*, const fl_comm_desc_t&, const fl_comm_unique_id_t&) {
  fail(FL_ERR_UNSUPPORTED, "fl_comm_create: NCCL is not available in this build");
}
void nccl_comm_destroy(const fl_comm_t*) { fail(FL_ERR_UNSUPPORTED, "NCCL is not available in this build"); }
fl_instr_id nccl_submit(fl_stream_t*, const fl_comm_t*, const fl_collective_instr_t&) {
  fail(FL_ERR_UNSUPPORTED, "fl_submit_collective: NCCL is not available in this build");
}
}  // namespace flowlane::gpu

#endif
