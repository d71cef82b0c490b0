// Host-memory communicators (FL_COMM_HOST_FAKE): ranks of one process that share a unique
// id rendezvous in a process-wide registry and run collectives over host buffers.
//
// Protocol. Every collective instruction of a communicator gets the next sequence number
// of that rank at submission (`issued`). Its callback runs on the comm's lane COLLECTIVE
// stream, in submission order, and blocks — as a NCCL kernel would — until every rank has
// reached the same sequence number on that communicator (`started` of each rank). The last
// rank to arrive compares the operation signatures (op, dtype, redop, count, root/peer):
// equal signatures → it moves the data for every rank (inputs staged first, so in-place
// buffers are safe) and wakes the others; different signatures → every rank's
// instruction fails with a message naming both signatures. A rank that never arrives
// leaves the others blocked, like NCCL: that is what the watchdog dump explains.
//
// Abort. fl_comm_destroy and fl_engine_destroy abort the rank: its handle goes stale,
// and every collective of the group (this rank's and its peers') that has not been matched
// by every rank yet — now or later — fails with FL_ERR_CANCELLED naming the rank that left.
// Collectives already matched complete normally. Synchronize before destroying to let
// outstanding collectives finish.
//
// Locking: one mutex per group guards the rendezvous rounds, every rank's counters and
// flight recorder. Dumps take it briefly; nothing blocks while holding it except the
// data movement of one matched round.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "flowlane/flowlane.h"

namespace flowlane::core {

class Engine;
struct FakeGroup;

// One entry of a communicator's flight recorder.
struct CollRecord {
  enum State : uint8_t { kIssued, kWaiting, kDone, kFailed, kCancelled };
  uint64_t seq = 0;
  fl_instr_id instr = 0;
  std::string signature;  // "all_reduce(float32, sum, count=4)"
  State state = kIssued;
  int64_t t_issued_ns = 0, t_started_ns = -1, t_done_ns = -1;  // since the comm's creation
};

// One rank's communicator (what a fl_comm_t names).
struct Comm {
  uint64_t handle = 0;
  Engine* engine = nullptr;
  uint32_t lane = 0;
  uint32_t rank = 0;
  uint32_t nranks = 0;
  std::shared_ptr<FakeGroup> group;
  std::chrono::steady_clock::time_point created = std::chrono::steady_clock::now();
  std::mutex submit_mu;  // sequence assignment + queueing, in one order

  // Guarded by group->mu.
  uint64_t issued = 0;     // collectives submitted
  uint64_t started = 0;    // collectives whose callback reached the rendezvous
  uint64_t completed = 0;  // collectives finished (any outcome)
  bool aborted = false;
  std::deque<CollRecord> recorder;  // the last kRecorderSize collectives
  static constexpr size_t kRecorderSize = 32;
};

struct FakeGroup {
  std::array<char, 128> id{};
  uint32_t nranks = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Comm*> ranks;  // live ranks (null: not joined yet, or left); under mu
  bool aborted = false;
  std::string abort_reason;
  struct Posting;
  struct Round {
    std::vector<const Posting*> posts;  // per rank; null until it arrives
    uint32_t arrived = 0;
    uint32_t left = 0;
    bool done = false;
    std::string error;  // signature mismatch
  };
  std::map<uint64_t, Round> rounds;  // by sequence number
};

// C API implementation (capi: core/comm.cpp).
void comm_unique_id(uint32_t backend, fl_comm_unique_id_t* out);
Comm* comm_create(Engine* e, const fl_comm_desc_t& d, const fl_comm_unique_id_t& id);
Comm* comm_from(const fl_comm_t* h, const char* fn);  // throws FL_ERR_INVALID_HANDLE
void comm_destroy(Comm* c);
fl_instr_id comm_submit(Comm* c, fl_stream_t* stream, const fl_collective_instr_t& in);

// Engine destroy: every communicator of `e` is aborted and its handle made stale.
void comms_abort_all(Engine* e, const char* why);
void comms_release_all(Engine* e);

// Diagnostics. A lane of `e` whose running collective waits for peers: which instruction,
// and the (engine, lane) of each peer rank that has not arrived.
struct CollWait {
  uint32_t lane = 0;
  fl_instr_id instr = 0;
  std::string what;  // "communicator 0x.. seq 1 all_reduce(...): waits for rank 1 (lane 2)"
  struct Peer {
    const Engine* engine;
    uint32_t lane;
    uint32_t rank;
  };
  std::vector<Peer> peers;
};
std::vector<CollWait> collective_waits(Engine& e);
// Appends the communicators section of the dump.
void dump_comms(Engine& e, std::string& out);

}  // namespace flowlane::core
