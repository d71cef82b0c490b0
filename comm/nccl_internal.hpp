// Internals of the NCCL communicator backend, shared by its files (builds with NCCL only):
//
//   nccl.cpp         the backend's entry points (fl_comm_create's NCCL init), the methods of
//                    NcclComm, the engine's collective-order object, NCCL error messages
//   nccl_watch.cpp   the process-wide registry of communicators, the watchdog thread, and
//                    aborts (requested, performed, tried); finalize/destroy of an idle one
//   nccl_launch.cpp  launch, settle and cleanup of a collective instruction
//
// The protocol is written down at the top of nccl.cpp and in comm/README.md, "NCCL".
#pragma once

#if !(FLOWLANE_HAVE_CUDA && FLOWLANE_HAVE_NCCL)
#error "comm/nccl_internal.hpp is for builds with NCCL only"
#endif

#include <nccl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm.hpp"
#include "gpu/cuda.hpp"

// NCCL >= 2.14: ncclCommInitRankConfig with config.blocking, ncclCommFinalize. Building with
// -DFLOWLANE_NCCL_FORCE_BLOCKING exercises the older, blocking path.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0) && !defined(FLOWLANE_NCCL_FORCE_BLOCKING)
#define FLOWLANE_NCCL_NONBLOCKING 1
#else
#define FLOWLANE_NCCL_NONBLOCKING 0
#endif

namespace flowlane::comm::nccl_internal {

using gpu::cu;    // the CUDA runtime's table (gpu/runtime.hpp)
using gpu::nccl;  // NCCL's, loaded at the first NCCL use

using Clock = std::chrono::steady_clock;
using core::Instr;
using core::Stream;

// "<NCCL's text> (NCCL error <n>) from <call>" (nccl.cpp).
std::string nccl_message(ncclResult_t r, const char* call);
// ncclGetLastError's text, when NCCL has one.
std::string nccl_detail(ncclComm_t comm);
// The environment variable `name` as a positive number of milliseconds, else `fallback`.
uint64_t env_ms(const char* name, uint64_t fallback);

// Polls a non-blocking NCCL state: spins briefly, then sleeps in growing steps (to 1 ms).
struct Backoff {
  int n = 0;
  void pause() {
    if (++n < 64) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(std::min(1000, 10 << std::min(n - 64, 7))));
  }
};

// ---- communicators ----------------------------------------------------------------------

enum class CommState : uint8_t {
  kActive,   // collectives are issued
  kBroken,   // a collective was not issued: no more launches; abort once nothing is in flight
  kAborted,  // ncclCommAbort done (or under way): `comm` is gone
};

struct NcclComm final : Communicator {
  NcclComm(Engine* e, const fl_comm_desc_t& d, const fl_comm_unique_id_t& uid, const Settings& s)
      : Communicator("nccl", e, d, uid, s) {}
  ~NcclComm() override;
  fl_instr_id submit(Stream* s, Instr* i, const fl_collective_instr_t& in) override;
  void abort(const std::string& why, bool engine_destroy) override;
  void dump(std::string& out) override;
  const char* state_word(std::string* reason) override;
  void time_out(uint64_t seq, const std::string& detail) override;
  // "NCCL communicator 0x... (rank 0 of 2, cuda:0, lane 3)"
  std::string name() const {
    return "NCCL communicator " + hex(handle.load(std::memory_order_relaxed)) + " (rank " + std::to_string(rank) + " of " + std::to_string(nranks) +
           ", cuda:" + std::to_string(device) + ", lane " + std::to_string(lane) + ")";
  }

  core::Object* order = nullptr;  // the engine's collective-order object; null: FL_COMM_UNORDERED
  int device = 0;
  std::array<char, 128> uid{};
  std::mutex submit_mu;  // sequence assignment and queueing, in one order

  // Serializes every NCCL call on `comm` (launch, async-error poll, finalize, abort); lock
  // order: nccl_mu before mu. `comm` is written only under nccl_mu.
  std::mutex nccl_mu;
  ncclComm_t comm = nullptr;
  // Set (release) under mu when an abort is requested; whoever holds nccl_mu performs it.
  // The acquire loads in the launch poll loop and the watchdog pair with it.
  std::atomic<bool> abort_req{false};

  std::mutex mu;  // guards everything below
  CommState state = CommState::kActive;
  bool stale = false;                // the handle is gone (destroy, engine destroy)
  fl_status_t abort_status = FL_OK;  // what unfinished collectives fail with
  std::string reason;                // why the communicator broke or was aborted
  uint64_t issued = 0;               // last sequence number handed out
  uint64_t launched = 0;             // collectives issued to NCCL
  uint64_t completed = 0;            // collectives finished, any outcome
  uint64_t pending = 0;              // submitted, cleanup not run yet
  uint64_t inflight = 0;             // issued to NCCL, not settled yet
  uint64_t last_settled = 0;         // highest launched seq settled (launches settle in seq order)
  uint64_t abort_cut = 0;            // last_settled at the abort: launched seqs above it failed
  // (mu also serializes the writes of `recorder`.)
};

// One collective instruction's state (its user_data).
struct CollWork {
  std::shared_ptr<NcclComm> comm;
  uint64_t seq = 0;
  std::vector<fl_coll_part_t> parts;
  std::string signature;
  Instr* instr = nullptr;  // set by the launch
  bool ran = false;        // the launch trampoline ran
  bool launched = false;   // issued to NCCL
  bool settled = false;    // settle ran (from the completion hook or the cleanup)
};

// Process-wide: every live communicator (for the watchdog) and those inside their NCCL init.
struct Registry {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::weak_ptr<NcclComm>> comms;
  std::vector<NcclComm*> joining;  // inside fl_comm_create's NCCL init
  bool watching = false;           // the watchdog thread runs
};
Registry& registry();

// ---- communicators and aborts (nccl_watch.cpp) ----------------------------------------------

// Finalizes and destroys an idle communicator (bounded), aborting it when that fails.
void teardown_comm(ncclComm_t comm, bool abort);
// Under c->mu. The first reason wins.
void request_abort(NcclComm* c, fl_status_t st, const std::string& why);
// Under c->nccl_mu (not c->mu): performs a requested abort.
void abort_locked(NcclComm* c);
// Performs a requested abort now if no launch holds nccl_mu.
void try_abort(NcclComm* c);
// The watchdog thread (started with the first communicator, exits after the last).
void watch_loop();

// ---- collectives (nccl_launch.cpp) ----------------------------------------------------------

// The launch trampoline (lane runner, device current, CUDA stream created).
fl_status_t launch_collective(fl_instr_ctx_t* ctx, void* ud);
// A collective's cleanup: after its GPU work completed, or on skip / failed launch.
void coll_cleanup(void* ud);

}  // namespace flowlane::comm::nccl_internal
