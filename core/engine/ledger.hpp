// The failure ledger: which failure a wait returns (core/engine/README.md, "Errors"; the
// rules users see are in the header, "How failures are reported").
//
// A failed instruction is the root of a *family*; every instruction skipped because an input
// it reads was poisoned by that failure (directly or through other skipped ones) joins the
// root's family. A family is returned once, by the first wait that covers one of its members
// (or observes its poison through fl_object_wait), with the root's message and the number of
// instructions skipped because of it. Families not yet returned are listed oldest first,
// engine-wide (roots) and per stream (every member), so a wait finds the one to return at the
// head of a list: O(1) per call, whatever the number of failures or dependents. Returning a
// family unlinks its members (each was linked once), and a returned family holds no ledger
// memory: a loop of failures that are each observed keeps the ledger empty. The ledger is not
// bounded otherwise: an unreturned family pins its members' records until a wait returns it
// or the engine is destroyed, so no failure goes unreported.
//
// Beside the families, each stream keeps an outcome history: its last
// FL_INSTR_OUTCOME_HISTORY failed, skipped or cancelled instructions, in completion (= id)
// order, for fl_instr_query and fl_instr_wait_for.
//
// Owns: the engine's list of unreturned families; each stream's StreamFailures (below); the
// ledger fields of every record (Instr::root .. Instr::stream_next, instr.hpp). All under
// one mutex, mu_, taken with no other engine lock held.
// Calls: Engine::recycle() for the records whose last reference it drops (under mu_; the
// record pool takes only its own depot mutex), report() (base/error.hpp).
// Called by: Executor::complete (record), Waits (synchronize, wait_instr, query, object
// waits), CancelDrain::drain, engine destroy (clear) and the state dump (unreturned).
// Shares no atomic: a failure is recorded before its instruction's terminal state is
// published (Executor::complete), so a dependent skipped because of it finds its family
// listed; waits read the ledger only after the completion they wait for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "flowlane/flowlane.h"

namespace flowlane::core {

class Engine;
struct Instr;
struct Stream;

// A stream's part of the ledger (Stream::failures), under the ledger's mutex.
struct StreamFailures {
  // Its failed and skipped instructions whose family is not returned yet, oldest first
  // (Instr::stream_prev/next).
  Instr* failed_head = nullptr;
  Instr* failed_tail = nullptr;
  // The outcome history, each entry referenced; ids up to `forgotten_upto` may have been
  // dropped from it.
  std::deque<Instr*> outcomes;
  fl_instr_id forgotten_upto = 0;
};

class FailureLedger {
 public:
  explicit FailureLedger(Engine& e) : engine_(e) {}

  // Executor::complete, for a failed, skipped or cancelled instruction (its outcome, status,
  // error and root set), before its terminal state is published.
  void record(Instr* i);
  // fl_object_wait observed the poison of root's family: it counts as returned.
  void family_returned(Instr* root);

  // Each take_* returns the family it picks (marked returned, unlinked): its status, with
  // the calling thread's message set to the member's message and the skipped count;
  // FL_OK when there is none.
  // The oldest unreturned family (fl_engine_drain).
  fl_status_t take_oldest();
  // The oldest family whose root's id is below `before` (fl_engine_synchronize).
  fl_status_t take_oldest_before(fl_instr_id before);
  // The oldest listed member of s with a position (Instr::seq) up to `upto_seq`
  // (fl_stream_synchronize).
  fl_status_t take_of_stream(Stream* s, uint64_t upto_seq);
  // fl_instr_wait_for, once instruction `id` of s completed: FL_OK, or its own failure
  // (message set), whose family then counts as returned.
  fl_status_t take_outcome(Stream* s, fl_instr_id id);

  // fl_instr_query for an instruction of s that has completed.
  fl_instr_state_t completed_state(const Stream* s, fl_instr_id id) const;
  // Families not returned yet, and the oldest one's message (for dumps).
  size_t unreturned(std::string* oldest) const;
  // Engine destroy, once everything completed: drops the unreturned families (never
  // returned: dropped) and the outcome histories of `streams` (every stream of the engine).
  void clear(const std::vector<Stream*>& streams);

 private:
  // Under mu_: unlinks the family of `root` and drops the ledger's references.
  void unlink_family(Instr* root);
  template <class Pick>
  fl_status_t take(Pick&& pick);

  Engine& engine_;
  mutable std::mutex mu_;
  // Unreturned families, oldest first (Instr::ledger_prev/next of their roots).
  Instr* head_ = nullptr;
  Instr* tail_ = nullptr;
  size_t size_ = 0;
};

}  // namespace flowlane::core
