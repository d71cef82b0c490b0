// Capturing submissions (engine/capture.hpp): the thread's open captures, recording one
// submission as a node with the dependencies the Recorder would infer, and discarding.
// Compiling a capture into a program is in capture_compile.cpp.
#include "engine/capture.hpp"

#include <algorithm>
#include <string>

#include "engine/engine.hpp"
#include "engine/program_device.hpp"

namespace flowlane::core {

namespace detail {
constinit FL_TLS thread_local uint32_t t_open_captures = 0;
constinit FL_TLS thread_local const Engine* t_last_engine = nullptr;
constinit FL_TLS thread_local Capture* t_last_capture = nullptr;
}  // namespace detail

namespace {

// A program holds at most this many instructions (node indices keep their top bit free
// for kExternal and kDeviceUnit).
constexpr uint32_t kMaxNodes = 1u << 28;

// The calling thread's open captures. Each is also registered with its engine (Programs),
// which kills it at destroy; a killed one is dropped here at the thread's next lookup.
struct ThreadCaptures {
  std::vector<std::unique_ptr<Capture>> open;
  ~ThreadCaptures() {
    // A thread that exits with a capture open: discarded (its engine must still exist, as
    // for every call of the thread's; one destroyed meanwhile killed it already).
    for (auto& c : open) {
      if (!c->dead()) {
        c->engine()->programs().remove_capture(c.get());
        c->discard();
      }
    }
    open.clear();
    detail::t_open_captures = 0;
    forget_last();
  }
  static void forget_last() {
    detail::t_last_engine = nullptr;
    detail::t_last_capture = nullptr;
  }
};
thread_local ThreadCaptures t_captures;

// Grows v's capacity geometrically so that `extra` more elements fit (the commit pass then
// cannot throw). Inline: one compare when there is room.
template <class V>
[[gnu::noinline, gnu::cold]] void grow(V& v, size_t extra) {
  v.reserve(std::max(v.size() + extra, v.capacity() * 2 + 16));
}
template <class V>
inline void make_room(V& v, size_t extra) {
  if (v.capacity() - v.size() < extra) [[unlikely]]
    grow(v, extra);
}

[[noreturn, gnu::cold, gnu::noinline]] void refuse(fl_status_t st, const char* api, const char* why) {
  fail(st, std::string(api != nullptr ? api : "fl_submit") + why);
}

size_t hash_ptr(const void* p) {
  uint64_t x = reinterpret_cast<uintptr_t>(p);
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ull;
  return size_t(x ^ (x >> 32));
}

}  // namespace

// ---------------------------------------------------------------------------------------
// The thread's captures

Capture* find_capture(const Engine& e) {
  auto& open = t_captures.open;
  for (size_t k = 0; k < open.size();) {
    Capture* c = open[k].get();
    if (c->dead()) {  // its engine was destroyed (no other thread touches it any more)
      if (detail::t_last_capture == c) ThreadCaptures::forget_last();
      open.erase(open.begin() + ptrdiff_t(k));
      --detail::t_open_captures;
      continue;
    }
    // A live capture's engine is alive (destroy kills every capture of its engine), so
    // comparing addresses is exact.
    if (c->engine() == &e) {
      detail::t_last_engine = &e;
      detail::t_last_capture = c;
      return c;
    }
    ++k;
  }
  return nullptr;
}

void begin_capture(Engine& e, const char* name) {
  if (in_any_engine_context())
    fail(FL_ERR_INVALID_ARGUMENT,
         "fl_capture_begin: called from code an engine runs (an instruction, cleanup, release, task or loop body, "
         "or a worker): submissions made there always run eagerly; capture from a thread of your own");
  if (find_capture(e) != nullptr)
    fail(FL_ERR_CAPTURING, "fl_capture_begin: this thread already captures on this engine (captures do not nest); "
                           "end it with fl_capture_end first");
  if (e.shutting_down()) fail(FL_ERR_SHUTDOWN, "fl_capture_begin: the engine is being destroyed");
  if (e.cancel_drain().draining())
    fail(FL_ERR_SHUTDOWN, "fl_capture_begin: the engine was drained (fl_engine_drain): it accepts no new work from "
                          "your threads");
  auto c = std::make_unique<Capture>(e, name != nullptr ? std::string(name) : std::string());
  t_captures.open.reserve(t_captures.open.size() + 1);
  e.programs().add_capture(c.get());
  t_captures.open.push_back(std::move(c));  // within the reserved capacity
  ++detail::t_open_captures;
}

std::unique_ptr<Program> end_capture(Engine& e, bool keep) {
  Capture* c = find_capture(e);
  if (c == nullptr)
    fail(FL_ERR_INVALID_ARGUMENT,
         "fl_capture_end: this thread is not capturing on this engine (call fl_capture_begin first, from this thread)");
  auto& open = t_captures.open;
  auto it = std::find_if(open.begin(), open.end(), [c](const auto& x) { return x.get() == c; });
  std::unique_ptr<Capture> owned = std::move(*it);
  open.erase(it);
  --detail::t_open_captures;
  ThreadCaptures::forget_last();
  e.programs().remove_capture(c);
  if (!keep) {
    owned->discard();
    return nullptr;
  }
  std::unique_ptr<Program> p;
  try {
    p = owned->finish();
  } catch (...) {
    owned->discard();
    throw;
  }
  e.programs().add(p.get());
  return p;
}

void refuse_capturing(const char* fn) {
  fail(FL_ERR_CAPTURING, std::string(fn) +
                             ": this thread is capturing on this engine (fl_capture_begin): nothing it captured has "
                             "been submitted, so there is nothing to wait for or ask about; end the capture "
                             "(fl_capture_end) and launch the program first");
}

// ---------------------------------------------------------------------------------------
// One capture

Capture::Capture(Engine& e, std::string name) : engine_(&e), name_(std::move(name)) {
  last_host_.assign(e.lane_count(), kNoNode);
  scratch_.engine = &e;
  scratch_.seq = Engine::kScratchSeq;  // never pooled (Engine::discard, return_unused)
}

Capture::~Capture() {
  if (!dead()) discard();
}

void Capture::kill() {
  discard();
  dead_.store(true, std::memory_order_release);  // pairs with the acquire load in dead()
}

uint32_t Capture::object_state(Object* o) {
  if (obj_index_.empty() || (objs_.size() + 1) * 2 > obj_index_.size()) {
    // Rehash at half load (a fresh table, then the swap: a bad_alloc leaves the old one).
    std::vector<uint32_t> fresh(std::max<size_t>(64, obj_index_.size() * 2), 0);
    const size_t mask = fresh.size() - 1;
    for (uint32_t k = 0; k < objs_.size(); ++k) {
      size_t h = hash_ptr(objs_[k].obj) & mask;
      while (fresh[h] != 0) h = (h + 1) & mask;
      fresh[h] = k + 1;
    }
    obj_index_.swap(fresh);
  }
  const size_t mask = obj_index_.size() - 1;
  size_t h = hash_ptr(o) & mask;
  for (; obj_index_[h] != 0; h = (h + 1) & mask)
    if (objs_[obj_index_[h] - 1].obj == o) return obj_index_[h] - 1;
  objs_.emplace_back();  // may throw: the table is unchanged
  objs_.back().obj = o;
  obj_index_[h] = uint32_t(objs_.size());
  return uint32_t(objs_.size() - 1);
}

// Room for a name of `len` bytes, and for the names' offsets (kept once a node is named:
// the first named node fills them in for the unnamed ones before it).
void Capture::make_names_room(size_t len) {
  make_room(names_, len + 1);
  if (name_at_.empty()) name_at_.reserve(nodes_.size() + 1);
  make_room(name_at_, 1);
  if (name_at_.empty()) name_at_.assign(nodes_.size(), 0);  // within the room just made
}

[[gnu::always_inline]] inline void Capture::add_edge(uint32_t pred, uint32_t succ) {
  uint32_t& stamp = stamp_[pred];
  if (stamp == succ + 1) return;  // repeated: once is enough
  stamp = succ + 1;
  edges_.emplace_back(pred, succ);  // within the room add() made
}

// An edge pred -> (a node of `lane` on `s`) that the order edges already imply: pred is a
// host node of that lane (the lane's chain of host nodes, and its edge to every device node
// that follows), or a device node of the same device stream (its chain).
[[gnu::always_inline]] inline bool Capture::implied_by_order(uint32_t pred, uint32_t lane, const Stream* s) const {
  const ProgramNode& pn = nodes_[pred];
  if (pn.kind == NodeKind::kHost) return pn.lane == lane;
  return device_stream(pred) == s;
}

const Stream* Capture::device_stream(uint32_t node) const {
  auto it = std::lower_bound(records_.begin(), records_.end(), node,
                             [](const DeviceNode& d, uint32_t n) { return d.node < n; });
  return it->stream;
}

void Capture::check_device(Stream* s, const Instr* i) {
  ProgramDevice* pd = engine_->program_device();
  if (pd == nullptr || i->device == nullptr)
    fail(FL_ERR_UNSUPPORTED, "this build's device backend cannot capture device work into programs");
  std::string why = pd->unavailable();
  if (!why.empty()) fail(FL_ERR_UNSUPPORTED, "device work cannot be captured into a program: " + why);
  if (device_ >= 0 && device_ != s->device.index)
    fail(FL_ERR_UNSUPPORTED, "a program's device work must be on one device: this capture already has work on CUDA "
                             "device " + std::to_string(device_) + ", this instruction is for device " +
                                 std::to_string(s->device.index) + " (capture one program per device)");
  if (std::none_of(last_device_.begin(), last_device_.end(), [s](const auto& x) { return x.first == s; }))
    make_room(last_device_, 1);
  make_room(records_, 1);
}

// A device node's stream order, and its record (the program's from now on). No allocation.
void Capture::commit_device(Stream* s, Instr* i, uint32_t k) {
  auto ld = std::find_if(last_device_.begin(), last_device_.end(), [s](const auto& x) { return x.first == s; });
  if (ld == last_device_.end()) {
    last_device_.emplace_back(s, k);  // room made by check_device
  } else {
    add_edge(ld->second, k);
    ld->second = k;
  }
  device_ = s->device.index;
  records_.push_back(DeviceNode{k, s, i->device, i->device_free});
  i->device = nullptr;
  i->device_free = nullptr;
}

// Flattened: the vectors' push_backs, which the compiler otherwise keeps out of line, are
// most of a capture's cost per operand.
[[gnu::flatten]] fl_instr_id Capture::add(Stream* s, Instr* i, const SubmitArgs& a) {
  struct Unused {  // the record is never queued: back to the pool in every case
    Engine* e;
    Instr* i;
    ~Unused() { e->return_unused(i); }
  } unused{engine_, i};
  if (engine_->shutting_down()) refuse(FL_ERR_SHUTDOWN, a.api, ": the engine is being destroyed");
  if (s->kind == FL_STREAM_COLLECTIVE)
    refuse(FL_ERR_CAPTURING, a.api, ": collective streams cannot be captured (a launch would have to advance the "
                                    "communicator's sequence numbers); submit collectives eagerly between launches");
  const bool device = !s->is_host_executed();
  if (device) [[unlikely]]
    check_device(s, i);
  const uint32_t k = size();
  if (k >= kMaxNodes) [[unlikely]]
    refuse(FL_ERR_OUT_OF_RANGE, a.api, ": a program holds at most 2^28 instructions");
  std::vector<Operand>& ops = i->operands;
  if (ops.size() > 1) merge_operands(ops);

  // 1. Room for everything the commit below adds (the last point that may throw).
  size_t edges = 2;  // lane order, stream order
  if (!ops.empty()) {
    if (op_state_.size() < ops.size()) op_state_.resize(ops.size());
    for (size_t n = 0; n < ops.size(); ++n) {
      const Operand& op = ops[n];
      const uint32_t x = object_state(op.obj);
      CapObj& co = objs_[x];
      edges += 1 + ((op.access & FL_WRITE) ? co.readers.size() : 0);
      if ((op.access & FL_WRITE) == 0) make_room(co.readers, 1);
      op_state_[n] = x;
    }
    make_room(reads_, ops.size());
  }
  make_room(edges_, edges);
  make_room(nodes_, 1);
  make_room(read_end_, 1);
  make_room(stamp_, 1);
  const size_t name_len = a.name != nullptr ? std::char_traits<char>::length(a.name) : 0;
  if (name_len > 0) [[unlikely]]
    make_names_room(name_len);
  else if (!name_at_.empty())
    make_room(name_at_, 1);
  const NodeKind kind = !device ? NodeKind::kHost
                                : (engine_->program_device()->is_graph_node(i->device) ? NodeKind::kGraph
                                                                                        : NodeKind::kDeviceFn);

  // 2. The commit: nothing below allocates or throws.
  const uint32_t lane = s->lane->id;
  nodes_.push_back(ProgramNode{a.fn, a.user_data, a.cleanup, lane, kind});
  stamp_.push_back(0);
  if (name_len > 0) {
    name_at_.push_back(uint32_t(names_.size()) + 1);
    names_.append(a.name, name_len);
    names_.push_back('\0');
  } else if (!name_at_.empty()) {
    name_at_.push_back(0);
  }
  // Lane and stream order: a lane's host instructions run one at a time in submission
  // order, and its device instructions are issued after the host ones before them; a
  // device stream runs its work in order.
  if (last_host_[lane] != kNoNode) add_edge(last_host_[lane], k);
  if (device) [[unlikely]] {
    commit_device(s, i, k);
  } else {
    last_host_[lane] = k;
    ++host_nodes_;
  }
  // The objects: Recorder's rules (deps.cpp), against the capture's own state.
  for (size_t n = 0; n < ops.size(); ++n) {
    const Operand& op = ops[n];
    CapObj& co = objs_[op_state_[n]];
    const bool reads = (op.access & FL_READ) != 0;
    if (co.last_writer != kNoNode) {
      if (!implied_by_order(co.last_writer, lane, s)) add_edge(co.last_writer, k);  // RAW, WAW
      if (reads) reads_.push_back(co.last_writer);
    } else if (reads) {
      if (co.ext_slot == kNoNode) co.ext_slot = ext_slots_++;  // a value from before the launch
      reads_.push_back(kExternal | co.ext_slot);
    }
    if (op.access & FL_WRITE) {
      for (uint32_t r : co.readers)
        if (!implied_by_order(r, lane, s)) add_edge(r, k);  // WAR
      co.readers.clear();
      co.last_writer = k;
    } else {
      co.readers.push_back(k);
    }
    // The capture's reference on the object (relaxed: the caller holds one, as for an
    // operand's reference at submission).
    if (co.access == 0) op.obj->refs.fetch_add(1, std::memory_order_relaxed);
    co.access |= op.access;
  }
  read_end_.push_back(uint32_t(reads_.size()));
  return 0;
}

void Capture::discard() {
  if (!nodes_.empty()) {
    // The captured instructions' cleanups: each was accepted, so each runs exactly once.
    CallbackScope frame(engine_, nullptr, CallbackKind::kCleanup);
    for (const ProgramNode& nd : nodes_) {
      if (nd.cleanup == nullptr) continue;
      try {
        nd.cleanup(nd.user_data);
      } catch (...) {
        // A cleanup callback must not throw; nothing to report it to.
      }
    }
  }
  for (const CapObj& co : objs_)
    if (co.access != 0) engine_->objects().release_ref(co.obj);
  for (const DeviceNode& d : records_) d.record_free(d.record);
  nodes_.clear();
  read_end_.clear();
  name_at_.clear();
  stamp_.clear();
  names_.clear();
  edges_.clear();
  reads_.clear();
  std::fill(last_host_.begin(), last_host_.end(), kNoNode);
  last_device_.clear();
  objs_.clear();
  obj_index_.clear();
  records_.clear();
  ext_slots_ = 0;
  host_nodes_ = 0;
  device_ = -1;
}

}  // namespace flowlane::core
