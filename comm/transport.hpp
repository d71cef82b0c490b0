// Communicators over a transport (fl_comm_create_transport; MPI's is libflowlane_mpi.so):
// what transport.cpp and progress.cpp share. The protocol is written down in
// comm/README.md, "Transports".
//
// A collective is an asynchronous host instruction (core/engine/README.md, "Asynchronous
// host instructions"): its lane runner starts it through the transport (start(), in
// sequence order) and moves on; the process's progress thread (progress.cpp) tests every
// outstanding request and *delivers* each collective's outcome — its flight-recorder record
// and its instruction's finish — in sequence order per communicator (a program thread
// waiting on a collective stream takes such rounds too: progress_help). A request the
// transport still holds after its outcome was delivered (a timeout, an abort, a failure
// found early) stays with the progress thread, tested until it is done: MPI cannot cancel a
// collective, and its buffers stay in use until then.
//
// Locks: TransportComm::mu guards its state and counters and serializes its recorder's
// writes; the progress thread's mutex guards only the hand-over of new requests. No lock is
// held across a call into the transport or a finish of an instruction.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/comm.hpp"

namespace flowlane::comm::transport_internal {

struct TransportComm final : Communicator {
  TransportComm(Engine* e, const fl_comm_desc_t& d, const fl_comm_transport_t& tr, const char* name,
                const Settings& s)
      : Communicator(name, e, d, tr.id, s), t(tr), check(s.check) {}
  ~TransportComm() override;  // the transport's destroy(): no request is outstanding any more
  fl_instr_id submit(core::Stream* s, core::Instr* i, const fl_collective_instr_t& in) override;
  void abort(const std::string& why, bool engine_destroy) override;
  void dump(std::string& out) override;
  const char* state_word(std::string* reason) override;
  void time_out(uint64_t seq, const std::string& detail) override;
  // "mpi communicator 0x... (rank 0 of 2, lane 1)"
  std::string name() const;

  const fl_comm_transport_t t;  // the caller's functions and state
  const uint64_t check;         // FL_TRANSPORT_CHECK_* of FLOWLANE_COMM_CHECK
  std::mutex submit_mu;         // sequence assignment and queueing, in one order

  enum class State : uint8_t { kActive, kBroken, kAborted };
  std::mutex mu;  // guards everything below, and serializes the writes of `recorder`
  State state = State::kActive;
  fl_status_t broken_status = FL_OK;  // what broke it (FL_ERR_TIMEOUT, a transport's failure, ...)
  std::string reason;                 // why it broke or was aborted
  uint64_t timed_out_seq = 0;         // the collective that timed out (it fails with FL_ERR_TIMEOUT)
  bool transport_aborted = false;     // t.abort() was called
  uint64_t queued = 0, started = 0, delivered = 0;  // sequence numbers: last submitted, started, delivered
  uint64_t outstanding = 0;           // requests the transport holds (started, not done)

  // Set (release) when the state leaves kActive, so that the progress thread fails what is
  // in flight; its acquire load pairs with it.
  std::atomic<bool> stop_requested{false};
};

// One collective handed to the progress thread by its start (or by a start that did not
// happen: `req` null, `status` set).
struct Request {
  std::shared_ptr<TransportComm> comm;
  core::Instr* instr = nullptr;  // until its outcome is delivered
  void* req = nullptr;           // the transport's; null: not started, or done
  uint64_t seq = 0;
  bool skipped = false;          // this rank skipped it (it takes part without its buffers)
  fl_status_t status = FL_OK;    // the first failure known
  std::string msg;               // its text
  bool delivered = false;
};

// The progress thread (progress.cpp): takes the request, tests it until done.
void progress_add(Request r);
// Wakes the progress thread (a communicator's state changed: it fails what is in flight).
void progress_wake();
// One round of progress on the calling thread, if no other thread is taking one (a program
// thread's wait on, or query of, a collective stream: core::set_async_helper). True when
// anything moved.
bool progress_help();
// A waiting program thread stopped polling (core::Executor::help_leave): the thread takes
// the rounds back at once.
void progress_leave();

}  // namespace flowlane::comm::transport_internal
