// Dependence objects: creation, the last reference (release callbacks) and destroy's release
// of the objects the caller still holds (engine/object.hpp).
#include "engine/object.hpp"

#include "engine/engine.hpp"

namespace flowlane::core {

Object* Objects::create(void* user_data, fl_release_fn release) {
  Object* o = new Object();
  o->engine = &engine_;
  o->user_data = user_data;
  o->release = release;
  std::lock_guard<std::mutex> lock(mu_);
  o->next = head_;
  if (head_) head_->prev = o;
  head_ = o;
  return o;
}

void Objects::destroy(Object* o, Instr* completing) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (o->prev) o->prev->next = o->next;
    else head_ = o->next;
    if (o->next) o->next->prev = o->prev;
  }
  if (o->last_writer != nullptr && o->last_writer->unref()) engine_.recycle(o->last_writer);
  for (Instr* r : o->readers)
    if (r->unref()) engine_.recycle(r);
  if (o->release != nullptr) {
    // The callback may wait for anything, a lane this thread took on to run after its own
    // included (Lane::continue_here): that lane goes to the pool first.
    Lane::hand_off_taken();
    CallbackScope frame(&engine_, completing, CallbackKind::kRelease);
    try {
      o->release(o->user_data);
    } catch (...) {
      // A release callback must not throw; nothing to report it to.
    }
  }
  delete o;
}

void Objects::release_all() {
  // A release callback may call back in (stats, dumps, waits; a submission answers
  // FL_ERR_SHUTDOWN), and may release other objects: the head is read again each time.
  for (;;) {
    Object* o;
    {
      std::lock_guard<std::mutex> lock(mu_);
      o = head_;
    }
    if (o == nullptr) break;
    engine_.forget_handle(o->handle);  // stale from now on
    destroy(o, nullptr);
  }
}

}  // namespace flowlane::core
