// Dependence objects: the things instructions read and write. The engine keeps, per
// object, the last writer and the readers since it; the dependency rules that use them are
// in core/engine/submit.cpp, written down in core/engine/README.md.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "base/spinlock.hpp"
#include "flowlane/flowlane.h"

namespace flowlane::core {

class Engine;
struct Instr;

// Two cache lines: what submitters use (the lock and the dependency state) and the
// reference count, which every completing instruction decrements. On one line, each
// completion on a worker took the line away from the thread submitting the next user.
struct alignas(64) Object {
  Engine* engine = nullptr;
  uint64_t handle = 0;  // the caller's fl_object_t* value (0 once stale)
  void* user_data = nullptr;
  fl_release_fn release = nullptr;

  SpinLock lock;                // guards the fields below
  Instr* last_writer = nullptr; // referenced
  std::vector<Instr*> readers;  // referenced; the reads since last_writer

  // Engine's intrusive list of live objects (under the engine's objects mutex).
  Object* prev = nullptr;
  Object* next = nullptr;

  // One reference for the caller's handle plus one per in-flight instruction using it.
  alignas(64) std::atomic<int64_t> refs{1};
};

}  // namespace flowlane::core
