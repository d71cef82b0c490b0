// Instruction records and dependency edges.
//
// An instruction's `pending` counter holds one unit per unfinished predecessor, plus
//   one unit for the submitting thread (dropped when submission has recorded every edge,
//     before the record is pushed on its lane: so never the last one),
//   one unit for the lane (dropped when the lane reaches the instruction at its head).
// Whoever drops it to zero launches the instruction: the lane runs it inline; anyone
// else (a completing predecessor) re-schedules the lane, which is then blocked on that
// very instruction.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "flowlane/flowlane.h"

namespace flowlane::core {

class Engine;
struct Stream;
struct Object;
struct Instr;

enum class InstrState : uint32_t {
  kFree = 0,     // in the record pool
  kPending = 1,  // submitted, waiting for predecessors or its turn on the lane
  kRunning = 2,  // callback executing (for an asynchronous instruction: being issued)
  kIssued = 3,   // asynchronous instruction: on its device stream, completion pending (device.hpp)
  kDone = 4,     // completed successfully
  kFailed = 5,   // its callback (or its GPU work) failed
  kSkipped = 6,  // not run: an input was poisoned
};

inline bool is_terminal(InstrState s) { return s >= InstrState::kDone; }

// An instruction's place in its stream's queue of completions (Instr::async_phase,
// AsyncCompletions in stream.hpp): not in it; started, in flight; finished, its cleanup still
// to run; finished, cleanup done (a synchronous instruction waiting behind one in flight).
enum AsyncPhase : uint8_t { kNotQueued = 0, kInFlight = 1, kFinished = 2, kFinishedCleaned = 3 };

// One "succ waits for pred" link, in pred's successor (or issue) list. It lives in
// succ->edges, which the submitter sized before publishing any, so its address is stable
// until succ is recycled — after every predecessor released it.
struct Edge {
  Instr* succ = nullptr;
  Edge* next = nullptr;
  // False for a value edge's entry in pred's issue list (Dep::kValueWait): succ waits for
  // pred on the device, not for pred's issue, so it holds no unit of succ's `pending`. It
  // is there for the walk of what waits for an instruction (Waits::find_waiter); succ
  // completes only after pred has (gpu/README.md, "Value edges"), so it outlives the list.
  bool holds_unit = true;
};

struct Operand {
  Object* obj;
  uint32_t access;
};

// Laid out for the cost of handing a record between cores: the fields every instruction
// writes on its way (submission, the lane runner, completion, recycling) are in the first
// two cache lines, the rest is read-only on that way or written only by failures, device
// work and diagnostics. The record is line-aligned, so those are exactly two lines. (The
// submitting thread fills a record, a worker runs and completes it, and the record comes
// back through the recycler: every line written on the way moves between the two cores.)
// Code on that way clears a field only when it is not already clear, for the same reason.
struct alignas(64) Instr {
  // ---------------- line 0: written for every instruction ----------------
  // --- identity ---
  fl_instr_id id = 0;
  uint64_t seq = 0;  // position in its stream (1-based)
  Stream* stream = nullptr;
  Engine* engine = nullptr;
  // --- work ---
  fl_host_fn fn = nullptr;
  void* user_data = nullptr;
  fl_release_fn cleanup = nullptr;
  // --- scheduling ---
  std::atomic<int32_t> pending{0};
  fl_status_t status = FL_OK;  // of a failure (written with `outcome`)

  // ---------------- line 1: written for every instruction ----------------
  // What a successor's submitter and completer touch of this record (refs, state, the
  // successor list) share this one line.
  std::atomic<int32_t> refs{0};
  // The state is also a futex word: threads waiting for a terminal state sleep on it
  // (Waits::sleep_until_terminal), counted in `sleepers` so that complete() makes the
  // wake-up system call only when someone sleeps.
  std::atomic<uint32_t> state{uint32_t(InstrState::kFree)};
  std::atomic<uint32_t> sleepers{0};
  // The terminal state complete() will publish: kFailed or kSkipped once the executing
  // thread decided so (mark_failed / mark_skipped), kDone otherwise. Not `state` itself:
  // a waiter that saw a terminal state early would return before cleanup and completion.
  // (Written before the terminal state is published with release, as the result fields.)
  InstrState outcome = InstrState::kDone;
  std::atomic<Edge*> succ_head{nullptr};  // successors; kSealed once completed (if it has operands)
  // Asynchronous instructions only: successors that wait for this one to be *issued*
  // (asynchronous work on another device stream, ordered on the device); kSealed once
  // issued or completed.
  std::atomic<Edge*> issue_succ_head{nullptr};
  std::atomic<Instr*> lane_next{nullptr};
  std::vector<Operand> operands;

  // ---------------- the rest: written when used ----------------
  std::string name;
  // What this instruction depends on, each entry holding a reference on `pred` until the
  // instruction completes: the last writer of every object it reads (kReads: its poison
  // decides whether this one is skipped) and every predecessor it waits for through an
  // edge (kEdge). Diagnostics read them to say what a stuck instruction waits for.
  struct Dep {
    static constexpr uint8_t kReads = 1;
    static constexpr uint8_t kEdge = 2;
    // Asynchronous → asynchronous on another device stream: when this instruction is
    // issued, the backend orders it after pred on the device (device.hpp), unless pred has
    // completed by then. No host wait.
    static constexpr uint8_t kIssueWait = 4;
    // With kIssueWait, pred on another lane: the backend orders this instruction after
    // pred with a value its stream waits for, whether or not pred is issued yet
    // (DeviceBackend::value_edge); no host wait for pred's issue.
    static constexpr uint8_t kValueWait = 8;
    Instr* pred;
    Object* obj;
    uint8_t flags;
  };
  std::vector<Dep> deps;
  // The edges this instruction waits through (see Edge). Keeps its capacity across reuse,
  // so steady-state submission allocates nothing.
  std::vector<Edge> edges;

  // --- asynchronous instructions ---
  // The device backend's own record for this instruction (its launch description and
  // completion-tracking state), or null; freed with `device_free` when this record is. The
  // engine never looks inside; DeviceBackend::recycle() clears it before reuse. It stays
  // attached across reuse, so a record that carried device work once allocates nothing
  // when it does again.
  void* device = nullptr;
  void (*device_free)(void*) = nullptr;
  // Asynchronous host instructions (SubmitArgs::async_start): the start, called by the lane
  // runner instead of fn; the next one in its stream's completion queue (AsyncCompletions,
  // under its mutex); where it is in that queue (AsyncPhase).
  void (*async_start)(Instr* i, void* user_data, bool skipped) noexcept = nullptr;
  Instr* async_next = nullptr;
  uint8_t async_phase = 0;

  // --- result of a failure ---
  std::string error;  // full message naming this instruction

  // --- the failure ledger (FailureLedger, ledger.hpp; core/engine/README.md, "Errors") ---
  // A failure and every instruction skipped because of it form one *family*, reported
  // once. `root` is the family's failed instruction (itself for a failed one; for a
  // skipped one, referenced until this record is recycled). The fields below are written
  // under the engine's ledger mutex.
  Instr* root = nullptr;
  Instr* next_member = nullptr;  // root: the chain of its skipped members (each pinned while linked)
  uint64_t skipped = 0;          // root: members skipped so far
  bool returned = false;         // root: the family was returned by a wait (or is no longer listed)
  bool listed = false;           // linked in its stream's list (and, a root, in the engine's)
  Instr* ledger_prev = nullptr;  // root: the engine's list of unreturned families, oldest first
  Instr* ledger_next = nullptr;
  Instr* stream_prev = nullptr;  // member or root: its stream's list of failed/skipped ones
  Instr* stream_next = nullptr;

  Instr() = default;
  Instr(const Instr&) = delete;
  Instr& operator=(const Instr&) = delete;
  ~Instr() {
    if (device != nullptr) device_free(device);
  }

  // Acquire by default: pairs with the release store of kIssued in mark_issued() and the
  // seq_cst store of the terminal state in complete() (the result fields are visible).
  InstrState load_state(std::memory_order mo = std::memory_order_acquire) const {
    return InstrState(state.load(mo));
  }
  void ref() { refs.fetch_add(1, std::memory_order_relaxed); }
  // Returns true when this dropped the last reference.
  // acq_rel pairs with the other holders' unref(): the last one sees their accesses first.
  bool unref() { return refs.fetch_sub(1, std::memory_order_acq_rel) == 1; }
  std::string describe() const;  // "'name' (#7, lane 1, host)"
};

static_assert(offsetof(Instr, status) + sizeof(Instr::status) <= 64 && offsetof(Instr, refs) >= 64 &&
                  offsetof(Instr, operands) + sizeof(Instr::operands) <= 128,
              "the fields every instruction writes fill the record's first two cache lines");

inline Edge* const kSealed = reinterpret_cast<Edge*>(uintptr_t(1));

}  // namespace flowlane::core
