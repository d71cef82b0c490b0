// The in-flight window (core/engine/README.md, "The in-flight window"): a bound on the
// instructions submitted and not completed. A submission takes a slot (admit()), blocking
// while the window is full (or failing with FL_ERR_WOULD_BLOCK); a completion gives it back
// (retire()). Submissions from code the engine runs are admitted over the limit: they could
// be the very work that must finish to open the window.
//
// In flight = admitted_ - retired_, two counters on two cache lines: submitters write
// admitted_ (and keep retired_seen_, a lower bound of retired_, on their own line, so that
// while the window is not full a submitter never reads the completers' line), completers
// write retired_. A full window parks submitters on an epoch until it has drained to the
// low-water mark; completions notify once per arming, only while someone is parked.
//
// Owns: every counter below. Calls: Engine::observer() (Observer::on_window_stall, while a
// submitter parks), fail() for FL_ERR_WOULD_BLOCK. Called by: Engine::submit (admit, and
// retire when a submission fails after admission), Executor::complete (retire),
// CancelDrain::drain (fence_admissions, inflight), stats, the watchdog and the dump.
// No lock. The atomics it shares, and with whom:
//   waiters_ (seq_cst increment in park()) and retired_ (seq_cst fetch_add in retire()):
//     a store-load (Dekker) pair between a parking submitter and a completer: either the
//     completer sees the submitter registered, or the submitter sees the new retired_.
//   armed_, epoch_: a parked submitter reads the epoch, arms, then looks at retired_; the
//     completer that finds it armed disarms (exchange), bumps the epoch and notifies. All
//     seq_cst: a completer that found it unarmed read the flag before the arming, so the
//     look sees that completion; one that consumed the arming bumps the epoch after it was
//     read, so the sleep returns at once.
//   epoch_ and the `refuse` flag (fl_engine_drain's draining flag): a parked submitter
//     reads the epoch, then the flag; the drain stores the flag, then bumps the epoch and
//     notifies (refuse_parked()). All seq_cst: a submitter that did not see the flag read
//     the epoch before the bump, so its sleep returns at once.
//   admitted_ (acquire CAS in admit()) with the acq_rel RMW of fence_admissions(), which
//     fl_engine_drain makes after raising its flag: a submission from a thread of the
//     caller's either sees the drain's flag once admitted, or the drain sees its admission.
//   retired_ (acquire load in inflight()) with the seq_cst fetch_add in retire(): an
//     instruction seen retired has completed, and what it submitted was admitted before.
// wake_parked() is the one place parked submitters are woken (retire() calls it at the
// low-water mark).
#pragma once

#include <atomic>
#include <cstdint>

#include "base/cpu.hpp"

namespace flowlane::core {

class Engine;

inline constexpr uint64_t kDefaultInflightLimit = 4096;  // fl_engine_desc_t::inflight_limit 0

class Window {
 public:
  Window(const Engine& e, uint64_t limit) : engine_(e), limit_(limit != 0 ? limit : kDefaultInflightLimit) {}

  // Takes a slot, blocking while the window is full (FL_ERR_WOULD_BLOCK, thrown, when
  // `nonblocking`). `engine_run` (in_any_engine_context()): admitted over the limit, never
  // blocked. False (nothing taken) when `refuse` (may be null: fl_engine_drain's flag) is
  // seen set while the submitter is parked; refuse_parked() wakes them to look.
  bool admit(bool nonblocking, bool engine_run, const std::atomic<bool>* refuse = nullptr);
  // Wakes every parked submitter so that it looks at its `refuse` flag (fl_engine_drain,
  // after its seq_cst store of that flag).
  void refuse_parked();
  // Gives a slot back (a completion, or a submission that failed after admit()); wakes the
  // parked submitters once the window has drained to the low-water mark.
  void retire();
  // An RMW of admitted_ that orders the caller's earlier stores before any admission it
  // does not see (fl_engine_drain, after raising its flag; see the pairs above).
  void fence_admissions() { admitted_.fetch_add(0, std::memory_order_acq_rel); }  // pairs with admit()'s CAS

  // Instructions admitted and not yet retired. retired_ is read first: it never exceeds
  // admitted_, so the difference is never below the true count at the time of the first
  // load. Acquire pairs with the seq_cst fetch_add in retire().
  int64_t inflight() const {
    const uint64_t r = retired_.load(std::memory_order_acquire);  // pairs with retire()
    return int64_t(admitted_.load(std::memory_order_relaxed) - r);
  }
  uint64_t limit() const { return limit_; }
  int64_t low_water() const;  // parked submitters resume once in-flight drops to this
  uint32_t waiters() const { return waiters_.load(std::memory_order_relaxed); }  // parked submitters
  uint64_t stalls() const { return stalls_.load(std::memory_order_relaxed); }    // fl_engine_stats

 private:
  // A full window, blocking: sleeps until in-flight is at most low_water(), or `refuse` is
  // set (returns false then).
  [[gnu::cold, gnu::noinline]] bool park(const std::atomic<bool>* refuse);
  void wake_parked();

  const Engine& engine_;
  const uint64_t limit_;
  // --- written by submitters, for every instruction ---
  alignas(kCacheLine) std::atomic<uint64_t> admitted_{0};
  // A lower bound of retired_, kept by submitters: while admitted_ - retired_seen_ is under
  // the limit a submitter need not read the completers' line at all. Only grows.
  std::atomic<uint64_t> retired_seen_{0};
  // --- written by completers, for every instruction ---
  alignas(kCacheLine) std::atomic<uint64_t> retired_{0};
  // --- rarely written ---
  alignas(kCacheLine) std::atomic<uint32_t> waiters_{0};
  // Parked submitters sleep on the epoch; armed: one of them looked since the last bump.
  std::atomic<uint32_t> epoch_{0};
  std::atomic<uint32_t> armed_{0};
  std::atomic<uint64_t> stalls_{0};
};

}  // namespace flowlane::core
