// Programs: captured instructions with their dependencies precomputed, replayed as one
// instruction (fl_program_*; core/engine/README.md, "Capture and replay"). A Program is
// made by Capture::finish (capture.cpp) and is immutable afterwards, except for the state
// of the launch that runs it (launches of one program are ordered: each launch writes the
// program's own phony object, so one runs at a time and the run state below is its own).
//
//   capture.{hpp,cpp}  recording submissions and compiling them into a Program
//   program.{hpp,cpp}  the Program, its lifetime and the engine's registry (Programs)
//   replay.cpp         running a launch: sequential and parallel schedules, failures
//
// Owns: the captured nodes (their functions, user data, cleanups and device records), a
// reference on every object they use, the schedule (successor lists, chains, the units of
// device work), the device part's state (ProgramDevice) and the run state of its launch.
// Calls: the nodes' functions (replay), their cleanups (free), Objects::release_ref, the
// ProgramDevice, the pool (parallel replays), the observer (on_replay_node).
// Called by: the C API (fl_capture_end, fl_program_launch, fl_program_destroy,
// fl_program_info), the launch's instruction (replay_launch, via Executor::execute_host),
// engine destroy (Programs::release_all), the state dump (Programs' extension).
// Locks: Programs::mu_ (the registry: a leaf, no callback runs under it); Run::mu (the
// failures' texts of a launch, rare).
// Atomics it shares, and with whom:
//   refs: the handle's reference and one per launch in flight (acq_rel decrements: the
//     last one sees every launch's writes before freeing).
//   Run::trouble: relaxed; a node that fails stores its status byte, then the flag; a node
//     that depends on it runs after it (through a task's pending count, acq_rel, or on the
//     same thread), so it sees both. Another node may see the flag and check its inputs,
//     which are then clean: harmless.
//   Run::pending[t]: acq_rel fetch_sub by each predecessor task of t; the last one runs t
//     (it sees every predecessor's writes).
//   running_id_, progress_, launches_: relaxed, read by dumps and fl_program_info only.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/instr.hpp"
#include "flowlane/flowlane.h"
#include "sched/latch.hpp"
#include "sched/task.hpp"

namespace flowlane::core {

class Engine;
class Capture;
struct UnitGraph;
class Observer;
class ProgramDevice;
struct Object;
struct Stream;

inline constexpr uint32_t kNoNode = UINT32_MAX;
// A node's read of a value from before the launch: kExternal | its slot (Program::ext_).
inline constexpr uint32_t kExternal = 1u << 31;

enum class NodeKind : uint8_t {
  kHost = 0,      // a host instruction: its fn runs at every launch
  kGraph = 1,     // a kernel, copy or memset: a node of one of the program's device graphs
  kDeviceFn = 2,  // a device function: runs at every launch, on the program's device stream
};

struct ProgramNode {
  fl_host_fn fn = nullptr;
  void* user_data = nullptr;
  fl_release_fn cleanup = nullptr;
  uint32_t lane = 0;
  NodeKind kind = NodeKind::kHost;
};

// The function of a launch's instruction (user_data: the Program). Executor::execute_host
// recognises launches by it: their inputs' poison is checked per node, not for the whole.
fl_status_t replay_launch(fl_instr_ctx_t* ctx, void* program);
inline bool is_launch(const Instr* i) { return i->fn == &replay_launch; }

// The context a replayed function receives (its fl_instr_ctx_t*): a frame on the stack of
// the thread running it. The C API looks it up (replay_frame()), never dereferences a ctx
// it did not find.
struct ReplayFrame {
  const class Program* program = nullptr;
  Instr* launch = nullptr;
  uint32_t node = 0;
  std::string error;  // fl_instr_set_error's text for the running node
  ReplayFrame* saved = nullptr;
  fl_instr_ctx_t* ctx() { return reinterpret_cast<fl_instr_ctx_t*>(this); }
};
// The frame whose context `ctx` is, if a replayed function runs on this thread with it.
ReplayFrame* replay_frame(const void* ctx);
// Makes `f` the calling thread's innermost replay frame for the scope (replay.cpp; the
// device part's launch on a CUDA stream uses it for its device functions' context).
class ReplayScope {
 public:
  explicit ReplayScope(ReplayFrame& f);
  ~ReplayScope();
  ReplayScope(const ReplayScope&) = delete;
  ReplayScope& operator=(const ReplayScope&) = delete;

 private:
  ReplayFrame& f_;
};

class Program {
 public:
  Program(Engine& e, std::string name);
  ~Program();  // free() must have run (or nothing was built)
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  Engine& engine() const { return engine_; }
  const std::string& name() const { return name_; }
  // Its launches' name: "launch of 'name'" ("program launch" when unnamed).
  const std::string& launch_name() const { return launch_name_; }
  uint32_t node_lane(uint32_t k) const { return nodes_[k].lane; }
  uint64_t handle = 0;  // the caller's fl_program_t* value (0 once stale)

  // --- lifetime (program.cpp) ---
  void ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  // Drops a reference; the last one frees the program (cleanups, object references) and
  // unregisters it. acq_rel: the last dropper sees every launch's writes.
  void unref();
  // Runs the nodes' cleanups (inside cleanup frames), drops the object references and
  // frees the device state. Once.
  void free_resources();

  // --- launching (program.cpp) ---
  // The operands of a launch (sorted by address): the union of the nodes' accesses per
  // object, and the program's own phony object, written (launches are ordered).
  const std::vector<Operand>& launch_operands() const { return launch_ops_; }
  bool has_host_work() const { return host_nodes_ > 0; }
  bool has_device_work() const { return device_state_ != nullptr; }
  int device() const { return device_; }
  void* device_state() const { return device_state_; }
  // The units of device work in launch order, for a launch on a device stream.
  uint32_t device_units() const { return device_units_; }
  fl_program_info_t info() const;
  size_t bytes() const;  // memory held, besides the device state
  std::string describe_node(uint32_t k) const;  // "'name' (#3 of program 'p', lane 1)"

  // --- replay (replay.cpp) ---
  // Runs every node once, in dependency order, on the calling thread (the launch's lane
  // runner, inside its callback frame) and the pool. Returns FL_OK, or the first failure's
  // status with launch->error set; when nodes were only skipped because of inputs poisoned
  // before the launch, marks the launch skipped (mark_skipped) and returns FL_OK.
  fl_status_t replay(Instr* launch);
  // For the state dump: the id of the launch running now (0: none), its nodes done.
  uint64_t running_id() const { return running_id_.load(std::memory_order_relaxed); }
  uint64_t progress() const { return run_.progress.load(std::memory_order_relaxed); }
  uint32_t size() const { return uint32_t(nodes_.size()); }

 private:
  friend class Capture;
  friend class Programs;
  friend void compile_tasks(const UnitGraph& g, Program& p);  // schedule.cpp
  struct Run;
  class Runner;

 public:
  struct TaskRec;  // one task of a parallel replay (below)

 private:

  // --- schedule.cpp ---
  // Host work only: the tasks of a parallel replay, from edges_ (the first launch that runs
  // in parallel builds them; launches are ordered). May throw (out of memory).
  void build_schedule();
  void finish_schedule();  // the tasks' links to the program, the run's counters

  // --- replay.cpp ---
  void prepare_external_poison(Instr* launch);
  bool runs_in_parallel();  // the pool has workers to spare and the program parallelism
  void run_sequential();
  void run_parallel();
  static void run_task(sched::Task* t);
  // Whether an input of node k is poisoned (by a node of this launch, or from before it).
  bool poisoned(uint32_t k) const;
  void node_failed(uint32_t k, fl_status_t st, const std::string& detail);
  void unit_failed(uint32_t du, fl_status_t st, const std::string& detail);
  void wait_unit(uint32_t du);  // the device work of unit du has completed (or failed)
  const char* node_name(uint32_t k) const;
  fl_status_t conclude(Instr* launch);

  Engine& engine_;
  const std::string name_;
  const std::string launch_name_;
  std::atomic<int64_t> refs_{1};  // the handle's
  bool freed_ = false;

  // --- the nodes, in capture order (a topological order of the dependencies) ---
  std::vector<ProgramNode> nodes_;
  // 1 + offset of the node's name in names_ (NUL-ended); 0: unnamed. Empty: none is named.
  std::vector<uint32_t> name_at_;
  std::string names_;
  uint32_t host_nodes_ = 0;
  uint64_t edge_count_ = 0;
  // Host work only: the dependencies (pred, succ), grouped by successor, until the parallel
  // schedule is built from them.
  std::vector<std::pair<uint32_t, uint32_t>> edges_;
  // What each node reads (the poison check): reads_[read_begin(k) .. read_end_[k]), each
  // the node that last wrote the value, or kExternal | slot.
  std::vector<uint32_t> read_end_;
  uint32_t read_begin(uint32_t k) const { return k == 0 ? 0 : read_end_[k - 1]; }
  std::vector<uint32_t> reads_;
  // Objects read before any node of the program writes them (their slots), sorted by
  // address with their slot: a launch finds the poison of what came before it there.
  std::vector<std::pair<Object*, uint32_t>> ext_;
  uint32_t ext_slots_ = 0;
  std::vector<Operand> launch_ops_;
  std::vector<Object*> objects_;  // referenced: every object of the nodes, and the phony
  // Device records of kGraph and kDeviceFn nodes (owned; freed with device_free).
  std::vector<std::pair<void*, void (*)(void*)>> records_;

  // --- the schedule ---
  // Units: node k (< size()) or kDeviceUnit | u, the u-th unit of device work. Without
  // device work the units are the nodes themselves and order_ is empty (capture order).
  static constexpr uint32_t kDeviceUnit = 1u << 31;
  std::vector<uint32_t> order_;  // units in a topological order (sequential replays)
  // Device units a host node waits for: dev_wait_begin_[k] .. [k + 1] in dev_wait_ (empty
  // without device work).
  std::vector<uint32_t> dev_wait_begin_;
  std::vector<uint32_t> dev_wait_;
  // The nodes of each device unit: dev_unit_begin_[u] .. [u + 1] in dev_unit_nodes_.
  std::vector<uint32_t> dev_unit_begin_;
  std::vector<uint32_t> dev_unit_nodes_;
  uint32_t device_units_ = 0;
  int device_ = -1;
  void* device_state_ = nullptr;
  ProgramDevice* device_api_ = nullptr;
  // Tasks of a parallel replay: chains of units (a unit whose only predecessor has it as
  // its only successor joins that predecessor's chain), each run by one thread without
  // atomics inside. Task t runs chain_[task.begin .. task.end), then releases its
  // successors task_succ_[task.succ_begin .. succ_end).
  std::vector<uint32_t> chain_;
  std::vector<uint32_t> task_succ_;
  std::vector<uint32_t> roots_;
  std::unique_ptr<TaskRec[]> tasks_;
  uint32_t ntasks_ = 0;
  std::atomic<bool> schedule_built_{false};  // tasks_ and the rest are complete

  // --- the run of the launch in progress (one at a time) ---
  struct Run {
    Instr* launch = nullptr;
    std::atomic<bool> trouble{false};  // a node failed or was skipped, or an input is poisoned
    std::vector<uint8_t> status;       // per node: kRan (0), kFailed, kSkipped
    std::vector<Instr*> ext_poison;    // per external slot: the poisoned predecessor, or null
    std::mutex mu;                     // errors
    std::vector<std::pair<uint32_t, std::pair<fl_status_t, std::string>>> errors;  // failed nodes
    std::unique_ptr<std::atomic<uint32_t>[]> pending;  // per task
    std::unique_ptr<std::atomic<uint8_t>[]> unit_state;  // per device unit: idle, issued, done
    sched::Latch* latch = nullptr;
    const void* context = nullptr;  // the launch's callback frame: current on every thread of the run
    Observer* observer = nullptr;
    std::atomic<uint64_t> progress{0};  // nodes done (for dumps)
  };
  Run run_;
  std::atomic<uint64_t> running_id_{0};
  std::atomic<uint64_t> launches_{0};
};

// One task of a parallel replay (a chain of units), handed to the pool.
struct Program::TaskRec : sched::Task {
  Program* program = nullptr;
  uint32_t begin = 0, end = 0;            // its units: chain_[begin, end)
  uint32_t succ_begin = 0, succ_end = 0;  // the tasks it releases: task_succ_[succ_begin, succ_end)
  uint32_t preds = 0;                     // tasks that release it
};

// The engine's programs and open captures (a component of the Engine): what engine destroy
// frees, and what the state dump lists.
class Programs {
 public:
  explicit Programs(Engine& e) : engine_(e) {}
  void add(Program* p);
  void remove(Program* p);
  void add_capture(Capture* c);
  void remove_capture(Capture* c);
  // Engine destroy, after the drain: discards the captures still open (their threads find
  // them dead) and frees every program left (its handle goes stale first).
  void release_all();
  // The state dump's section: each program with a launch running and its progress.
  void dump(std::string& out) const;
  size_t live() const;

 private:
  Engine& engine_;
  mutable std::mutex mu_;
  std::vector<Program*> programs_;
  std::vector<Capture*> captures_;
  bool dump_attached_ = false;
};

}  // namespace flowlane::core
