// Dependency inference: per object, the last writer and the readers since it.
//   read  -> waits for the last writer (RAW);
//   write -> waits for the last writer (WAW) and every reader since it (WAR), then the
//            reader list restarts from this write.
// Edges between instructions that run in order on the same lane are not recorded: lane
// order already implies them (the lane's submit lock makes queue order and recording
// order agree). No global lock: the submitting thread records edges under the lane's and
// each object's spin lock, and completion releases successors with atomic counters.
#include <algorithm>
#include <string>

#include "core/engine.hpp"
#include "core/error.hpp"

namespace flowlane::core {

namespace {

// True when `before` is certain to have completed by the time `after` starts, without an
// edge: `before` runs synchronously on the lane (a host-executed stream: it completes
// before the lane moves on) and `after` was queued on the same lane later. A device
// instruction completes only on the GPU, so it never orders its lane's successors.
bool ordered_by_lane(const Instr* before, const Instr* after) {
  return before->stream->lane == after->stream->lane && before->stream->is_host_executed();
}

bool is_device(const Instr* x) { return !x->stream->is_host_executed(); }

// Publishes the edge pred → succ in the list `head` (pred's completion or launch list).
// Returns false when the list was already sealed (pred completed or launched meanwhile):
// then succ does not wait.
bool push_edge(std::atomic<Edge*>& head_ref, Instr* succ) {
  Edge* e = succ->inline_edges_used < Instr::kInlineEdges ? &succ->inline_edges[succ->inline_edges_used++]
                                                         : new Edge();
  e->succ = succ;
  // Count the edge before publishing it: the submitter's own unit keeps pending > 0
  // whatever order the completer's decrement and this increment take.
  succ->pending.fetch_add(1, std::memory_order_relaxed);
  Edge* head = head_ref.load(std::memory_order_acquire);
  for (;;) {
    if (head == kSealed) {  // pred completed (or launched) meanwhile: no wait needed
      succ->pending.fetch_sub(1, std::memory_order_relaxed);
      bool inline_edge = e >= succ->inline_edges && e < succ->inline_edges + Instr::kInlineEdges;
      if (inline_edge)
        --succ->inline_edges_used;
      else
        delete e;
      return false;
    }
    e->next = head;
    // release publishes the edge to the completer's acq_rel exchange in complete() (or the
    // launcher's in execute_device()).
    if (head_ref.compare_exchange_weak(head, e, std::memory_order_release, std::memory_order_acquire)) return true;
  }
}

void note_dep(Instr* pred, Instr* succ, Object* obj, uint8_t flags) {
  // A read after a write of the same instruction's deps needs only one entry per pred.
  for (Instr::Dep& d : succ->deps) {
    if (d.pred == pred) {
      d.flags |= flags;
      return;
    }
  }
  pred->ref();
  succ->deps.push_back(Instr::Dep{pred, obj, flags});
}

// Device → device (DESIGN rule 3): on the same CUDA stream, stream order suffices; on
// another stream, succ's launch makes its stream wait for pred's event (kLaunchWait), and
// succ waits for pred's *launch* (an edge in pred's launch list) unless lane order
// already launches pred first or pred has launched. Never a host wait for GPU completion.
void add_device_dep(Engine* engine, Instr* pred, Instr* succ, Object* obj, bool reads) {
  uint8_t flags = reads ? Instr::Dep::kReads : 0;
  if (pred->stream != succ->stream && !is_terminal(pred->load_state(std::memory_order_acquire))) {
    flags |= Instr::Dep::kLaunchWait;
    if (pred->stream->lane != succ->stream->lane && push_edge(pred->launch_succ_head, succ)) {
      flags |= Instr::Dep::kEdge;
      if (Observer* ob = engine->observer()) ob->on_edge(*pred, *succ, obj);
    }
  }
  if (flags != 0) note_dep(pred, succ, obj, flags);
}

// Notes that `succ` depends on `pred` through `obj`: keeps a reference for the poison check
// (reads) and diagnostics, and makes `succ` wait for `pred` unless lane order already
// implies it or pred has already completed.
void add_dep(Engine* engine, Instr* pred, Instr* succ, Object* obj, bool reads) {
  if (is_device(pred) && is_device(succ)) {
    add_device_dep(engine, pred, succ, obj, reads);
    return;
  }
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
// never written keeps a bounded reader list.
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

}  // namespace

void Engine::record(Instr* i, const Operand& op) {
  Object* o = op.obj;
  std::lock_guard<SpinLock> lock(o->lock);
  Instr* w = o->last_writer;
  if (w != nullptr) add_dep(this, w, i, o, (op.access & FL_READ) != 0);  // RAW, or WAW for a write-only access
  if (op.access & FL_WRITE) {
    for (Instr* r : o->readers) {
      if (r != i) add_dep(this, r, i, o, false);  // WAR
      if (r->unref()) recycle(r);
    }
    o->readers.clear();
    i->ref();
    o->last_writer = i;
    if (w != nullptr && w->unref()) recycle(w);
  } else {
    i->ref();
    o->readers.push_back(i);
    prune_readers(o, this);
  }
}

fl_instr_id Engine::submit(Instr* i) {
  Stream* s = i->stream;
  Lane& lane = *s->lane;
  for (const Operand& op : i->operands) op.obj->refs.fetch_add(1, std::memory_order_relaxed);
  i->refs.store(1, std::memory_order_relaxed);      // the in-flight reference, dropped at completion
  i->pending.store(2, std::memory_order_relaxed);   // the submitter's unit + the lane's unit
  i->state.store(uint32_t(InstrState::kPending), std::memory_order_relaxed);

  lane.submit_lock.lock();
  if (shutdown_.load(std::memory_order_acquire)) {  // pairs with the release store in drain_and_stop()
    lane.submit_lock.unlock();
    for (const Operand& op : i->operands) release_object_ref(op.obj);
    fail(FL_ERR_SHUTDOWN, "the engine is being destroyed: no new instructions are accepted");
  }
  i->id = next_id_.fetch_add(1, std::memory_order_relaxed);
  i->seq = s->submitted.load(std::memory_order_relaxed) + 1;
  s->submitted.store(i->seq, std::memory_order_release);  // pairs with acquire in synchronize()
  for (const Operand& op : i->operands) record(i, op);
  lane.submitted.fetch_add(1, std::memory_order_relaxed);
  fl_instr_id id = i->id;
  lane.push(i);
  if (Observer* ob = observer()) ob->on_submit(*i);
  lane.submit_lock.unlock();

  // Drop the submitter's unit. If that was the last one, the lane already reached i and is
  // blocked on it (it stays owned), so resume it; otherwise make sure the lane runs.
  if (i->pending.fetch_sub(1, std::memory_order_acq_rel) == 1)
    pool_->submit(&lane.task);
  else
    lane.schedule();
  return id;  // i may already be recycled: not touched after the fetch_sub
}

// ---------------------------------------------------------------------------------------
// Objects

Object* Engine::create_object(void* user_data, fl_release_fn release) {
  Object* o = new Object();
  o->engine = this;
  o->user_data = user_data;
  o->release = release;
  std::lock_guard<std::mutex> lock(objects_mu_);
  o->next = objects_head_;
  if (objects_head_) objects_head_->prev = o;
  objects_head_ = o;
  return o;
}

void Engine::release_object_ref(Object* o) {
  // acq_rel: the last dropper sees every user's writes before running release.
  if (o->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  destroy_object(o);
}

void Engine::destroy_object(Object* o) {
  {
    std::lock_guard<std::mutex> lock(objects_mu_);
    if (o->prev) o->prev->next = o->next;
    else objects_head_ = o->next;
    if (o->next) o->next->prev = o->prev;
  }
  if (o->last_writer != nullptr && o->last_writer->unref()) recycle(o->last_writer);
  for (Instr* r : o->readers)
    if (r->unref()) recycle(r);
  if (o->release != nullptr) {
    try {
      o->release(o->user_data);
    } catch (...) {
      // A release callback must not throw; nothing to report it to.
    }
  }
  delete o;
}

fl_status_t Engine::wait_object(Object* o, uint32_t access) {
  std::vector<Instr*> waits;
  Instr* writer = nullptr;
  {
    std::lock_guard<SpinLock> lock(o->lock);
    writer = o->last_writer;
    if (writer != nullptr) {
      writer->ref();
      waits.push_back(writer);
    }
    if (access & FL_WRITE) {
      for (Instr* r : o->readers) {
        r->ref();
        waits.push_back(r);
      }
    }
  }
  Instr* self = current_instr();
  for (Instr* w : waits) {
    if (w == self) {
      for (Instr* x : waits)
        if (x->unref()) recycle(x);
      fail(FL_ERR_INVALID_ARGUMENT, "fl_object_wait: the calling instruction " + self->describe() +
                                        " uses this object itself and would wait for its own completion");
    }
  }
  // Inside a device function: its lane's earlier launches without an event could never be
  // seen to complete while the lane runner waits here; record their event first.
  if (self != nullptr && !self->stream->is_host_executed()) cover_launched(self->stream->lane);
  Observer* ob = observer();
  if (ob) ob->on_wait(true, "fl_object_wait");
  Lane* my_lane = self ? self->stream->lane : nullptr;
  Instr* cancelled = nullptr;  // engine destroy gave up this wait: it was on a wait cycle
  for (Instr* w : waits) {
    if (my_lane != nullptr) {  // tell diagnostics what the running instruction waits for
      std::lock_guard<SpinLock> lock(my_lane->diag_lock);
      w->ref();
      my_lane->active_waits_on = w;
      my_lane->active_waits_obj = o;
      my_lane->wait_cancelled.store(false, std::memory_order_relaxed);
    }
    // acquire pairs with the release store in cancel_cycle_waits() (core/dump.cpp).
    block_until([w, my_lane] {
      return is_terminal(w->load_state()) ||
             (my_lane != nullptr && my_lane->wait_cancelled.load(std::memory_order_acquire));
    }, w->state);
    if (my_lane != nullptr) {
      {
        std::lock_guard<SpinLock> lock(my_lane->diag_lock);
        my_lane->active_waits_on = nullptr;
        my_lane->active_waits_obj = nullptr;
        if (!is_terminal(w->load_state()) && my_lane->wait_cancelled.load(std::memory_order_relaxed)) cancelled = w;
      }
      if (cancelled != nullptr) {
        std::string msg = "fl_object_wait in " + self->describe() + " was cancelled: the engine is being destroyed " +
                          "and this wait for " + w->describe() + " was on a cycle of waits (a deadlock)";
        if (w->unref()) recycle(w);
        if (ob) ob->on_wait(false, "fl_object_wait");
        for (Instr* x : waits)
          if (x->unref()) recycle(x);
        return report(FL_ERR_CANCELLED, msg);
      }
      if (w->unref()) recycle(w);
    }
  }
  if (ob) ob->on_wait(false, "fl_object_wait");
  fl_status_t st = FL_OK;
  std::string msg;
  if (writer != nullptr) {
    InstrState ws = writer->load_state();
    if (ws == InstrState::kFailed || ws == InstrState::kSkipped) {
      st = writer->status;
      msg = writer->error;
      writer->reported.store(true, std::memory_order_relaxed);
    }
  }
  for (Instr* w : waits)
    if (w->unref()) recycle(w);
  if (st != FL_OK) return report(st, msg);
  return FL_OK;
}

}  // namespace flowlane::core
