// Task graphs (fl_taskgraph_*): nodes are C functions, edges say "after starts only once
// before has finished". run() checks for cycles (once per change of the graph), then runs
// every node once on a pool with per-node dependency counters: a finishing node decrements
// its successors' counters, submits all but one of the successors that became ready and
// runs the remaining one itself (no round trip through the pool for chains).
//
// Failure: the first node to return non-OK sets a stop flag; nodes that have not started
// by then are skipped (their functions are not called, but they still release their
// successors so that the run terminates), and run() returns that status with a message
// naming the node. Nodes already running finish normally.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sched/pool.hpp"
#include "sched/task.hpp"
#include "flowlane/flowlane.h"

namespace flowlane::sched {

class TaskGraph {
 public:
  using Fn = fl_task_fn;

  TaskGraph() = default;
  TaskGraph(const TaskGraph&) = delete;
  TaskGraph& operator=(const TaskGraph&) = delete;

  // Adds a node (name copied; may be null) and returns its id, dense from 0. Throws
  // flowlane::Error: FL_ERR_INVALID_ARGUMENT (fn null, graph running), FL_ERR_OUT_OF_RANGE
  // (more than 2^32 - 2 nodes).
  uint64_t add(Fn fn, void* user_data, const char* name);

  // `after` starts only once `before` has finished. Throws FL_ERR_OUT_OF_RANGE for unknown
  // ids, FL_ERR_INVALID_ARGUMENT for before == after or a running graph. A repeated edge
  // is allowed (it is stored twice and released twice: harmless).
  void precede(uint64_t before, uint64_t after);

  // Runs every node once on `pool`; the caller helps if it is one of pool's workers, or
  // takes part as one if it is no pool's worker and `caller_helps` (sched::Participation),
  // else it blocks. Returns FL_OK or a failure with the thread's last error set (cycle:
  // FL_ERR_INVALID_ARGUMENT naming a node on the cycle; concurrent run of this graph:
  // FL_ERR_INVALID_ARGUMENT; a failing node: its status).
  fl_status_t run(Pool& pool, bool caller_helps = true);

  size_t size() const { return nodes_.size(); }
  size_t edge_count() const { return edges_; }
  // Acquire pairs with the release store that ends run() (its Clear guard): a graph seen
  // idle has its run's writes to the graph visible.
  bool running() const { return running_.load(std::memory_order_acquire); }

  // "'name' (#3)" or "#3" for an unnamed node.
  std::string label(uint32_t id) const;

  // A node on a cycle, or -1 if the graph is acyclic (white-box tests; run() uses it).
  int64_t find_cycle_node() const;

 private:
  struct Node {
    Fn fn = nullptr;
    void* user_data = nullptr;
    std::string name;
    std::vector<uint32_t> succ;
    uint32_t num_preds = 0;
  };
  struct RunState;
  struct NodeTask : Task {
    TaskGraph* graph = nullptr;
    uint32_t id = 0;
  };
  static void run_node(Task* t);
  static constexpr uint32_t kNone = UINT32_MAX;

  std::vector<Node> nodes_;
  size_t edges_ = 0;
  bool validated_ = false;       // acyclic as of the last change (roots_ is current)
  std::vector<uint32_t> roots_;  // nodes without predecessors

  // Per-run state, sized at run(): counters and the tasks submitted to the pool.
  std::unique_ptr<std::atomic<uint32_t>[]> pending_;
  std::unique_ptr<NodeTask[]> tasks_;
  size_t prepared_for_ = 0;  // size of pending_/tasks_
  RunState* run_ = nullptr;  // valid during run()
  std::atomic<bool> running_{false};
};

}  // namespace flowlane::sched
