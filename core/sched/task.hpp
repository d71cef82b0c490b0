// Intrusive unit of work for the pool. The pool never owns or frees a Task: whoever
// submits one keeps it alive until its run() has returned (lanes embed one, fork-join
// helpers keep theirs on the waiting frame).
#pragma once

#include <cstdint>

#include "base/error.hpp"  // FL_TLS

namespace flowlane::sched {

// Isolation regions (core/sched/README.md, "Waiting inside tasks"). Every task carries the
// region of the code that submitted it; a worker that waits helps only with tasks of its
// own region, so it never runs, on top of a suspended frame, work that could wait for that
// frame.
//   kRegionTop   a task not submitted yet (no code runs in it)
//   kLaneTag     an engine lane's task: run only by a worker's top-level loop, never by a
//                waiter
//   >= kFirstRegion  a region opened by an engine callback (RegionScope), a program thread's
//                own, a task group's (spawns from a program thread), and their children
inline constexpr uint64_t kRegionTop = 0;
inline constexpr uint64_t kLaneTag = 1;
inline constexpr uint64_t kFirstRegion = 2;

struct Task {
  using RunFn = void (*)(Task* self);
  RunFn run = nullptr;
  // The region the task belongs to: set by Pool::submit from the submitting thread's
  // region, except for lane tasks, which are created with kLaneTag and keep it.
  uint64_t tag = kRegionTop;
};

// A region nobody has used yet (a task group's: sched/task_group.hpp). No shared atomic:
// regions are handed out to threads in blocks.
uint64_t new_region();

// Opens a region for the lifetime of the scope and restores the previous one at its end.
// kFresh: a new region (an engine callback, whose waits must not run other callbacks'
// work); any other value: that region (a worker running a task of that region).
// (The scopes below are inline: every instruction's callback opens both.)
namespace detail {
extern constinit FL_TLS thread_local uint64_t t_region;       // defined in pool.cpp
extern constinit FL_TLS thread_local const void* t_context;  // defined in pool.cpp
inline constexpr uint64_t kRegionFresh = ~uint64_t(0);       // RegionScope::kFresh
}  // namespace detail

// The calling thread's region: inside a RegionScope, the scope's region (one opened with
// kFresh: a region of its own, allocated on first use); outside every scope, a region of the
// thread's own, allocated on first use. kRegionTop is the tag of a task not submitted yet;
// no code runs in it.
inline uint64_t current_region() {
  if (__builtin_expect(detail::t_region == detail::kRegionFresh, 0)) detail::t_region = new_region();
  return detail::t_region;
}

class RegionScope {
 public:
  static constexpr uint64_t kFresh = detail::kRegionFresh;
  explicit RegionScope(uint64_t region) : saved_(detail::t_region) { detail::t_region = region; }
  ~RegionScope() { detail::t_region = saved_; }
  RegionScope(const RegionScope&) = delete;
  RegionScope& operator=(const RegionScope&) = delete;

 private:
  uint64_t saved_;
};

// The calling thread's context: a pointer the pool never reads, kept by the layer above (the
// engine's callback frames: core/engine/context.hpp). fl_parallel_for and task graphs
// capture their caller's context and make it current on whichever thread runs their bodies
// and tasks, while the caller waits for them: work run on behalf of a callback counts as
// part of that callback, on every thread (its waits are refused the same way).
inline const void* current_context() { return detail::t_context; }

// Makes `context` the calling thread's context for the lifetime of the scope.
class ContextScope {
 public:
  explicit ContextScope(const void* context) : saved_(detail::t_context) { detail::t_context = context; }
  ~ContextScope() { detail::t_context = saved_; }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  const void* saved_;
};

// A value unique to the calling thread while it lives (the address of its context slot).
inline const void* this_thread_token() { return &detail::t_context; }

}  // namespace flowlane::sched
