// The C boundary. Every exported function body runs inside guard(): nothing but a status
// crosses extern "C". flowlane::Error → its status and message; std::bad_alloc →
// FL_ERR_NO_MEMORY; any other exception → FL_ERR_INTERNAL with its text. A success clears
// the thread's last error message.
#pragma once

#include <exception>
#include <new>
#include <cstring>
#include <string>
#include <type_traits>

#include "base/error.hpp"
#include "engine/engine.hpp"
#include "flowlane/flowlane.h"

namespace flowlane::capi {

template <class F>
inline fl_status_t guard(F&& f) noexcept {
  try {
    fl_status_t s = f();
    if (s == FL_OK) clear_last_error();
    return s;
  } catch (const Error& e) {
    set_last_error(e.message);
    return e.status;
  } catch (const std::bad_alloc&) {
    set_last_error("out of memory");
    return FL_ERR_NO_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(std::string("internal error: ") + e.what());
    return FL_ERR_INTERNAL;
  } catch (...) {
    set_last_error("internal error: unknown exception");
    return FL_ERR_INTERNAL;
  }
}

// Throws FL_ERR_INVALID_ARGUMENT naming the parameter when p is NULL.
template <class T>
inline void require_out(T* p, const char* fn, const char* param) {
  if (p == nullptr) fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": " + param + " is NULL");
}

// Checks a size-prefixed descriptor: struct_size at least `known_min` (the first released
// layout) and any bytes beyond sizeof(Desc) all zero.
// The common case (a descriptor of exactly this library's layout) is one comparison; the
// rest, and every message, is out of line.
template <class Desc>
[[gnu::cold, gnu::noinline]] void check_desc_slow(const Desc* d, const char* fn, const char* type, uint64_t known_min);

template <class Desc>
inline void check_desc(const Desc* d, const char* fn, const char* type, uint64_t known_min = sizeof(Desc)) {
  if (d != nullptr && d->struct_size == sizeof(Desc)) [[likely]]
    return;
  check_desc_slow(d, fn, type, known_min);
}

template <class Desc>
void check_desc_slow(const Desc* d, const char* fn, const char* type, uint64_t known_min) {
  if (d == nullptr) fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": descriptor is NULL");
  uint64_t size = d->struct_size;
  if (size < known_min)
    fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": " + type + ".struct_size is " + std::to_string(size) +
                                      ", expected sizeof(" + type + ") = " + std::to_string(sizeof(Desc)) +
                                      " (initialize it with the _INIT macro)");
  if (size > sizeof(Desc)) {
    if (size > (1u << 16))
      fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": " + type + ".struct_size " + std::to_string(size) +
                                        " is implausibly large");
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(d);
    for (uint64_t i = sizeof(Desc); i < size; ++i)
      if (bytes[i] != 0)
        fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": " + type + " has non-zero bytes beyond the " +
                                          std::to_string(sizeof(Desc)) +
                                          " this library knows (a newer header's field is set; upgrade libflowlane)");
  }
}

// The bits of an enum parameter that came from C. C callers may pass any int; reading it as
// the C++ enum type would be undefined for values outside the enumerators.
template <class E>
inline int64_t enum_bits(const E& e) {
  std::underlying_type_t<E> v;
  std::memcpy(&v, &e, sizeof v);
  return int64_t(v);
}

}  // namespace flowlane::capi
