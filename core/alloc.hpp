// Internal allocations go through mimalloc (thread-local free lists, no global lock).
#pragma once

#include <cstddef>
#include <new>

#include <mimalloc.h>

namespace flowlane::core {

// Base for internal records: class-level new/delete backed by mimalloc.
struct MiAllocated {
  static void* operator new(std::size_t n) { return mi_new(n); }
  static void operator delete(void* p) noexcept { mi_free(p); }
};

}  // namespace flowlane::core
