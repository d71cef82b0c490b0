// Instruction records: taken from and given back to their recycler (base/recycler.hpp),
// reset once the last reference is gone.
#include <string>
#include <vector>

#include "base/recycler.hpp"
#include "engine/engine.hpp"

namespace flowlane::core {

namespace {
// A record that once needed more room than this gives it back when recycled, so that one
// instruction with a huge reader list does not pin that memory in the pool forever.
constexpr size_t kKeptCapacity = 1024;
}  // namespace

Instr* Engine::new_pooled_instr() {
  Instr* i = Recycler<Instr>::get();
  i->engine = this;
  return i;
}

void Engine::discard(Instr* i) {
  i->operands.clear();
  if (i->seq == kScratchSeq) return;  // a capture's own record (Capture::scratch)
  i->deps.clear();
  recycle(i);
}

void Engine::return_unused(Instr* i) {
  if (!i->operands.empty()) i->operands.clear();
  if (i->seq == kScratchSeq) return;  // a capture's own record (Capture::scratch)
  Recycler<Instr>::put(i);
}

void Engine::recycle(Instr* i) {
  // Every dependent that could read the device record has completed (they held references).
  if (i->device != nullptr) services_.device->recycle(i);
  // The first two lines of the record (see Instr) are written anyway; the rest only when
  // not already in its reset state, so that a plain instruction's record moves back to
  // the submitting core with two lines written.
  i->state.store(uint32_t(InstrState::kFree), std::memory_order_relaxed);
  i->outcome = InstrState::kDone;
  i->succ_head.store(nullptr, std::memory_order_relaxed);
  i->issue_succ_head.store(nullptr, std::memory_order_relaxed);
  i->status = FL_OK;
  if (!i->edges.empty()) i->edges.clear();
  if (i->edges.capacity() > kKeptCapacity) std::vector<Edge>().swap(i->edges);
  if (i->deps.capacity() > kKeptCapacity) std::vector<Instr::Dep>().swap(i->deps);
  if (!i->error.empty()) i->error.clear();
  if (i->root != nullptr) {
    if (i->root != i && i->root->unref()) recycle(i->root);  // a skipped one's family
    i->root = nullptr;
  }
  if (i->skipped != 0) i->skipped = 0;
  if (i->returned) i->returned = false;
  Recycler<Instr>::put(i);
}

std::string Instr::describe() const {
  std::string s = "'";
  s += name.empty() ? std::string("<unnamed>") : name;
  s += "' (#" + std::to_string(id) + ", " + (stream ? stream->describe() : std::string("?")) + ")";
  return s;
}

}  // namespace flowlane::core
