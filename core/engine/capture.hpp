// Capturing submissions into a program (fl_capture_begin / fl_capture_end;
// core/engine/README.md, "Capture and replay"). While a thread captures on an engine, every
// submission of that thread to that engine reaches Engine::submit, which hands it here
// instead of recording it: the instruction is not run and takes no id; its function, user
// data, cleanup, name and device record become a node, and the dependencies the Recorder
// would infer eagerly (deps.cpp) are computed against the capture's own per-object state —
// plus the order of each lane and device stream as explicit edges. finish() compiles them
// into a Program (program.hpp).
//
// Capture state is per thread and per engine: a thread keeps its open captures in a
// thread-local list, and t_open_captures counts them, so that a submission pays one
// thread-local load when no capture is open. Engine destroy kills the captures of its
// engine (they stay in their threads' lists, marked dead, and are dropped at the next
// lookup), so a live entry's engine is alive and is matched by address.
//
// Owns: the capture's nodes, edges and per-object state, one reference per object used
// (handed to the program), the device records of captured device instructions.
// Calls: Engine (discard, objects' references, the ProgramDevice), Programs (registration,
// so that engine destroy can discard a capture left open).
// Called by: Engine::submit (add), the C API (begin, end), engine destroy (kill).
// No lock on the capture itself: only its thread uses it (engine destroy discards it while
// no thread of the caller's may call in, as every destroy requires). `dead_` is atomic:
// set by engine destroy, read by the capturing thread's later lookups (release / acquire).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "engine/instr.hpp"
#include "engine/program.hpp"
#include "engine/program_device.hpp"
#include "flowlane/flowlane.h"

namespace flowlane::core {

class Engine;
struct SubmitArgs;

namespace detail {
extern constinit FL_TLS thread_local uint32_t t_open_captures;  // open captures of this thread (capture.cpp)
}  // namespace detail

class Capture {
 public:
  Capture(Engine& e, std::string name);
  ~Capture();  // discards what is left
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  // Records `i` (a record of this engine, operands resolved) submitted to `s` with `a`;
  // takes `i` in every case (it is discarded). Returns 0: a captured instruction has no id.
  // Throws (FL_ERR_SHUTDOWN, FL_ERR_CAPTURING for a collective stream, FL_ERR_UNSUPPORTED
  // for device work that cannot be captured, FL_ERR_NO_MEMORY), leaving the capture as it
  // was.
  fl_instr_id add(Stream* s, Instr* i, const SubmitArgs& a);
  // Compiles the capture into a program (the capture is empty afterwards). Throws; the
  // caller then discards the capture.
  std::unique_ptr<Program> finish();
  // Runs the cleanups of the captured instructions, drops the object references, frees
  // the device records. Idempotent.
  void discard();

  Engine* engine() const { return engine_; }
  // Engine destroy discarded this capture: the thread's later calls find the engine stale.
  void kill();
  bool dead() const { return dead_.load(std::memory_order_acquire); }  // pairs with kill()'s release store
  uint32_t size() const { return uint32_t(nodes_.size()); }
  // The record a capturing thread's submissions use (Engine::new_instr): never queued, so
  // never handed to the pool either (Engine::discard and return_unused leave it here).
  Instr* scratch() { return &scratch_; }

 private:
  struct CapObj {
    Object* obj = nullptr;
    uint32_t last_writer = kNoNode;
    uint32_t access = 0;          // union of the accesses
    uint32_t ext_slot = kNoNode;  // read before any write of the capture: its slot
    std::vector<uint32_t> readers;  // since last_writer
  };
  uint32_t object_state(Object* o);  // its index in objs_, found or added (may throw)
  void add_edge(uint32_t pred, uint32_t succ);
  void make_names_room(size_t len);
  // Whether lane or stream order already orders pred before a node of `lane` on `s`.
  bool implied_by_order(uint32_t pred, uint32_t lane, const Stream* s) const;
  void check_device(Stream* s, const Instr* i);  // refusals, and room for the commit
  void commit_device(Stream* s, Instr* i, uint32_t k);
  // capture_compile.cpp
  void compile_schedule(Program& p);
  void compile_device(Program& p);

  Engine* engine_;
  std::string name_;
  std::atomic<bool> dead_{false};

  // The nodes as the program will hold them (handed over by finish()).
  std::vector<ProgramNode> nodes_;
  std::vector<uint32_t> read_end_;  // per node: its reads end here in reads_
  std::vector<uint32_t> name_at_;   // per node once one is named: 1 + offset in names_, 0: unnamed
  std::vector<uint32_t> stamp_;     // per node: 1 + the last node an edge from it was added for
  std::string names_;
  std::vector<std::pair<uint32_t, uint32_t>> edges_;  // (pred, succ), grouped by succ in capture order
  std::vector<uint32_t> reads_;
  std::vector<uint32_t> last_host_;  // per lane: its last host node, or kNoNode
  std::vector<std::pair<const Stream*, uint32_t>> last_device_;  // per device stream: its last node
  std::vector<CapObj> objs_;
  // Open addressing, Object* -> index into objs_ (+1; 0: empty), power-of-two size.
  std::vector<uint32_t> obj_index_;
  std::vector<uint32_t> op_state_;  // scratch of add(): each operand's index in objs_
  uint32_t ext_slots_ = 0;
  // The device nodes, in capture order: each with its stream and its record (owned).
  struct DeviceNode {
    uint32_t node;
    const Stream* stream;
    void* record;
    void (*record_free)(void*);
  };
  std::vector<DeviceNode> records_;
  const Stream* device_stream(uint32_t node) const;  // of a device node
  int device_ = -1;
  uint32_t host_nodes_ = 0;
  ProgramDeviceDesc pending_desc_;  // compile_device's, for the build in finish()
  Instr scratch_;
};

namespace detail {
// The capture find_capture() found last and its engine (a cache: the thread submits to the
// engine it captures on, again and again). Trivial thread-locals (initial-exec TLS).
extern constinit FL_TLS thread_local const Engine* t_last_engine;
extern constinit FL_TLS thread_local Capture* t_last_capture;
}  // namespace detail

// The calling thread's open capture on `e`, or null. Inline fast path: one thread-local
// load when the thread captures nowhere; two more, and the capture's dead flag, when it
// captures on `e`.
Capture* find_capture(const Engine& e);
inline Capture* capture_of(const Engine& e) {
  if (__builtin_expect(detail::t_open_captures == 0, 1)) return nullptr;
  if (detail::t_last_engine == &e && !detail::t_last_capture->dead()) return detail::t_last_capture;
  return find_capture(e);
}

// fl_capture_begin / fl_capture_end (throw with the messages of the C API).
void begin_capture(Engine& e, const char* name);
std::unique_ptr<Program> end_capture(Engine& e, bool keep);

// The waits and queries a capturing thread may not make on `e` (FL_ERR_CAPTURING, naming
// `fn`; the header, "Capture and replay").
[[noreturn, gnu::cold]] void refuse_capturing(const char* fn);
inline void refuse_if_capturing(const Engine& e, const char* fn) {
  if (__builtin_expect(detail::t_open_captures != 0, 0) && find_capture(e) != nullptr) refuse_capturing(fn);
}

}  // namespace flowlane::core
