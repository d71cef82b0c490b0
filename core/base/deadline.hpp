// A point in time a wait gives up at (the timed waits of the C API: fl_object_wait_for and
// the other *_for calls). Deadline::forever() never passes.
#pragma once

#include <chrono>
#include <cstdint>

namespace flowlane {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline forever() { return Deadline(); }
  // `ns` from now; UINT64_MAX (FL_WAIT_FOREVER) is forever, 0 has already passed.
  static Deadline after_ns(uint64_t ns) {
    Deadline d;
    if (ns == UINT64_MAX) return d;
    d.infinite_ = false;
    // Clamp far-away deadlines instead of overflowing the clock's representation.
    constexpr uint64_t kMaxNs = uint64_t(1) << 62;
    d.at_ = Clock::now() + std::chrono::nanoseconds(int64_t(ns < kMaxNs ? ns : kMaxNs));
    return d;
  }

  bool infinite() const { return infinite_; }
  bool passed() const { return !infinite_ && Clock::now() >= at_; }
  // Nanoseconds left (0 once passed); meaningless when infinite().
  int64_t remaining_ns() const {
    if (infinite_) return INT64_MAX;
    auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(at_ - Clock::now()).count();
    return left > 0 ? left : 0;
  }
  Clock::time_point at() const { return at_; }

 private:
  bool infinite_ = true;
  Clock::time_point at_{};
};

}  // namespace flowlane
