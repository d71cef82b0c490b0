// What every fl_submit_* of the C API shares (capi/src/submit.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "engine/engine.hpp"
#include "handles.hpp"
#include "flowlane/flowlane.h"

namespace flowlane::capi {

// A record of engine `e` holding the C operands resolved: handles checked (NULL, stale,
// another engine's objects: FL_ERR_INVALID_HANDLE naming the operand's index), accesses
// checked. The caller passes it to Engine::submit() or discard()s it. Throws.
core::Instr* begin_submit_with_operands(core::Engine& e, const fl_operand_t* ops, uint64_t n, const char* fn);
// Inline: an instruction without operands needs only a record (records come with none;
// see core::Instr), which spares a call per submission on the commonest path.
inline core::Instr* begin_submit(core::Engine& e, const fl_operand_t* ops, uint64_t n, const char* fn) {
  if (n == 0) return e.new_instr();
  return begin_submit_with_operands(e, ops, n, fn);
}

// The instruction whose context `ctx` is, if its function is running on this thread;
// else null, with the thread's last error saying why (fn names the caller).
core::Instr* instr_from_ctx(const fl_instr_ctx_t* ctx, const char* fn);

// What an fl_instr_ctx_t* stands for: an instruction whose function runs on this thread, or
// a program's node replayed on this thread (its frame: engine/program.hpp). Neither when
// the context is invalid (the thread's last error then says why).
struct Ctx {
  core::Instr* instr = nullptr;
  core::ReplayFrame* replay = nullptr;
  explicit operator bool() const { return instr != nullptr || replay != nullptr; }
  std::string& error() { return replay ? replay->error : instr->error; }
  // A replayed node: the lane it was captured on, its launch's id and engine.
  uint32_t lane() const {
    return replay ? replay->program->node_lane(replay->node) : instr ? instr->stream->lane->id : 0;
  }
  fl_instr_id id() const { return replay ? replay->launch->id : instr ? instr->id : 0; }
  fl_engine_t* engine() const {
    const core::Instr* i = replay ? replay->launch : instr;
    return i ? handle_cast<fl_engine_t>(i->engine->handle()) : nullptr;
  }
};
Ctx ctx_from(const fl_instr_ctx_t* ctx, const char* fn);

// Out of line: every refusal of check_submit_flags(), with its message.
[[gnu::cold, gnu::noinline]] inline void check_submit_flags_slow(uint64_t flags, const char* fn, bool host) {
  if (!host && (flags & FL_SUBMIT_INLINE) != 0)
    fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": FL_SUBMIT_INLINE applies to host instructions "
                                                    "(fl_submit_host) only; device work is always issued by its lane");
  const uint64_t known = FL_SUBMIT_NONBLOCKING | (host ? FL_SUBMIT_INLINE : 0u);
  if ((flags & ~known) != 0)
    fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": unknown flags " + std::to_string(flags) +
                                      (host ? " (FL_SUBMIT_NONBLOCKING and FL_SUBMIT_INLINE are defined)"
                                            : " (only FL_SUBMIT_NONBLOCKING is defined)"));
}

// The flags of a submission descriptor: FL_SUBMIT_NONBLOCKING everywhere, FL_SUBMIT_INLINE
// for host instructions only (`host`). The accepted case is one test.
inline void check_submit_flags(uint64_t flags, const char* fn, bool host = false) {
  const uint64_t known = FL_SUBMIT_NONBLOCKING | (host ? FL_SUBMIT_INLINE : 0u);
  if ((flags & ~known) == 0) [[likely]]
    return;
  check_submit_flags_slow(flags, fn, host);
}

}  // namespace flowlane::capi
