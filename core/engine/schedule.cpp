// The parallel schedule of a program (engine/schedule.hpp): successor lists over units,
// their topological order, and the chains a parallel replay runs as tasks.
#include "engine/schedule.hpp"

#include <numeric>

#include "base/error.hpp"

namespace flowlane::core {

// Fills g's successor lists from `edges` (pairs of units, no repeats).
void link(UnitGraph& g, const std::vector<std::pair<uint32_t, uint32_t>>& edges) {
  const uint32_t n = g.count();
  g.succ_begin.assign(n + 1, 0);
  g.npreds.assign(n, 0);
  g.only_pred.assign(n, kNoNode);
  for (const auto& [p, s] : edges) {
    ++g.succ_begin[p + 1];
    ++g.npreds[s];
    g.only_pred[s] = p;  // meaningful only where npreds is 1
  }
  std::partial_sum(g.succ_begin.begin(), g.succ_begin.end(), g.succ_begin.begin());
  g.succ.resize(edges.size());
  std::vector<uint32_t> fill(g.succ_begin.begin(), g.succ_begin.end() - 1);
  for (const auto& [p, s] : edges) g.succ[fill[p]++] = s;
}

// Kahn's algorithm. Throws FL_ERR_INTERNAL on a cycle (the construction excludes one).
void sort_topologically(UnitGraph& g) {
  const uint32_t n = g.count();
  std::vector<uint32_t> indeg(g.npreds);
  g.order.clear();
  g.order.reserve(n);
  for (uint32_t u = 0; u < n; ++u)
    if (indeg[u] == 0) g.order.push_back(u);
  for (size_t k = 0; k < g.order.size(); ++k) {
    const uint32_t u = g.order[k];
    for (uint32_t x = g.succ_begin[u]; x < g.succ_begin[u + 1]; ++x)
      if (--indeg[g.succ[x]] == 0) g.order.push_back(g.succ[x]);
  }
  if (g.order.size() != n) fail(FL_ERR_INTERNAL, "fl_capture_end: the units of the program form a cycle");
}

// The chains: a unit whose only predecessor has it as its only successor runs right after
// that predecessor, in the same task (a parallel replay touches no atomic inside a chain).
// A task is released by the tasks ending in its first unit's predecessors.
void compile_tasks(const UnitGraph& g, Program& p) {
  std::vector<uint32_t>& chain = p.chain_;
  std::vector<uint32_t>& task_succ = p.task_succ_;
  std::vector<uint32_t>& roots = p.roots_;
  std::unique_ptr<Program::TaskRec[]>& tasks = p.tasks_;
  uint32_t& ntasks = p.ntasks_;
  const uint32_t n = g.count();
  std::vector<uint32_t> task_of(n), next(n, kNoNode), heads, tails;
  for (uint32_t u : g.order) {
    const uint32_t pred = g.only_pred[u];
    if (g.npreds[u] == 1 && g.outdeg(pred) == 1) {  // pred is its chain's tail: u follows it
      const uint32_t t = task_of[pred];
      next[tails[t]] = u;
      tails[t] = u;
      task_of[u] = t;
    } else {
      task_of[u] = uint32_t(heads.size());
      heads.push_back(u);
      tails.push_back(u);
    }
  }
  ntasks = uint32_t(heads.size());
  tasks.reset(new Program::TaskRec[ntasks]);
  chain.clear();
  chain.reserve(n);
  task_succ.clear();
  roots.clear();
  for (uint32_t t = 0; t < ntasks; ++t) {
    Program::TaskRec& tr = tasks[t];
    tr.begin = uint32_t(chain.size());
    for (uint32_t u = heads[t]; u != kNoNode; u = next[u]) chain.push_back(g.code[u]);
    tr.end = uint32_t(chain.size());
    tr.succ_begin = uint32_t(task_succ.size());
    const uint32_t tail = tails[t];
    for (uint32_t x = g.succ_begin[tail]; x < g.succ_begin[tail + 1]; ++x) task_succ.push_back(task_of[g.succ[x]]);
    tr.succ_end = uint32_t(task_succ.size());
    tr.preds = g.npreds[heads[t]];
    if (tr.preds == 0) roots.push_back(t);
  }
}


void Program::build_schedule() {
  // Host work only: the units are the nodes, and capture order is a topological order.
  UnitGraph g;
  const uint32_t n = size();
  g.code.resize(n);
  std::iota(g.code.begin(), g.code.end(), 0u);
  link(g, edges_);
  g.order = g.code;
  compile_tasks(g, *this);
  finish_schedule();
}

void Program::finish_schedule() {
  for (uint32_t t = 0; t < ntasks_; ++t) {
    tasks_[t].program = this;
    tasks_[t].run = &Program::run_task;
  }
  if (ntasks_ > 1) run_.pending.reset(new std::atomic<uint32_t>[ntasks_]);
  // Release: pairs with the acquire load in info() (a report of the task count).
  schedule_built_.store(true, std::memory_order_release);
}

}  // namespace flowlane::core
