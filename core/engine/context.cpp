// Callback frames of the calling thread (engine/context.hpp).
#include "engine/context.hpp"

#include "base/error.hpp"
#include "engine/instr.hpp"
#include "sched/pool.hpp"

namespace flowlane::core {

namespace {
FL_TLS thread_local const Engine* t_completion_engine = nullptr;

// The innermost frame: this thread's own, or, on a worker running a body or task for a
// callback of another thread, that callback's (the pool keeps it as the thread's context).
CallbackFrame* frames() { return static_cast<CallbackFrame*>(const_cast<void*>(sched::current_context())); }
}  // namespace

CallbackFrame* current_frame() { return frames(); }

Instr* current_instr() {
  for (CallbackFrame* f = frames(); f != nullptr; f = f->parent)
    if (f->instr != nullptr) return f->instr;
  return nullptr;
}

CallbackFrame* pending_frame(const Engine* e) { return pending_frame_in(frames(), e); }

CallbackFrame* pending_frame_in(const CallbackFrame* innermost, const Engine* e) {
  for (CallbackFrame* f = const_cast<CallbackFrame*>(innermost); f != nullptr; f = f->parent) {
    if (f->engine != e || f->instr == nullptr) continue;
    // A group task's instruction may have completed meanwhile: then nothing waits for the
    // task. Acquire pairs with the seq_cst store of the terminal state in complete().
    if (f->kind == CallbackKind::kGroupTask && is_terminal(f->instr->load_state(std::memory_order_acquire))) continue;
    return f;
  }
  return nullptr;
}

Instr* pending_instr(const Engine* e) {
  CallbackFrame* f = pending_frame(e);
  return f != nullptr ? f->instr : nullptr;
}

bool in_engine_context(const Engine* e) {
  if (sched::Pool::current_owner() == e || t_completion_engine == e) return true;
  for (CallbackFrame* f = frames(); f != nullptr; f = f->parent)
    if (f->engine == e) return true;
  return false;
}

bool in_any_engine_context() {
  return frames() != nullptr || t_completion_engine != nullptr || sched::Pool::current() != nullptr;
}

void set_completion_thread(Engine* e) { t_completion_engine = e; }

}  // namespace flowlane::core
