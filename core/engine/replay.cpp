// Replaying a program (engine/program.hpp; core/engine/README.md, "Capture and replay"): a
// launch's instruction runs every node of its program once, in dependency order — in
// capture order on the launching thread when the pool has one worker or the program has no
// parallelism, else as chains (tasks) released by per-task counters on the pool — with
// eager failure semantics inside (per-node poison and skip), and concludes with the
// launch's outcome.
#include <algorithm>
#include <exception>
#include <optional>
#include <string>
#include <thread>

#include "engine/engine.hpp"
#include "engine/program.hpp"
#include "engine/program_device.hpp"

namespace flowlane::core {

namespace {

constexpr uint8_t kRan = 0;
constexpr uint8_t kFailed = 1;
constexpr uint8_t kSkipped = 2;
// A device unit's state in a launch (Run::unit_state).
constexpr uint8_t kUnitIdle = 0;      // not issued in this launch (skipped, or not reached yet)
constexpr uint8_t kUnitIssued = 1;    // on the device
constexpr uint8_t kUnitSettling = 2;  // a waiter saw it end and writes its nodes' statuses
constexpr uint8_t kUnitDone = 3;      // ended; its nodes' statuses are written

constinit FL_TLS thread_local ReplayFrame* t_frame = nullptr;

}  // namespace

ReplayScope::ReplayScope(ReplayFrame& f) : f_(f) {
  f.saved = t_frame;
  t_frame = &f;
}
ReplayScope::~ReplayScope() { t_frame = f_.saved; }

ReplayFrame* replay_frame(const void* ctx) {
  // Only this thread's frames: a context is valid inside its function, on its thread.
  for (ReplayFrame* f = t_frame; f != nullptr; f = f->saved)
    if (static_cast<const void*>(f) == ctx) return f;
  return nullptr;
}

fl_status_t replay_launch(fl_instr_ctx_t* ctx, void* program) {
  return static_cast<Program*>(program)->replay(reinterpret_cast<Instr*>(ctx));
}

// Runs nodes and device units of one launch on the calling thread (one per thread and
// task run), with the frame its functions receive as their context.
class Program::Runner {
 public:
  Runner(Program& p) : p_(p), r_(p.run_), nodes_(p.nodes_.data()) {
    frame_.program = &p;
    frame_.launch = p.run_.launch;
  }

  template <bool kObserved>
  void run_unit(uint32_t code) {
    if ((code & kDeviceUnit) != 0) [[unlikely]]
      run_device_unit(code & ~kDeviceUnit);
    else
      run_node<kObserved>(code);
  }

  // Host node k: waits for the device work it depends on, checks its inputs' poison (only
  // once something went wrong in this launch), then calls its function.
  template <bool kObserved>
  void run_node(uint32_t k) {
    if (!p_.dev_wait_begin_.empty()) [[unlikely]]
      wait_device(k);
    // Relaxed: see Program's header (a dependency that failed is ordered before us).
    if (r_.trouble.load(std::memory_order_relaxed) && p_.poisoned(k)) [[unlikely]] {
      r_.status[k] = kSkipped;
      return;
    }
    const ProgramNode& nd = nodes_[k];
    frame_.node = k;
    if constexpr (kObserved) r_.observer->on_replay_node(true, p_.node_name(k), k, FL_OK);
    fl_status_t st;
    try {
      st = nd.fn(frame_.ctx(), nd.user_data);
    } catch (const std::exception& ex) {
      st = FL_ERR_INSTRUCTION_FAILED;
      frame_.error = std::string("C++ exception: ") + ex.what();
    } catch (...) {
      st = FL_ERR_INSTRUCTION_FAILED;
      frame_.error = "unknown C++ exception";
    }
    if (st != FL_OK) [[unlikely]]
      p_.node_failed(k, st, frame_.error);
    if (!frame_.error.empty()) [[unlikely]]
      frame_.error.clear();  // a text set before success is not a failure
    if constexpr (kObserved) r_.observer->on_replay_node(false, p_.node_name(k), k, st);
  }

  ReplayFrame& frame() { return frame_; }

 private:
  // Device unit du: issued on the program's device stream unless an input of one of its
  // nodes is poisoned (then every node of it is skipped: a graph runs whole or not at all).
  void run_device_unit(uint32_t du) {
    const uint32_t* first = p_.dev_unit_nodes_.data() + p_.dev_unit_begin_[du];
    const uint32_t* last = p_.dev_unit_nodes_.data() + p_.dev_unit_begin_[du + 1];
    if (r_.trouble.load(std::memory_order_relaxed)) {  // relaxed: as in run_node
      bool poisoned = false;
      for (const uint32_t* v = first; v != last && !poisoned; ++v) poisoned = p_.poisoned(*v);
      if (poisoned) {
        for (const uint32_t* v = first; v != last; ++v) r_.status[*v] = kSkipped;
        return;
      }
    }
    frame_.node = *first;  // a device function's context
    std::string detail;
    fl_status_t st = p_.device_api_->issue_unit(p_.device_state_, du, frame_.ctx(), &detail);
    if (st != FL_OK) p_.unit_failed(du, st, !frame_.error.empty() ? frame_.error : detail);  // a device function's text
    if (!frame_.error.empty()) frame_.error.clear();
    // Release: pairs with the acquire loads in Program::wait_unit() (a waiter of another
    // thread sees what the device part recorded for the unit, or its nodes' statuses).
    r_.unit_state[du].store(st == FL_OK ? kUnitIssued : kUnitDone, std::memory_order_release);
  }

  void wait_device(uint32_t k) {
    for (uint32_t x = p_.dev_wait_begin_[k]; x < p_.dev_wait_begin_[k + 1]; ++x) p_.wait_unit(p_.dev_wait_[x]);
  }

  Program& p_;
  Run& r_;
  const ProgramNode* nodes_;
  ReplayFrame frame_;
};

// ---------------------------------------------------------------------------------------
// Failures

const char* Program::node_name(uint32_t k) const {
  return !name_at_.empty() && name_at_[k] != 0 ? names_.c_str() + name_at_[k] - 1 : "<unnamed>";
}

bool Program::poisoned(uint32_t k) const {
  for (uint32_t x = read_begin(k); x < read_end_[k]; ++x) {
    const uint32_t v = reads_[x];
    if ((v & kExternal) != 0 ? run_.ext_poison[v & ~kExternal] != nullptr : run_.status[v] != kRan) return true;
  }
  return false;
}

void Program::node_failed(uint32_t k, fl_status_t st, const std::string& detail) {
  run_.status[k] = kFailed;
  {
    std::lock_guard<std::mutex> lock(run_.mu);
    try {
      run_.errors.push_back({k, {st, detail.empty() ? std::string(fl_status_name(st)) : detail}});
    } catch (...) {
      // Out of memory: the status still says it failed; the message names no detail.
    }
  }
  run_.trouble.store(true, std::memory_order_relaxed);  // see Program's header
}

void Program::unit_failed(uint32_t du, fl_status_t st, const std::string& detail) {
  for (uint32_t x = dev_unit_begin_[du]; x < dev_unit_begin_[du + 1]; ++x) {
    const uint32_t v = dev_unit_nodes_[x];
    if (x == dev_unit_begin_[du])
      node_failed(v, st, detail);
    else
      run_.status[v] = kFailed;
  }
}

void Program::wait_unit(uint32_t du) {
  std::atomic<uint8_t>& state = run_.unit_state[du];
  // Acquire pairs with the release stores of kUnitIssued / kUnitDone (run_device_unit and
  // below): the device part's record of the unit, or its nodes' statuses, are visible.
  uint8_t s = state.load(std::memory_order_acquire);
  if (s == kUnitIdle || s == kUnitDone) return;
  if (s == kUnitIssued) {
    std::string detail;
    fl_status_t st = device_api_->wait_unit(device_state_, du, &detail);
    // One waiter settles the unit (others may be waiting for it at once).
    uint8_t issued = kUnitIssued;
    // acq_rel: pairs like the load above; kUnitDone's release store below publishes.
    if (state.compare_exchange_strong(issued, kUnitSettling, std::memory_order_acq_rel)) {
      if (st != FL_OK) unit_failed(du, st, detail);
      // Release: pairs with the acquire loads here (a unit seen done has its nodes'
      // statuses written).
      state.store(kUnitDone, std::memory_order_release);
      return;
    }
  }
  // Another waiter settles it: its nodes' statuses are written once it is done.
  // Acquire: pairs with the release store of kUnitDone above.
  while (state.load(std::memory_order_acquire) != kUnitDone) std::this_thread::yield();
}

void Program::prepare_external_poison(Instr* launch) {
  // The launch's dependencies on the last writers of what it reads (one entry per object:
  // Recorder does not merge a launch's entries), whose state is final: the launch runs
  // after them.
  for (const Instr::Dep& d : launch->deps) {
    if ((d.flags & Instr::Dep::kReads) == 0) continue;
    const InstrState ps = d.pred->load_state();
    if (ps != InstrState::kFailed && ps != InstrState::kSkipped) continue;
    auto it = std::lower_bound(ext_.begin(), ext_.end(), std::make_pair(d.obj, uint32_t(0)));
    if (it == ext_.end() || it->first != d.obj) continue;  // read only after the program writes it
    run_.ext_poison[it->second] = d.pred;
    run_.trouble.store(true, std::memory_order_relaxed);  // before any node runs (single thread)
  }
}

// ---------------------------------------------------------------------------------------
// The launch

fl_status_t Program::replay(Instr* launch) {
  Run& r = run_;
  r.launch = launch;
  r.observer = engine_.observer();
  r.context = sched::current_context();  // the launch's callback frame
  r.progress.store(0, std::memory_order_relaxed);
  running_id_.store(launch->id, std::memory_order_relaxed);  // for dumps only
  for (uint32_t du = 0; du < device_units_; ++du) r.unit_state[du].store(kUnitIdle, std::memory_order_relaxed);
  prepare_external_poison(launch);
  if (runs_in_parallel())
    run_parallel();
  else
    run_sequential();
  for (uint32_t du = 0; du < device_units_; ++du) wait_unit(du);  // the launch ends with its device work
  fl_status_t st = conclude(launch);
  running_id_.store(0, std::memory_order_relaxed);
  launches_.fetch_add(1, std::memory_order_relaxed);
  return st;
}

bool Program::runs_in_parallel() {
  if (engine_.pool().size() < 2) return false;  // one worker: capture order on this thread
  // Relaxed: only launches write it, one at a time (ordered by the program's phony object).
  if (!schedule_built_.load(std::memory_order_relaxed)) {
    try {
      build_schedule();
    } catch (...) {
      return false;  // out of memory: capture order, on this thread, needs nothing more
    }
  }
  return ntasks_ > 1;
}

void Program::run_sequential() {
  Runner run(*this);
  ReplayScope scope(run.frame());
  const uint32_t n = size();
  Run& r = run_;
  if (order_.empty()) {  // host work only: capture order
    if (r.observer == nullptr) {
      for (uint32_t k = 0; k < n; ++k) {
        run.run_node<false>(k);
        r.progress.store(k + 1, std::memory_order_relaxed);  // for dumps only
      }
    } else {
      for (uint32_t k = 0; k < n; ++k) {
        run.run_node<true>(k);
        r.progress.store(k + 1, std::memory_order_relaxed);
      }
    }
    return;
  }
  for (uint32_t code : order_) {
    if (r.observer == nullptr)
      run.run_unit<false>(code);
    else
      run.run_unit<true>(code);
    r.progress.fetch_add(1, std::memory_order_relaxed);
  }
}

void Program::run_parallel() {
  Run& r = run_;
  // Relaxed: published to the threads that run the tasks by the pool's hand-off (submit).
  for (uint32_t t = 0; t < ntasks_; ++t) r.pending[t].store(tasks_[t].preds, std::memory_order_relaxed);
  sched::Latch latch(ntasks_);
  r.latch = &latch;
  sched::Pool& pool = engine_.pool();
  // A launch run inline on a program thread (FL_SUBMIT_INLINE) takes part in the pool's
  // work while it waits; a worker helps with its own region (the launch's callback) anyway.
  std::optional<sched::Participation> part;
  if (sched::Pool::current() == nullptr) part.emplace(pool);
  for (size_t x = 1; x < roots_.size(); ++x) pool.submit(&tasks_[roots_[x]]);
  run_task(&tasks_[roots_[0]]);
  latch.wait();
  r.latch = nullptr;
}

void Program::run_task(sched::Task* t) {
  auto* tr = static_cast<TaskRec*>(t);
  Program& p = *tr->program;
  Run& r = p.run_;
  // The launch's callback frame is current on every thread of the run: the replayed
  // functions' waits are refused by the launch's rules (the launch waits for the run).
  sched::ContextScope context(r.context);
  Runner run(p);
  ReplayScope scope(run.frame());
  int64_t finished = 0;
  for (;;) {
    const uint32_t* chain = p.chain_.data();
    if (r.observer == nullptr) {
      for (uint32_t x = tr->begin; x < tr->end; ++x) run.run_unit<false>(chain[x]);
    } else {
      for (uint32_t x = tr->begin; x < tr->end; ++x) run.run_unit<true>(chain[x]);
    }
    r.progress.fetch_add(tr->end - tr->begin, std::memory_order_relaxed);  // for dumps only
    ++finished;
    TaskRec* next = nullptr;
    for (uint32_t x = tr->succ_begin; x < tr->succ_end; ++x) {
      TaskRec* s = &p.tasks_[p.task_succ_[x]];
      // acq_rel: the last predecessor to finish sees every other predecessor's writes
      // (release) and hands them to the task it starts (acquire). Pairs with the other
      // predecessors' fetch_sub (the counts were stored before the roots were submitted).
      if (r.pending[p.task_succ_[x]].fetch_sub(1, std::memory_order_acq_rel) != 1) continue;
      if (next == nullptr) {
        next = s;  // run here, below: no round trip through the pool for a chain of tasks
        continue;
      }
      try {
        p.engine_.pool().submit(s);
      } catch (...) {
        run_task(s);  // out of memory growing a deque: run it here instead
      }
    }
    if (next == nullptr) break;
    tr = next;
  }
  // The last access to the run's latch (the launching thread may return at zero).
  r.latch->count_down(finished);
}

fl_status_t Program::conclude(Instr* launch) {
  Run& r = run_;
  if (!r.trouble.load(std::memory_order_relaxed)) return FL_OK;  // every task has finished: quiescent
  const uint32_t n = size();
  uint32_t first_failed = kNoNode, first_skipped = kNoNode;
  uint64_t failed = 0, skipped = 0;
  for (uint32_t k = 0; k < n; ++k) {
    if (r.status[k] == kFailed) {
      if (failed++ == 0) first_failed = k;
    } else if (r.status[k] == kSkipped) {
      if (skipped++ == 0) first_skipped = k;
    }
  }
  fl_status_t st = FL_OK;
  if (first_failed != kNoNode) {
    std::string detail = fl_status_name(FL_ERR_INSTRUCTION_FAILED);
    st = FL_ERR_INSTRUCTION_FAILED;
    for (const auto& [k, e] : r.errors)
      if (k == first_failed) {
        st = e.first;
        detail = e.second;
      }
    launch->error = "inner instruction " + describe_node(first_failed) + " failed: " + detail;
    if (failed > 1) launch->error += "; " + std::to_string(failed) + " inner instructions failed in all";
    if (skipped > 0)
      launch->error += "; " + std::to_string(skipped) + " inner instruction" + (skipped == 1 ? " was" : "s were") +
                       " skipped";
  } else if (first_skipped != kNoNode) {
    // Nothing failed in the launch: the first node skipped read a value poisoned before it
    // (an earlier skipped node would have a smaller index).
    Instr* by = nullptr;
    for (uint32_t x = read_begin(first_skipped); x < read_end_[first_skipped] && by == nullptr; ++x)
      if ((reads_[x] & kExternal) != 0) by = r.ext_poison[reads_[x] & ~kExternal];
    if (by != nullptr) mark_skipped(launch, by);
  }
  std::fill(r.status.begin(), r.status.end(), kRan);
  std::fill(r.ext_poison.begin(), r.ext_poison.end(), nullptr);
  r.errors.clear();
  r.trouble.store(false, std::memory_order_relaxed);
  return st;
}

}  // namespace flowlane::core
