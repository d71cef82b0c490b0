// Instruction records, dependency edges and dependence objects.
//
// An instruction's `pending` counter holds one unit per unfinished predecessor, plus
//   one unit for the submitting thread (dropped when submission has recorded every edge),
//   one unit for the lane (dropped when the lane reaches the instruction at its head).
// Whoever drops it to zero launches the instruction: the lane runs it inline; anyone
// else (a completing predecessor, the submitter) re-schedules the lane, which is then
// blocked on that very instruction.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/alloc.hpp"
#include "core/spinlock.hpp"
#include "flowlane/flowlane.h"

namespace flowlane::core {

class Engine;
struct Stream;
struct Object;
struct Instr;

enum class InstrState : uint32_t {
  kFree = 0,     // in the record pool
  kPending = 1,  // submitted, waiting for predecessors or its turn on the lane
  kRunning = 2,  // callback executing (for a device instruction: being launched)
  kLaunched = 3, // device instruction: enqueued on its CUDA stream, GPU completion pending
  kDone = 4,     // completed successfully
  kFailed = 5,   // its callback (or its GPU work) failed
  kSkipped = 6,  // not run: an input was poisoned
};

inline bool is_terminal(InstrState s) { return s >= InstrState::kDone; }

struct Edge : MiAllocated {
  Instr* succ = nullptr;
  Edge* next = nullptr;
};

struct Operand {
  Object* obj;
  uint32_t access;
};

enum class InstrKind : uint8_t { kHost = 0, kKernel, kDeviceFn, kMemcpy, kCollective };

struct Instr : MiAllocated {
  // --- identity ---
  fl_instr_id id = 0;
  uint64_t seq = 0;  // position in its stream (1-based)
  Stream* stream = nullptr;
  Engine* engine = nullptr;
  InstrKind kind = InstrKind::kHost;
  std::string name;

  // --- work ---
  fl_host_fn fn = nullptr;
  void* user_data = nullptr;
  fl_release_fn cleanup = nullptr;
  std::vector<Operand> operands;
  // What this instruction depends on, each entry holding a reference on `pred` until the
  // instruction completes: the last writer of every object it reads (kReads: its poison
  // decides whether this one is skipped) and every predecessor it waits for through an
  // edge (kEdge). Diagnostics read them to say what a stuck instruction waits for.
  struct Dep {
    static constexpr uint8_t kReads = 1;
    static constexpr uint8_t kEdge = 2;
    // Device → device on another CUDA stream: at launch this instruction makes its stream
    // wait (cudaStreamWaitEvent) for pred's event, unless pred has completed (DESIGN rule 3).
    static constexpr uint8_t kLaunchWait = 4;
    Instr* pred;
    Object* obj;
    uint8_t flags;
  };
  std::vector<Dep> deps;

  // --- scheduling ---
  std::atomic<int32_t> pending{0};
  std::atomic<Edge*> succ_head{nullptr};  // successors; kSealed once completed
  // Device instructions only: successors that wait for this one's *launch* (GPU work on
  // another CUDA stream, ordered by a CUDA event); kSealed once launched or completed.
  std::atomic<Edge*> launch_succ_head{nullptr};
  std::atomic<int32_t> refs{0};
  std::atomic<uint32_t> state{uint32_t(InstrState::kFree)};
  std::atomic<Instr*> lane_next{nullptr};
  bool in_callback_submit = false;  // admitted over the window from inside a callback

  // --- device instructions (gpu/, issue 5) ---
  // Launch description copied at submit (kernel arguments, memcpy parameters, device fn);
  // keeps its capacity across reuse of the record. Read only by gpu/.
  std::vector<unsigned char> payload;
  // The pooled cudaEvent_t recorded after a successful launch (null otherwise). Returned to
  // the pool when the record is recycled, so a dependent holding a reference can read it.
  void* event = nullptr;
  // A device instruction launched without an event of its own (gpu/README.md, "Events"):
  // the later instruction of the same CUDA stream whose event was recorded after it, so
  // that event's completion implies this one's. Set before kLaunched is published; holds a
  // reference on `cover`, dropped when this record is recycled.
  Instr* cover = nullptr;

  // --- result (written before the terminal state is published with release) ---
  // The terminal state complete() will publish: kFailed or kSkipped once the executing
  // thread decided so (mark_failed / mark_skipped), kDone otherwise. Not `state` itself:
  // a waiter that saw a terminal state early would return before cleanup and completion.
  InstrState outcome = InstrState::kDone;
  fl_status_t status = FL_OK;
  std::string error;   // full message naming this instruction
  std::string origin;  // message of the original failure this one stems from
  std::atomic<bool> reported{false};  // returned once by a synchronize

  // Inline edge storage for the first few predecessors (no allocation in the common case).
  static constexpr int kInlineEdges = 4;
  Edge inline_edges[kInlineEdges];
  int inline_edges_used = 0;

  InstrState load_state(std::memory_order mo = std::memory_order_acquire) const {
    return InstrState(state.load(mo));
  }
  void ref() { refs.fetch_add(1, std::memory_order_relaxed); }
  // Returns true when this dropped the last reference.
  bool unref() { return refs.fetch_sub(1, std::memory_order_acq_rel) == 1; }
  std::string describe() const;  // "'name' (#7, lane 1, host)"
};

inline Edge* const kSealed = reinterpret_cast<Edge*>(uintptr_t(1));

// A dependence object.
struct Object : MiAllocated {
  Engine* engine = nullptr;
  uint64_t handle = 0;
  void* user_data = nullptr;
  fl_release_fn release = nullptr;
  // One reference for the caller's handle plus one per in-flight instruction using it.
  std::atomic<int64_t> refs{1};

  SpinLock lock;                // guards the fields below
  Instr* last_writer = nullptr; // referenced
  std::vector<Instr*> readers;  // referenced; the reads since last_writer

  // Engine's intrusive list of live objects (under engine objects_mu_).
  Object* prev = nullptr;
  Object* next = nullptr;
};

// Free instruction records, reused so that their vectors and strings keep their capacity
// and steady-state submission allocates nothing. Each thread keeps a small cache; records
// move between threads (submitters take, workers give back) through a process-wide depot
// in batches of kBatch, so the depot's mutex is taken once per kBatch records, never per
// instruction. Records are engine-agnostic (the engine is set when one is taken).
class InstrPool {
 public:
  static constexpr size_t kBatch = 128;
  static Instr* get();
  static void put(Instr* i);
};

}  // namespace flowlane::core
