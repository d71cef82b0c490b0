// Collectives: what both communicator backends share, and the interface the C API uses.
//
//   comm.hpp/.cpp      names of ops, dtypes and reductions; operation signatures; validation
//                      of a collective's parts; the per-engine registry of communicators (an
//                      engine extension: abort at destroy, dumps, waits); the settings
//   recorder.hpp/.cpp  the flight recorder: each communicator's last collectives
//   dump.hpp/.cpp      communicator dumps: one JSON file per rank, and their triggers
//   dump_monitor.cpp   the process's dump monitor thread: timeouts, dump requests, signals
//   host.cpp           FL_COMM_HOST_FAKE: ranks of one process over host memory
//   transport.cpp      communicators over a transport (fl_comm_create_transport: MPI's plugin)
//   progress.cpp       the process's progress thread: tests the transports' outstanding requests
//   env.cpp            ranks from the launcher's environment, the file rendezvous
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
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/recorder.hpp"
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
// `inline_ok`: FL_SUBMIT_INLINE is accepted (a transport's collectives: their start never blocks).
std::vector<fl_coll_part_t> check_parts(const fl_collective_instr_t& in, uint32_t rank, uint32_t nranks,
                                        bool inline_ok = false);

// Checks the fields of fl_comm_desc_t every backend shares (flags, nranks, rank, lane).
void check_desc(const Engine& e, const fl_comm_desc_t& d);

// What the environment asks of new communicators (read by each fl_comm_create; a bad value
// is FL_ERR_INVALID_ARGUMENT naming the variable): comm/README.md, "Dumps".
struct Settings {
  size_t trace_size = FlightRecorder::kDefaultSize;  // FLOWLANE_COMM_TRACE_SIZE
  uint64_t timeout_ms = 0;                           // FLOWLANE_COMM_TIMEOUT_MS
  std::string dump_dir;                              // FLOWLANE_COMM_DUMP_DIR
  uint32_t signals = 0;                              // FLOWLANE_COMM_DUMP_ON_SIGNAL (dump.hpp's kSignal*)
  uint64_t check = FL_TRANSPORT_CHECK_STRICT;        // FLOWLANE_COMM_CHECK: FL_TRANSPORT_CHECK_* or 0 (alongside)
};
inline constexpr uint64_t kMaxTimeoutMs = 86'400'000;  // one day
Settings read_settings();
// The communicator id of a unique id (FNV-1a of its 128 bytes).
uint64_t comm_id(const fl_comm_unique_id_t& id);

// ---- communicators -----------------------------------------------------------------------

// One rank's communicator (what an fl_comm_t names). Owned by its engine's registry (a
// shared_ptr), and by every collective instruction in flight (they keep a shared_ptr).
class Communicator : public std::enable_shared_from_this<Communicator> {
 public:
  using Clock = std::chrono::steady_clock;
  // This engine's membership as rank d.rank of d.nranks in the communicator of `uid`.
  Communicator(const char* backend, Engine* e, const fl_comm_desc_t& d, const fl_comm_unique_id_t& uid,
               const Settings& s);
  // The same with the communicator id given (a transport's: equal on every rank).
  Communicator(const char* backend, Engine* e, const fl_comm_desc_t& d, uint64_t comm_id, const Settings& s);
  virtual ~Communicator() = default;
  Engine* const engine;
  // The caller's fl_comm_t* value, set by the C API once create() returned: dumps on other
  // threads may read it meanwhile (0 until then). Relaxed: it publishes nothing else.
  std::atomic<uint64_t> handle{0};
  const uint32_t lane;
  const uint32_t rank;
  const uint32_t nranks;
  const uint64_t id;                // equal on every rank: a hash of the unique id
  const char* const backend_name;   // "host", "nccl": in dumps
  const Clock::time_point created = Clock::now();
  const int64_t created_unix_ns = unix_now_ns();
  // The collective timeout (FLOWLANE_COMM_TIMEOUT_MS at creation, fl_comm_set_timeout); 0:
  // none. Relaxed: a plain setting, read by the dump monitor each period.
  std::atomic<uint64_t> timeout_ms;
  uint64_t timeout_seen = 0;        // the dump monitor's own: the last seq it found timed out
  FlightRecorder recorder;          // written under the backend's lock, read by anyone

  int64_t since_created_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - created).count();
  }
  static int64_t unix_now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  // fl_submit_collective on stream s: `i` (a record of s's engine with the caller's
  // operands) becomes the collective's instruction. Throws; on error i has been recycled.
  virtual fl_instr_id submit(core::Stream* s, core::Instr* i, const fl_collective_instr_t& in) = 0;
  // The handle is stale: collectives not yet matched by every rank fail with
  // FL_ERR_CANCELLED naming `why`. `engine_destroy`: the engine is being destroyed (abort
  // at once) rather than fl_comm_destroy (an idle communicator may shut down cleanly).
  virtual void abort(const std::string& why, bool engine_destroy) = 0;
  // The state dump's section for this communicator.
  virtual void dump(std::string& out) = 0;
  // "active", "broken" or "aborted", and why (for JSON dumps).
  virtual const char* state_word(std::string* reason) = 0;
  // Lanes of this engine whose running collective waits for peer ranks.
  virtual void lane_waits(std::vector<core::LaneWait>& out) { (void)out; }
  // The dump monitor, after the dumps: collective `seq` (issued, unfinished) waited longer
  // than the timeout. It fails with FL_ERR_TIMEOUT naming `detail`, and the communicator
  // breaks (what comes after it fails with FL_ERR_CANCELLED).
  virtual void time_out(uint64_t seq, const std::string& detail) = 0;
};

// fl_comm_get_unique_id.
void unique_id(uint32_t backend, fl_comm_unique_id_t* out);
// fl_comm_create: the new communicator, registered with its engine (the caller gives it
// its handle).
Communicator* create(Engine* e, const fl_comm_desc_t& d, const fl_comm_unique_id_t& id);
// fl_comm_destroy, after the C API made the handle stale.
void destroy(Communicator* c);
// Registers a new communicator with its engine (and the dump monitor); what create() and
// create_transport() return.
Communicator* enroll(std::shared_ptr<Communicator> c, const Settings& settings);
// fl_comm_set_timeout.
void set_timeout(Communicator& c, uint64_t timeout_ms);

// The backends, for create() (host.cpp, nccl.cpp).
std::shared_ptr<Communicator> create_host(Engine* e, const fl_comm_desc_t& d, const fl_comm_unique_id_t& id,
                                          const Settings& s);
std::shared_ptr<Communicator> create_nccl(Engine* e, const fl_comm_desc_t& d, const fl_comm_unique_id_t& id,
                                          const Settings& s);
// fl_comm_create_transport (transport.cpp): `t` checked by the C API. Clears *owned once
// the communicator owns t.state (its destroy then calls t.destroy, even if this throws).
Communicator* create_transport(Engine* e, const fl_comm_desc_t& d, const fl_comm_transport_t& t, bool* owned);
// The launcher's view of this process (env.cpp): the first launcher whose variables are
// set (fl_comm_get_env lists them). False: none; throws FL_ERR_INVALID_ARGUMENT naming a
// variable that is set but wrong.
struct LauncherInfo {
  const char* name = nullptr;  // "torchrun", "ompi", "pmi", "slurm"
  uint64_t rank = 0, size = 0, local_rank = 0, local_size = 1;
};
bool detect_launcher(LauncherInfo* out);
// fl_comm_get_env, fl_comm_rendezvous_file (env.cpp).
void launcher_env(fl_comm_env_t* out);
void rendezvous_file(const char* dir, const char* key, uint64_t rank, uint64_t nranks, uint64_t timeout_ms,
                     fl_comm_unique_id_t* inout);
void host_unique_id(fl_comm_unique_id_t* out);
void nccl_unique_id(fl_comm_unique_id_t* out);
bool is_host_unique_id(const fl_comm_unique_id_t& id);
// NCCL is compiled in and a CUDA device is visible (else FL_COMM_NCCL answers
// FL_ERR_UNSUPPORTED / FL_ERR_NO_DEVICE with the reason).
bool nccl_usable(std::string* why_not);

// The communicators of `e` (for backends that need their peers on the same engine).
std::vector<std::shared_ptr<Communicator>> communicators(Engine& e);

}  // namespace flowlane::comm
