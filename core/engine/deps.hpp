// Recording an instruction's dependencies (core/engine/README.md, "Dependency rules",
// "Recording", "Who launches an instruction"). Per object, the engine keeps the last writer
// and the readers since it:
//   read  -> waits for the last writer (RAW);
//   write -> waits for the last writer (WAW) and every reader since it (WAR), then the
//            reader list restarts from this write.
// Edges between instructions that run in order on the same lane are not recorded: lane
// order already implies them (the lane's submit lock, held by the caller, makes queue order
// and recording order agree). Nor are edges from predecessors that have completed.
//
// Serializable submissions: an instruction's operands are recorded atomically with respect
// to every other submission that shares any of its objects. record() takes every operand
// object's lock in one global order (ascending address: merge_operands() sorts them), and
// only then takes the instruction's id and records; so two submissions sharing objects are
// ordered the same way on all of them, dependencies only point to earlier ids, and no cycle
// can come from the engine. Nothing is allocated while anything is published: a first pass
// reserves room for every dependency, edge and reader-list entry (a std::bad_alloc unwinds
// through the locks with nothing published); the commit pass cannot throw.
//
// Owns: the ids (next_id_, in recording order); every object's dependency state
// (Object::last_writer, Object::readers, under Object::lock); what the submitter writes into
// the record while it records (Instr::id, deps, edges, and one unit of Instr::pending per
// edge); each operand's reference on its object (dropped at completion).
// Calls: Engine::observer() (Observer::on_edge), Engine::recycle() (references it drops).
// Called by: Engine::enqueue (submit.cpp), which holds the lane's submit lock.
// Locks: the operand objects' spin locks, taken inside the lane's submit lock, in ascending
// address order, released before record() returns.
// Atomics it shares, and with whom:
//   pred->succ_head / issue_succ_head: the release CAS that publishes an edge (push_edge)
//     with the acq_rel exchange that seals the list in Executor::complete / mark_issued; a
//     sealed list (read with acquire) means pred's result is visible and succ need not wait.
//   pred->state: acquire loads with Executor::complete's seq_cst store of the terminal
//     state (a completed predecessor gets no edge).
//   succ->pending: relaxed increment per edge, before it is published; the submitter's own
//     unit keeps pending above zero whatever order a completer's decrement takes.
//   next_id_: acq_rel fetch_add under the operands' locks (relaxed for an instruction
//     without operands, which is nobody's predecessor), pairing with the other submitters'
//     (the CUDA backend's value-edge rule: what a submitter did before taking a smaller id
//     is visible to one that takes a larger one); next_id()'s acquire load pairs with no
//     release: fl_engine_synchronize compares it with the ids of ledger entries, which it
//     reads under the ledger's mutex.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "base/cpu.hpp"
#include "engine/instr.hpp"
#include "flowlane/flowlane.h"

namespace flowlane::core {

class Engine;

class Recorder {
 public:
  explicit Recorder(Engine& e) : engine_(e) {}

  // Takes i's id and records i's operands (merged and sorted: merge_operands()), under
  // every operand object's lock: the edges from their last writers and readers, and i as
  // their new last writer or a reader. The caller holds i's lane's submit lock and set
  // i->pending to its submitter's and lane's units. May throw std::bad_alloc before
  // anything is published (no id is taken then).
  void record(Instr* i) {
    if (i->operands.empty()) {
      // Nothing to lock, reserve or record (and nothing here can throw): only the id.
      i->id = next_id_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    record_operands(i);
  }
  // The id the next recorded instruction will get: every smaller one is recorded.
  fl_instr_id next_id() const { return next_id_.load(std::memory_order_acquire); }  // see the pairs above

 private:
  void record_operands(Instr* i);

  Engine& engine_;
  // Written by submitters for every instruction: a cache line of its own.
  alignas(kCacheLine) std::atomic<uint64_t> next_id_{1};
};

// Merges operands that name the same object into one, with the union of their accesses,
// sorted by object address (the order record() locks them in).
void merge_operands(std::vector<Operand>& v);

}  // namespace flowlane::core
