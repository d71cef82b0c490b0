// Numeric settings read from the environment (tuning knobs such as FLOWLANE_WAIT_SPIN_NS).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>

namespace flowlane {

// The value of the environment variable `name` as a count (a non-negative decimal integer),
// at most `max`; `fallback` when it is unset, empty, or not such a count.
inline int64_t env_count(const char* name, int64_t fallback, int64_t max) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == 0) return fallback;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  if (end == v || *end != 0 || x < 0) return fallback;
  return std::min<int64_t>(int64_t(x), max);
}

}  // namespace flowlane
