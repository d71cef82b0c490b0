// The parallel schedule of a program (core/engine/README.md, "The schedule"): a DAG over
// units (nodes, or groups of device work) as successor lists, a topological order of it,
// and its chains, the tasks of a parallel replay. Used by Capture::finish for programs with
// device work and by Program::build_schedule, at the first launch that runs in parallel,
// for host-only programs.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "engine/program.hpp"

namespace flowlane::core {

// A DAG over units, as successor lists.
struct UnitGraph {
  std::vector<uint32_t> code;        // per unit: a node index, or Program::kDeviceUnit | u
  std::vector<uint32_t> succ_begin;  // count + 1
  std::vector<uint32_t> succ;
  std::vector<uint32_t> npreds;
  std::vector<uint32_t> only_pred;   // the predecessor of a unit that has exactly one
  std::vector<uint32_t> order;       // a topological order
  uint32_t count() const { return uint32_t(code.size()); }
  uint32_t outdeg(uint32_t u) const { return succ_begin[u + 1] - succ_begin[u]; }
};

// Fills g's successor lists from `edges` (pairs of units, no repeats).
void link(UnitGraph& g, const std::vector<std::pair<uint32_t, uint32_t>>& edges);
// Kahn's algorithm into g.order. Throws FL_ERR_INTERNAL on a cycle (excluded by construction).
void sort_topologically(UnitGraph& g);
// The chains of g (in g.order) as p's tasks: a unit whose only predecessor has it as its
// only successor runs right after that predecessor, in the same task.
void compile_tasks(const UnitGraph& g, Program& p);

}  // namespace flowlane::core
