// Intrusive unit of work for the pool. The pool never owns or frees a Task: whoever
// submits one keeps it alive until its run() has returned (lanes embed one, fork-join
// helpers keep theirs on the waiting frame).
#pragma once

namespace flowlane::sched {

struct Task {
  using RunFn = void (*)(Task* self);
  RunFn run = nullptr;
};

}  // namespace flowlane::sched
