// Hooks for diagnostics (timeline traces). The engine calls them only while an observer
// is installed: the cost when off is one relaxed load and a branch per hook point.
//
// Hooks must not throw: they run on paths that have published state (an observer that
// runs out of memory drops the event).
//
// Threading: hooks run on whichever thread does the work (submitters, workers) and may
// run concurrently; an observer synchronises itself. An observer, once installed, is
// owned by the engine and lives until the engine is destroyed (uninstalling only stops
// new calls), so a hook that is already running never touches freed memory.
#pragma once

#include <cstdint>

namespace flowlane::core {

struct Instr;
struct Object;

class Observer {
 public:
  virtual ~Observer() = default;
  // After `i` was queued on its lane (its id, stream and name are set).
  virtual void on_submit(const Instr& i) { (void)i; }
  // `succ` will wait for `pred` because of `obj` (cross-stream edges only).
  virtual void on_edge(const Instr& pred, const Instr& succ, const Object* obj) {
    (void)pred, (void)succ, (void)obj;
  }
  // The callback of `i` is about to run / `i` reached a terminal state (done, failed, skipped).
  virtual void on_start(const Instr& i) { (void)i; }
  virtual void on_end(const Instr& i) { (void)i; }
  // The runner of lane `lane` found nothing to run and is about to give the lane up (it
  // still owns it; a push from now on is seen by the re-check in Lane::give_up()).
  virtual void on_lane_idle(uint32_t lane) { (void)lane; }
  // A submitter blocked on the full in-flight window (begin) and got room (end).
  virtual void on_window_stall(bool begin) { (void)begin; }
  // A thread started / stopped waiting in fl_object_wait, fl_stream_synchronize or
  // fl_engine_synchronize; `what` names the call.
  virtual void on_wait(bool begin, const char* what) { (void)begin, (void)what; }
  // A thread started / finished running a region of work it helps with: fl_parallel_for
  // over `items` iterations, fl_taskgraph_run of `items` tasks, fl_task_group_wait.
  // `status` (end only) is its outcome, kSpanUnwound when it ended by an exception.
  static constexpr uint32_t kSpanUnwound = ~0u;
  virtual void on_span(bool begin, const char* what, uint64_t items, uint32_t status) {
    (void)begin, (void)what, (void)items, (void)status;
  }
  // The calling thread started / finished running its share of an fl_parallel_for: a range
  // it started with or stole; `items` (end only) is how many indices of it it ran. Shares
  // of one loop run at once on several threads (each on its own track in a trace).
  virtual void on_share(bool begin, uint64_t items) { (void)begin, (void)items; }
  // The calling thread started / finished running node `node` (named `name`) of a launch of
  // a program (engine/program.hpp); `status` (end only) is its function's result. Nodes of
  // one launch run on several threads at once; the launch itself is an instruction
  // (on_start / on_end).
  virtual void on_replay_node(bool begin, const char* name, uint32_t node, uint32_t status) {
    (void)begin, (void)name, (void)node, (void)status;
  }
};

// Reports one span (Observer::on_span) around a region run from the calling thread: begin
// at construction, end with end()'s status, or with kSpanUnwound if an exception leaves.
class SpanScope {
 public:
  SpanScope(Observer* ob, const char* what, uint64_t items) : ob_(ob), what_(what), items_(items) {
    if (ob_ != nullptr) ob_->on_span(true, what_, items_, 0);
  }
  SpanScope(const SpanScope&) = delete;
  SpanScope& operator=(const SpanScope&) = delete;
  ~SpanScope() { close(Observer::kSpanUnwound); }
  // Ends the span with `status` and returns it.
  template <class Status>
  Status end(Status status) {
    close(uint32_t(status));
    return status;
  }

 private:
  void close(uint32_t status) {
    if (ob_ != nullptr) ob_->on_span(false, what_, items_, status);
    ob_ = nullptr;
  }
  Observer* ob_;
  const char* what_;
  uint64_t items_;
};

}  // namespace flowlane::core
