// Callback frames of the calling thread (engine/context.hpp).
#include "engine/context.hpp"

#include "base/error.hpp"
#include "sched/pool.hpp"

namespace flowlane::core {

namespace {
FL_TLS thread_local CallbackFrame* t_frame = nullptr;
FL_TLS thread_local const Engine* t_completion_engine = nullptr;
}  // namespace

CallbackScope::CallbackScope(Engine* e, Instr* instr, CallbackKind kind)
    : frame_{e, instr, kind, t_frame}, region_(sched::RegionScope::kFresh) {
  t_frame = &frame_;
}

CallbackScope::~CallbackScope() { t_frame = frame_.parent; }

CallbackFrame* current_frame() { return t_frame; }

Instr* current_instr() {
  for (CallbackFrame* f = t_frame; f != nullptr; f = f->parent)
    if (f->instr != nullptr) return f->instr;
  return nullptr;
}

Instr* pending_instr(const Engine* e) {
  for (CallbackFrame* f = t_frame; f != nullptr; f = f->parent)
    if (f->engine == e && f->instr != nullptr) return f->instr;
  return nullptr;
}

bool in_engine_context(const Engine* e) {
  if (sched::Pool::current_owner() == e || t_completion_engine == e) return true;
  for (CallbackFrame* f = t_frame; f != nullptr; f = f->parent)
    if (f->engine == e) return true;
  return false;
}

bool in_any_engine_context() {
  return t_frame != nullptr || t_completion_engine != nullptr || sched::Pool::current() != nullptr;
}

void set_completion_thread(Engine* e) { t_completion_engine = e; }

}  // namespace flowlane::core
