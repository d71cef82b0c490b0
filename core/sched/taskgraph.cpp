// Task graph execution with dependency counters. See sched/taskgraph.hpp.
#include "sched/taskgraph.hpp"

#include <optional>
#include <string>

#include "base/error.hpp"
#include "sched/latch.hpp"

namespace flowlane::sched {

struct TaskGraph::RunState {
  explicit RunState(Pool& p, int64_t n) : pool(p), latch(n), context(current_context()) {}
  Pool& pool;
  Latch latch;                              // one count per node
  std::atomic<bool> stop{false};            // a node failed: skip unstarted ones
  std::atomic<int64_t> failed_node{-1};     // the first failing node (CAS winner)
  fl_status_t failed_status = FL_OK;        // written by the CAS winner only
  const void* context;                      // run()'s caller's: current while tasks run
};

uint64_t TaskGraph::add(Fn fn, void* user_data, const char* name) {
  if (running()) fail(FL_ERR_INVALID_ARGUMENT, "fl_taskgraph_add: the graph is running");
  if (fn == nullptr) fail(FL_ERR_INVALID_ARGUMENT, "fl_taskgraph_add: fn is NULL");
  if (nodes_.size() >= size_t(kNone) - 1)
    fail(FL_ERR_OUT_OF_RANGE, "fl_taskgraph_add: a graph holds at most 2^32 - 2 nodes");
  Node n;
  n.fn = fn;
  n.user_data = user_data;
  if (name != nullptr) n.name = name;
  nodes_.push_back(std::move(n));
  validated_ = false;
  return nodes_.size() - 1;
}

void TaskGraph::precede(uint64_t before, uint64_t after) {
  if (running()) fail(FL_ERR_INVALID_ARGUMENT, "fl_taskgraph_precede: the graph is running");
  uint64_t n = nodes_.size();
  if (before >= n || after >= n)
    fail(FL_ERR_OUT_OF_RANGE, "fl_taskgraph_precede: node " + std::to_string(before >= n ? before : after) +
                                  " does not exist (this graph has " + std::to_string(n) + " nodes)");
  if (before == after)
    fail(FL_ERR_INVALID_ARGUMENT,
         "fl_taskgraph_precede: a node cannot precede itself (" + label(uint32_t(before)) + ")");
  nodes_[before].succ.push_back(uint32_t(after));
  nodes_[after].num_preds += 1;
  ++edges_;
  validated_ = false;
}

std::string TaskGraph::label(uint32_t id) const {
  const std::string& name = nodes_[id].name;
  std::string out;
  if (!name.empty()) out.append("'").append(name).append("' (");
  out.append("#").append(std::to_string(id));
  if (!name.empty()) out.append(")");
  return out;
}

int64_t TaskGraph::find_cycle_node() const {
  // Kahn's algorithm; whatever is left has a predecessor that is also left.
  size_t n = nodes_.size();
  std::vector<uint32_t> indeg(n);
  std::vector<uint32_t> ready;
  for (size_t i = 0; i < n; ++i) {
    indeg[i] = nodes_[i].num_preds;
    if (indeg[i] == 0) ready.push_back(uint32_t(i));
  }
  size_t done = 0;
  while (!ready.empty()) {
    uint32_t v = ready.back();
    ready.pop_back();
    ++done;
    for (uint32_t s : nodes_[v].succ)
      if (--indeg[s] == 0) ready.push_back(s);
  }
  if (done == n) return -1;
  // Walk backwards through left-over predecessors: after n steps we are on a cycle (a walk
  // of n steps repeats a node, and everything after the first repeat is on the cycle).
  std::vector<uint32_t> left_pred(n, kNone);
  for (size_t v = 0; v < n; ++v) {
    if (indeg[v] == 0) continue;
    for (uint32_t s : nodes_[v].succ)
      if (indeg[s] != 0 && left_pred[s] == kNone) left_pred[s] = uint32_t(v);
  }
  uint32_t v = 0;
  while (indeg[v] == 0) ++v;
  for (size_t step = 0; step < n; ++step) v = left_pred[v];
  return v;
}

void TaskGraph::run_node(Task* t) {
  auto* nt = static_cast<NodeTask*>(t);
  TaskGraph* g = nt->graph;
  RunState* rs = g->run_;  // written before the first submit: visible through the pool
  uint32_t id = nt->id;
  int64_t finished = 0;  // nodes of this chain, counted down on the latch at once
  // The caller of run() waits for every node, so its context outlives them (restoring the
  // previous one at the end reads nothing of rs).
  ContextScope context(rs->context);
  for (;;) {
    const Node& node = g->nodes_[id];
    // Relaxed: a node released by the failing node (or by any node that finished after
    // it) is ordered after the store by the counter chain; an unrelated node that started
    // concurrently with the failure may run, which is allowed.
    if (!rs->stop.load(std::memory_order_relaxed)) {
      fl_status_t st = node.fn(node.user_data);
      if (st != FL_OK) {
        int64_t expected = -1;
        if (rs->failed_node.compare_exchange_strong(expected, id, std::memory_order_relaxed))
          rs->failed_status = st;  // read by run() after the latch (acquire)
        rs->stop.store(true, std::memory_order_relaxed);
      }
    }
    uint32_t next = kNone;
    for (uint32_t s : node.succ) {
      // acq_rel: the last predecessor to finish sees every other predecessor's writes
      // (release) and passes them on to the successor it starts (acquire).
      // Pairs with the other predecessors' fetch_sub on pending_[s] here (reset relaxed in
      // run(), before the roots are published by submit()).
      if (g->pending_[s].fetch_sub(1, std::memory_order_acq_rel) == 1) {
        if (next == kNone)
          next = s;  // run it on this thread, below
        else
          rs->pool.submit(&g->tasks_[s]);
      }
    }
    ++finished;
    if (next == kNone) {
      // One RMW per chain instead of per node (the latch is shared by every worker). It
      // is the last access to g and rs: run() may return as soon as the count hits zero.
      rs->latch.count_down(finished);
      return;
    }
    id = next;
  }
}

fl_status_t TaskGraph::run(Pool& pool, bool caller_helps) {
  if (running_.exchange(true, std::memory_order_acquire))  // pairs with the release below
    return report(FL_ERR_INVALID_ARGUMENT,
                  "fl_taskgraph_run: this graph is already running (a graph runs on one thread at a time)");
  struct Clear {
    std::atomic<bool>& flag;
    ~Clear() { flag.store(false, std::memory_order_release); }  // pairs with the exchange above
  } clear{running_};

  if (!validated_) {
    int64_t v = find_cycle_node();
    if (v >= 0)
      return report(FL_ERR_INVALID_ARGUMENT,
                    "fl_taskgraph_run: the graph has a cycle through task " + label(uint32_t(v)));
    // Built aside and committed only once complete: an allocation failure here must not
    // leave a graph marked valid with no roots (its next run would wait forever).
    std::vector<uint32_t> roots;
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i].num_preds == 0) roots.push_back(uint32_t(i));
    roots_.swap(roots);
    validated_ = true;
  }
  size_t n = nodes_.size();
  if (n == 0) return FL_OK;
  if (prepared_for_ != n) {
    pending_.reset(new std::atomic<uint32_t>[n]);
    tasks_.reset(new NodeTask[n]);
    for (size_t i = 0; i < n; ++i) {
      tasks_[i].run = &TaskGraph::run_node;
      tasks_[i].graph = this;
      tasks_[i].id = uint32_t(i);
    }
    prepared_for_ = n;
  }
  for (size_t i = 0; i < n; ++i) pending_[i].store(nodes_[i].num_preds, std::memory_order_relaxed);

  RunState rs(pool, int64_t(n));
  run_ = &rs;
  // A program thread takes part in the run (core/sched/README.md, "Program threads"): the
  // roots go to its own deque, and it runs tasks while it waits.
  // The run is a region of its own, so that the wait helps with the graph's tasks only.
  std::optional<RegionScope> region;
  std::optional<Participation> part;
  if (caller_helps && Pool::current() == nullptr) {
    region.emplace(RegionScope::kFresh);
    part.emplace(pool);
  }
  // pool.submit() publishes everything above to the worker that runs each root. From
  // outside the pool (a caller that does not take part), many roots are handed to one
  // spawner task instead: pushing onto a worker's own deque is much cheaper than the
  // injection queue, and the other workers steal from there.
  struct Spawner : Task {
    TaskGraph* graph;
  } spawner;
  if (!pool.on_worker() && roots_.size() > 1) {
    spawner.graph = this;
    spawner.run = [](Task* t) {
      TaskGraph* g = static_cast<Spawner*>(t)->graph;
      // The spawner holds one latch count of its own (added below), so the run cannot
      // end while it is still submitting roots; its count_down is its last access.
      RunState* rs = g->run_;
      for (uint32_t r : g->roots_) rs->pool.submit(&g->tasks_[r]);
      rs->latch.count_down();
    };
    rs.latch.add(1);
    pool.submit(&spawner);
  } else {
    for (uint32_t r : roots_) pool.submit(&tasks_[r]);
  }
  rs.latch.wait();
  run_ = nullptr;

  int64_t failed = rs.failed_node.load(std::memory_order_relaxed);
  if (failed < 0) return FL_OK;
  return report(rs.failed_status, "fl_taskgraph_run: task " + label(uint32_t(failed)) + " failed with " +
                                      fl_status_name(rs.failed_status) + "; tasks not yet started were skipped");
}

}  // namespace flowlane::sched
