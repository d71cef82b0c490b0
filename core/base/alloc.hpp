// Internal allocations go through mimalloc (thread-local free lists, no global lock).
#pragma once

#include <cstddef>
#include <new>

#include <mimalloc.h>

namespace flowlane {

// Base for internal records: class-level new/delete backed by mimalloc. Under sanitizers
// the sanitizer's own allocator is used instead: mimalloc is not instrumented, so TSan
// cannot see the synchronisation inside its cross-thread frees, and ASan could not
// track the records' lifetimes.
struct MiAllocated {
#if defined(FL_UNDER_SANITIZER) && FL_UNDER_SANITIZER
  static void* operator new(std::size_t n) { return ::operator new(n); }
  static void operator delete(void* p) noexcept { ::operator delete(p); }
#else
  static void* operator new(std::size_t n) { return mi_new(n); }
  static void operator delete(void* p) noexcept { mi_free(p); }
#endif
};

}  // namespace flowlane
