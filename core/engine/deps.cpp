// Recording an instruction's dependencies: the per-object rules, the edges and the ids
// (engine/deps.hpp; core/engine/README.md, "Dependency rules" and "Recording").
#include "engine/deps.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "engine/engine.hpp"
#include "engine/program.hpp"

namespace flowlane::core {

namespace {

// True when `before` is certain to have completed by the time `after` starts, without an
// edge: `before` runs synchronously on the lane (a host-executed stream: it completes
// before the lane moves on) and `after` was queued on the same lane later. A device
// instruction completes only on the device, and an instruction of a host COLLECTIVE stream
// may complete after its lane moved on (Stream::completes_async), so neither orders its
// lane's successors.
bool ordered_by_lane(const Instr* before, const Instr* after) {
  return before->stream->lane == after->stream->lane && before->stream->is_host_executed() &&
         !before->stream->completes_async();
}

bool is_device(const Instr* x) { return !x->stream->is_host_executed(); }

// Checked in debug and sanitizer builds: a dependency points to an instruction recorded
// earlier (a smaller id), which is what makes the wait-for graph acyclic.
inline void check_order(const Instr* pred, const Instr* succ) {
#if !defined(NDEBUG) || (defined(FL_UNDER_SANITIZER) && FL_UNDER_SANITIZER)
  if (pred->id >= succ->id) {
    std::fprintf(stderr, "flowlane: internal error: %s depends on %s, recorded later\n", succ->describe().c_str(),
                 pred->describe().c_str());
    std::abort();
  }
#else
  (void)pred, (void)succ;
#endif
}

// Publishes the edge pred → succ in the list `head` (pred's completion or issue list).
// Returns false when the list was already sealed (pred completed or was issued
// meanwhile): then succ does not wait. The edge lives in succ->edges, whose room the
// prepare pass reserved (so no allocation here, and the edge's address is stable).
[[gnu::always_inline]] inline bool push_edge(std::atomic<Edge*>& head_ref, Instr* succ) {
  Edge& e = succ->edges.emplace_back();
  e.succ = succ;
  // Count the edge before publishing it: the submitter's own unit keeps pending > 0
  // whatever order the completer's decrement and this increment take.
  succ->pending.fetch_add(1, std::memory_order_relaxed);
  // Acquire (here and on a failed CAS below) pairs with the acq_rel exchange that seals the
  // list in complete() / mark_issued(): a sealed list means pred's result is visible.
  Edge* head = head_ref.load(std::memory_order_acquire);
  for (;;) {
    if (head == kSealed) {  // pred completed (or was issued) meanwhile: no wait needed
      succ->pending.fetch_sub(1, std::memory_order_relaxed);
      succ->edges.pop_back();
      return false;
    }
    e.next = head;
    // release publishes the edge to the completer's acq_rel exchange in complete() (or to
    // mark_issued()'s, for an issue edge).
    // Pairs with those exchanges; acquire on failure as for the load above.
    if (head_ref.compare_exchange_weak(head, &e, std::memory_order_release, std::memory_order_acquire)) return true;
  }
}

[[gnu::always_inline]] inline void note_dep(Instr* pred, Instr* succ, Object* obj, uint8_t flags) {
  // The same predecessor met again through the next object needs no second entry; a
  // repeat further back costs one entry more, which is harmless. A program's launch keeps
  // one entry per object: it checks each object's poison on its own (replay.cpp).
  if (!succ->deps.empty() && succ->deps.back().pred == pred && !is_launch(succ)) {
    succ->deps.back().flags |= flags;
    return;
  }
  pred->ref();
  succ->deps.push_back(Instr::Dep{pred, obj, flags});  // within the reserved capacity
}

// A value edge's entry in pred's issue list (Edge::holds_unit false): succ does not wait
// for pred's issue, but the walk of what waits for pred (Waits::find_waiter) must find it.
// False when the list is sealed (pred was issued meanwhile: an ordinary event wait then).
bool push_walk_edge(std::atomic<Edge*>& head_ref, Instr* succ) {
  Edge& e = succ->edges.emplace_back();
  e.succ = succ;
  e.holds_unit = false;
  // Acquire, here and on a failed CAS, pairs with the acq_rel exchange that seals the list.
  Edge* head = head_ref.load(std::memory_order_acquire);
  for (;;) {
    if (head == kSealed) {
      succ->edges.pop_back();
      return false;
    }
    e.next = head;
    // release publishes the entry to the walk's acquire loads (find_waiter); pairs with them.
    if (head_ref.compare_exchange_weak(head, &e, std::memory_order_release, std::memory_order_acquire)) return true;
  }
}

// Asynchronous → asynchronous (device.hpp): on the same device stream, stream order
// suffices; on another stream, succ is ordered after pred on the device when it is issued
// (kIssueWait), and succ waits for pred to be *issued* (an edge in pred's issue list)
// unless lane order already issues pred first or pred has been issued — or, where the
// backend can order them with a value (DeviceBackend::value_edge: kValueWait), does not
// wait for pred's issue at all. Never a host wait for device completion.
[[gnu::noinline]] void add_device_dep(Engine* engine, Instr* pred, Instr* succ, Object* obj, bool reads) {
  uint8_t flags = reads ? Instr::Dep::kReads : 0;
  // Acquire pairs with the seq_cst store of the terminal state in complete().
  if (pred->stream != succ->stream && !is_terminal(pred->load_state(std::memory_order_acquire))) {
    flags |= Instr::Dep::kIssueWait;
    if (pred->stream->lane != succ->stream->lane) {
      if (engine->device()->value_edge(pred, succ) && push_walk_edge(pred->issue_succ_head, succ)) {
        flags |= Instr::Dep::kValueWait;
      } else if (push_edge(pred->issue_succ_head, succ)) {
        flags |= Instr::Dep::kEdge;
      }
      if ((flags & (Instr::Dep::kEdge | Instr::Dep::kValueWait)) != 0)
        if (Observer* ob = engine->observer()) ob->on_edge(*pred, *succ, obj);
    }
  }
  if (flags != 0) note_dep(pred, succ, obj, flags);
}

// Notes that `succ` depends on `pred` through `obj`: keeps a reference for the poison check
// (reads) and diagnostics, and makes `succ` wait for `pred` unless lane order already
// implies it or pred has already completed.
[[gnu::always_inline]] inline void add_dep(Engine* engine, Instr* pred, Instr* succ, Object* obj, bool reads) {
  check_order(pred, succ);
  if (is_device(pred) && is_device(succ)) {
    add_device_dep(engine, pred, succ, obj, reads);
    return;
  }
  // Acquire pairs with the seq_cst store of the terminal state in complete().
  bool edge = !ordered_by_lane(pred, succ) && !is_terminal(pred->load_state(std::memory_order_acquire));
  if (edge) {
    edge = push_edge(pred->succ_head, succ);
    if (edge) {
      if (Observer* ob = engine->observer()) ob->on_edge(*pred, *succ, obj);
    }
  }
  if (!edge && !reads) return;
  note_dep(pred, succ, obj, uint8_t((reads ? Instr::Dep::kReads : 0) | (edge ? Instr::Dep::kEdge : 0)));
}

// Drops completed readers once the list has grown, so that an object read forever and
// never written keeps a bounded reader list. Allocates nothing.
void prune_readers(Object* o, Engine* engine) {
  auto& r = o->readers;
  if (r.size() < 32 || (r.size() & (r.size() - 1)) != 0) return;  // at 32, 64, 128, ...
  auto keep = std::remove_if(r.begin(), r.end(), [engine](Instr* x) {
    if (!is_terminal(x->load_state())) return false;
    if (x->unref()) engine->recycle(x);
    return true;
  });
  r.erase(keep, r.end());
}

// Every operand object's lock, taken in the operands' (ascending address) order and
// released by the destructor, so an exception anywhere unlocks them all.
class ObjectLocks {
 public:
  explicit ObjectLocks(const std::vector<Operand>& ops) : ops_(ops) {
    for (const Operand& op : ops_) {
      op.obj->lock.lock();
      ++held_;
    }
  }
  ~ObjectLocks() {
    for (size_t k = 0; k < held_; ++k) ops_[k].obj->lock.unlock();
  }
  ObjectLocks(const ObjectLocks&) = delete;
  ObjectLocks& operator=(const ObjectLocks&) = delete;

 private:
  const std::vector<Operand>& ops_;
  size_t held_ = 0;
};

// The prepare pass, under every operand's lock: reserves what the commit pass will add,
// so that the commit allocates nothing. May throw std::bad_alloc (nothing is published).
void reserve_room(Instr* i) {
  size_t preds = 0;
  for (const Operand& op : i->operands) {
    Object* o = op.obj;
    preds += (o->last_writer != nullptr ? 1 : 0) + ((op.access & FL_WRITE) ? o->readers.size() : 0);
    if ((op.access & FL_WRITE) == 0 && o->readers.size() == o->readers.capacity())
      o->readers.reserve(o->readers.size() * 2 + 4);
  }
  i->deps.reserve(preds);
  i->edges.reserve(preds);
}

// The commit pass for one operand of i: its edges from the object's last writer and
// readers, then i as the new last writer or a new reader. Under the object's lock.
void record_operand(Engine* engine, Instr* i, const Operand& op) {
  Object* o = op.obj;
  Instr* w = o->last_writer;
  if (w != nullptr) add_dep(engine, w, i, o, (op.access & FL_READ) != 0);  // RAW, or WAW for a write-only access
  if (op.access & FL_WRITE) {
    for (Instr* r : o->readers) {
      if (r != i) add_dep(engine, r, i, o, false);  // WAR
      if (r->unref()) engine->recycle(r);
    }
    o->readers.clear();
    i->ref();
    o->last_writer = i;
    if (w != nullptr && w->unref()) engine->recycle(w);
  } else {
    i->ref();
    o->readers.push_back(i);  // within the reserved capacity
    prune_readers(o, engine);
  }
}

}  // namespace

void Recorder::record_operands(Instr* i) {
  ObjectLocks locks(i->operands);
  reserve_room(i);  // the last point that may throw: nothing is published yet
  for (const Operand& op : i->operands) op.obj->refs.fetch_add(1, std::memory_order_relaxed);
  // The id is taken with every operand locked: a submission sharing an object with this
  // one took it before us or will take it after, consistently on every shared object.
  // acq_rel (no dearer than relaxed on x86: a locked add either way): whatever a submitter
  // did before taking a smaller id (creating a device stream) is visible to one taking a
  // larger id, which the CUDA backend's value-edge rule relies on (gpu/value_edges.cpp,
  // Slabs::streams). Pairs with the other submitters' fetch_adds here.
  i->id = next_id_.fetch_add(1, std::memory_order_acq_rel);
  for (const Operand& op : i->operands) record_operand(&engine_, i, op);
}

// Merges operands that name the same object into one, with the union of their accesses.
void merge_operands(std::vector<Operand>& v) {
  if (v.size() < 2) return;
  std::sort(v.begin(), v.end(), [](const Operand& a, const Operand& b) { return a.obj < b.obj; });
  size_t out = 0;
  for (size_t k = 0; k < v.size(); ++k) {
    if (out > 0 && v[out - 1].obj == v[k].obj)
      v[out - 1].access |= v[k].access;
    else
      v[out++] = v[k];
  }
  v.resize(out);
}

}  // namespace flowlane::core
