// What every fl_submit_* of the C API shares (capi/src/submit.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "engine/engine.hpp"
#include "flowlane/flowlane.h"

namespace flowlane::capi {

// A record of engine `e` holding the C operands resolved: handles checked (NULL, stale,
// another engine's objects: FL_ERR_INVALID_HANDLE naming the operand's index), accesses
// checked. The caller passes it to Engine::submit() or discard()s it. Throws.
core::Instr* begin_submit(core::Engine& e, const fl_operand_t* ops, uint64_t n, const char* fn);

// The instruction whose context `ctx` is, if its function is running on this thread;
// else null, with the thread's last error saying why (fn names the caller).
core::Instr* instr_from_ctx(const fl_instr_ctx_t* ctx, const char* fn);

// FL_SUBMIT_NONBLOCKING is the only flag of a submission descriptor.
inline void check_submit_flags(uint64_t flags, const char* fn) {
  if ((flags & ~uint64_t(FL_SUBMIT_NONBLOCKING)) != 0)
    fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": unknown flags " + std::to_string(flags) +
                                      " (only FL_SUBMIT_NONBLOCKING is defined)");
}

}  // namespace flowlane::capi
