// Collectives: what both communicator backends share, and the interface the C API uses.
//
//   comm.hpp/.cpp      names of ops, dtypes and reductions; operation signatures; validation
//                      of a collective's parts; the flight recorder; the per-engine registry
//                      of communicators (an engine extension: abort at destroy, dumps, waits)
//   host.cpp           FL_COMM_HOST_FAKE: ranks of one process over host memory
//   nccl.cpp           FL_COMM_NCCL: NCCL over CUDA devices (CUDA builds): entry points,
//                      NcclComm's methods
//   nccl_watch.cpp     its registry of communicators, watchdog thread and aborts
//   nccl_launch.cpp    the launch, settle and cleanup of its collectives
//   nccl_internal.hpp  what the three NCCL files share
//
// Protocols (sequence numbers, abort, the engine-wide collective order of NCCL) are
// written down in comm/README.md.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "flowlane/flowlane.h"

namespace flowlane::comm {

using core::Engine;

// ---- names, signatures, validation -------------------------------------------------------

const char* op_name(uint32_t op);          // "all_reduce"; "?" for unknown values
const char* dtype_name(uint32_t dtype);    // "float32"
size_t dtype_size(uint32_t dtype);         // bytes per element; 0 for unknown values
const char* redop_name(uint32_t redop);    // "sum"
bool is_reduction(uint32_t op);            // all_reduce, reduce_scatter
bool is_p2p(uint32_t op);                  // send, recv
// "all_reduce(float32, sum, count=4)"; several parts: "group[...; ...]".
std::string part_signature(const fl_coll_part_t& p);
std::string signature(const std::vector<fl_coll_part_t>& parts);
std::string hex(uint64_t v);  // "0x00000000deadbeef"

// Checks what every backend requires of fl_submit_collective's descriptor for the rank
// `rank` of `nranks` (flags, part count, op, dtype, redop, root/peer, count, buffers) and
// returns the parts copied. Throws with the part's index in the message.
std::vector<fl_coll_part_t> check_parts(const fl_collective_instr_t& in, uint32_t rank, uint32_t nranks);

// Checks the fields of fl_comm_desc_t every backend shares (flags, nranks, rank, lane).
void check_desc(const Engine& e, const fl_comm_desc_t& d);

// ---- the flight recorder ---------------------------------------------------------------

// The last kSize collectives of one communicator, for dumps and messages.
struct CollRecord {
  uint64_t seq = 0;
  fl_instr_id instr = 0;
  std::string signature;
  const char* state = "issued";  // the backend's words: issued, waiting, launched, done, failed, ...
  int64_t t_issued_ns = 0, t_started_ns = -1, t_done_ns = -1;  // since the communicator's creation; -1: not yet
};

class FlightRecorder {
 public:
  static constexpr size_t kSize = 32;
  void push(uint64_t seq, std::string signature, int64_t t_issued_ns);
  void pop(uint64_t seq);  // the submission of `seq` failed: forget it
  CollRecord* find(uint64_t seq);
  void set(uint64_t seq, const char* state) {
    if (CollRecord* r = find(seq)) r->state = state;
  }
  // One line per record: "      seq 4    #17     done      all_reduce(...)  issued +0.1 ms, ..."
  void dump(std::string& out) const;
  size_t size() const { return records_.size(); }

 private:
  std::deque<CollRecord> records_;
};

// ---- communicators -----------------------------------------------------------------------

// One rank's communicator (what an fl_comm_t names). Owned by its engine's registry (a
// shared_ptr), and by every collective instruction in flight (they keep a shared_ptr).
class Communicator : public std::enable_shared_from_this<Communicator> {
 public:
  virtual ~Communicator() = default;
  Engine* engine = nullptr;
  uint64_t handle = 0;  // the caller's fl_comm_t* value; set by the C API
  uint32_t lane = 0;
  uint32_t rank = 0;
  uint32_t nranks = 0;

  // fl_submit_collective on stream s: `i` (a record of s's engine with the caller's
  // operands) becomes the collective's instruction. Throws; on error i has been recycled.
  virtual fl_instr_id submit(core::Stream* s, core::Instr* i, const fl_collective_instr_t& in) = 0;
  // The handle is stale: collectives not yet matched by every rank fail with
  // FL_ERR_CANCELLED naming `why`. `engine_destroy`: the engine is being destroyed (abort
  // at once) rather than fl_comm_destroy (an idle communicator may shut down cleanly).
  virtual void abort(const std::string& why, bool engine_destroy) = 0;
  // The state dump's section for this communicator.
  virtual void dump(std::string& out) = 0;
  // Lanes of this engine whose running collective waits for peer ranks.
  virtual void lane_waits(std::vector<core::LaneWait>& out) { (void)out; }
};

// fl_comm_get_unique_id.
void unique_id(uint32_t backend, fl_comm_unique_id_t* out);
// fl_comm_create: the new communicator, registered with its engine (the caller gives it
// its handle).
Communicator* create(Engine* e, const fl_comm_desc_t& d, const fl_comm_unique_id_t& id);
// fl_comm_destroy, after the C API made the handle stale.
void destroy(Communicator* c);

// The backends, for create() (host.cpp, nccl.cpp).
std::shared_ptr<Communicator> create_host(Engine* e, const fl_comm_desc_t& d, const fl_comm_unique_id_t& id);
std::shared_ptr<Communicator> create_nccl(Engine* e, const fl_comm_desc_t& d, const fl_comm_unique_id_t& id);
void host_unique_id(fl_comm_unique_id_t* out);
void nccl_unique_id(fl_comm_unique_id_t* out);
bool is_host_unique_id(const fl_comm_unique_id_t& id);
// NCCL is compiled in and a CUDA device is visible (else FL_COMM_NCCL answers
// FL_ERR_UNSUPPORTED / FL_ERR_NO_DEVICE with the reason).
bool nccl_usable(std::string* why_not);

// The communicators of `e` (for backends that need their peers on the same engine).
std::vector<std::shared_ptr<Communicator>> communicators(Engine& e);

}  // namespace flowlane::comm
