// Dependence objects: creation, the last reference (release callbacks) and fl_object_wait.
#include <algorithm>
#include <string>
#include <vector>

#include "engine/engine.hpp"

namespace flowlane::core {

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

void Engine::release_object_ref(Object* o, Instr* completing) {
  // acq_rel: the last dropper sees every user's writes before running release.
  // Pairs with the other droppers' fetch_sub here (completions and fl_object_release).
  if (o->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  destroy_object(o, completing);
}

void Engine::destroy_object(Object* o, Instr* completing) {
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
    CallbackScope frame(this, completing, CallbackKind::kRelease);
    try {
      o->release(o->user_data);
    } catch (...) {
      // A release callback must not throw; nothing to report it to.
    }
  }
  delete o;
}

bool Engine::sleep_until_terminal(Instr* i, const std::atomic<bool>* cancelled, const Deadline& deadline) {
  // acquire pairs with the release store in cancel_cycle_waits() (diag/dump.cpp).
  auto done = [i, cancelled] {
    // Both acquire: pair with complete()'s store of the state and that release store.
    return is_terminal(i->load_state()) || (cancelled != nullptr && cancelled->load(std::memory_order_acquire));
  };
  return sched::wait(done, [i, &done](const Deadline& d) {
    // seq_cst increment, then the state load: the store–load pair with complete().
    i->sleepers.fetch_add(1, std::memory_order_seq_cst);
    for (;;) {
      uint32_t v = i->state.load(std::memory_order_seq_cst);  // the load half of that store-load pair
      if (done()) break;
      // Woken by complete(), or by a cancel (which does not change v).
      if (d.infinite()) {
        futex_wait(&i->state, v);
      } else {
        int64_t left = d.remaining_ns();
        if (left == 0) break;
        futex_wait_for(&i->state, v, left);
      }
    }
    i->sleepers.fetch_sub(1, std::memory_order_relaxed);
  }, deadline);
}

fl_status_t Engine::wait_object(Object* o, uint32_t access, const Deadline& deadline) {
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
  // Called from a callback whose instruction is still pending: waiting for that instruction,
  // or for one queued behind it on its own lane (which cannot start before it completes),
  // could never return.
  // (Not a group task's frame once its instruction has completed: its waits are free.)
  CallbackFrame* frame = pending_frame(this);
  Instr* self = frame != nullptr ? frame->instr : nullptr;
  // The caller's own access to the object (0 if it does not list it). A user of the object
  // recorded after the caller depends on it when either of the two writes: waiting for that
  // user would wait for the caller too, on any lane.
  uint32_t own_access = 0;
  if (self != nullptr)
    for (const Operand& op : self->operands)
      if (op.obj == o) own_access |= op.access;
  for (Instr* w : waits) {
    if (self == nullptr) break;
    // Acquire pairs with the seq_cst store of the terminal state in complete().
    const bool later = w->id > self->id && !is_terminal(w->load_state(std::memory_order_acquire));
    const bool behind = later && w->stream->lane == self->stream->lane;
    const bool depends = later && own_access != 0 && ((own_access & FL_WRITE) != 0 || w == writer);
    if (w != self && !behind && !depends) continue;
    std::string msg = w == self ? "fl_object_wait: the calling instruction " + self->describe() +
                                      " uses this object itself and would wait for its own completion"
                      : behind  ? "fl_object_wait: the object's pending user " + w->describe() +
                                     " is queued behind the calling instruction " + self->describe() +
                                     " on its own lane, so it cannot start before the caller returns; depend on the "
                                     "object through an operand instead"
                                : "fl_object_wait: the object's pending user " + w->describe() +
                                     " was recorded after the calling instruction " + self->describe() +
                                     ", which uses this object itself, so it waits for the caller to complete";
    for (Instr* x : waits)
      if (x->unref()) recycle(x);
    fail(FL_ERR_INVALID_ARGUMENT, msg);
  }
  // A later user may also wait for the caller through other objects (and the lanes of the
  // instructions in between).
  if (self != nullptr) {
    fl_instr_id upto = 0;
    for (Instr* w : waits) upto = std::max(upto, w->id);
    std::string chain;
    Instr* w = upto > self->id ? find_waiter(frame, upto, [&waits](const Instr* x) {
      return std::find(waits.begin(), waits.end(), x) != waits.end();
    }, &chain) : nullptr;
    if (w != nullptr) {
      std::string msg = "fl_object_wait: the object's pending user " + w->describe() +
                        " waits for the calling instruction to complete (" + self->describe() + " -> " + chain +
                        "), so it cannot complete before the caller returns";
      for (Instr* x : waits)
        if (x->unref()) recycle(x);
      fail(FL_ERR_INVALID_ARGUMENT, msg);
    }
  }
  // Inside a device function: what its lane issued before could never be seen to complete
  // while the lane runner waits here; have the backend track it first.
  if (frame != nullptr && frame->kind == CallbackKind::kFn && on_this_thread(frame) && !self->stream->is_host_executed())
    executor_.flush_device(self->stream->lane);
  Observer* ob = observer();
  if (ob) ob->on_wait(true, "fl_object_wait");
  Lane* my_lane = self ? self->stream->lane : nullptr;
  Instr* cancelled = nullptr;  // engine destroy gave up this wait: it was on a wait cycle
  for (Instr* w : waits) {
    // Tell diagnostics what the running instruction waits for (Lane::waits): the dump shows
    // it, and drain and destroy give it up when it is on a cycle of waits.
    WaitRecord rec;
    if (my_lane != nullptr) {
      w->ref();  // the record's reference
      rec.by = self;
      rec.on = w;
      rec.obj = o->handle;  // o is alive here: the caller's handle is valid
      std::lock_guard<SpinLock> lock(my_lane->diag_lock);
      my_lane->add_wait(&rec);
    }
    const bool reached = sleep_until_terminal(w, my_lane != nullptr ? &rec.cancelled : nullptr, deadline);
    if (my_lane != nullptr) {
      {
        std::lock_guard<SpinLock> lock(my_lane->diag_lock);
        my_lane->remove_wait(&rec);
        // Read under diag_lock, where it is set.
        if (reached && !is_terminal(w->load_state()) && rec.cancelled.load(std::memory_order_relaxed)) cancelled = w;
      }
      if (w->unref()) recycle(w);  // the record's reference (the wait's own is in `waits`)
    }
    if (!reached) {
      std::string msg = "fl_object_wait_for: timed out; the object's pending user " + w->describe() +
                        " has not completed (nothing was consumed: wait again)";
      if (ob) ob->on_wait(false, "fl_object_wait");
      for (Instr* x : waits)
        if (x->unref()) recycle(x);
      return report(FL_ERR_TIMEOUT, msg);
    }
    if (cancelled != nullptr) {
      std::string msg = "fl_object_wait in " + self->describe() + " was cancelled: the engine is being drained or destroyed " +
                        "and this wait for " + w->describe() + " was on a cycle of waits (a deadlock)";
      if (ob) ob->on_wait(false, "fl_object_wait");
      for (Instr* x : waits)
        if (x->unref()) recycle(x);
      return report(FL_ERR_CANCELLED, msg);
    }
  }
  // A user's state turns terminal before its completion has finished: the release callbacks
  // it runs, its stream's counters and its id's completion (complete()) follow. A program
  // thread also waits for that rest, so that what it asks next (a stream wait, an instruction
  // query, stats) sees these users complete. Code an engine runs returns at the state, as its
  // dependents start: a release callback run by a user's completion may itself wait for the
  // caller, and waiting for that completion's end would then be a cycle.
  if (!in_any_engine_context()) {
    for (Instr* w : waits) {
      if (w->stream->wait_completed_id(w->id, deadline)) continue;
      std::string msg = "fl_object_wait_for: timed out; the object's pending user " + w->describe() +
                        " has finished but its completion (release callbacks) is still running (nothing was "
                        "consumed: wait again)";
      if (ob) ob->on_wait(false, "fl_object_wait");
      for (Instr* x : waits)
        if (x->unref()) recycle(x);
      return report(FL_ERR_TIMEOUT, msg);
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
      ledger_.family_returned(writer->root);  // observed: a synchronize will not return it again
    }
  }
  for (Instr* w : waits)
    if (w->unref()) recycle(w);
  if (st != FL_OK) return report(st, msg);
  return FL_OK;
}

}  // namespace flowlane::core
