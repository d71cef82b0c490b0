// Timeline traces: an Observer that records engine events into a bounded ring buffer and
// writes Chrome trace-event JSON (opens in Perfetto and chrome://tracing).
//
// Events: one complete slice ("X") per instruction that ran, on a track per (lane, stream
// kind); an instant event for a skipped instruction; flow arrows ("s"/"f") for the
// cross-stream dependency edges the engine recorded (Observer::on_edge); slices for waits
// (fl_object_wait inside a callback nests under the instruction's slice; waits of other
// threads and window stalls go on a track per submitting thread) and an instant event at
// each window stall; a slice per fl_parallel_for and fl_taskgraph_run on the calling
// thread's track (nested under the instruction that ran it), with its size and outcome, and
// a slice per share of a loop on the track of each thread that ran it, with its count; a
// slice per node a program's launch ran (category "replay"), nested in the launch's slice on
// the thread that runs the launch, on their own track on other workers. A
// failed instruction's slice carries its error text (the first kMaxDetails failures). Memory is bounded: at most kCapacity events are kept (oldest dropped,
// the number dropped is written into the file's metadata). Cost when off: the engine's one
// pointer load per hook point; when on: a short critical section per event.
//
// The engine keeps an observer it installed until it is destroyed (a hook may still be
// running in it after fl_trace_stop), so a stopped trace's observer is not freed: it holds
// no events (finish() frees them) and the next fl_trace_start on the engine restarts it
// (Engine::reinstate_observer), so traces started and stopped in a loop cost one observer.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "base/spinlock.hpp"
#include "engine/engine.hpp"

namespace flowlane::diag {

using core::Engine;
using core::Instr;
using core::Object;

class TraceObserver : public core::Observer {
 public:
  static constexpr size_t kCapacity = size_t(1) << 18;  // events kept (about 64 bytes each)
  static constexpr size_t kMaxDetails = 4096;           // failed instructions' texts kept

  TraceObserver(Engine* e, std::FILE* f, std::string path);
  ~TraceObserver() override;
  // After finish(): records again, into `f` (owned from here on; closed if this throws),
  // with a fresh clock and no events. Hooks still running from the previous trace may add
  // an event or two to the new one (unmatched ones are left out of the file, as for a hook
  // racing a start).
  void restart(std::FILE* f, std::string path);

  void on_submit(const Instr& i) override;
  void on_edge(const Instr& pred, const Instr& succ, const Object* obj) override;
  void on_start(const Instr& i) override;
  void on_end(const Instr& i) override;
  void on_window_stall(bool begin) override;
  void on_wait(bool begin, const char* what) override;
  void on_span(bool begin, const char* what, uint64_t items, uint32_t status) override;
  void on_share(bool begin, uint64_t items) override;
  void on_replay_node(bool begin, const char* name, uint32_t node, uint32_t status) override;

  // Writes the JSON file and frees the buffer; later hooks are ignored. Returns false (with
  // `error` set) if writing failed.
  bool finish(std::string& error);
  const std::string& path() const { return path_; }
  // Events the buffer has room for without growing (tests: nothing is held once finished).
  size_t buffer_capacity() const;

  enum class Kind : uint8_t {
    kStart, kEnd, kEdge, kStallBegin, kStallEnd, kWaitBegin, kWaitEnd, kSpanBegin, kSpanEnd,
    kNodeBegin, kNodeEnd,  // a node of a program's launch (id2: the node; end: track2 its status)
  };
  struct Event {
    int64_t ts_ns;
    uint64_t id;      // instruction (start/end/edge succ); thread token (stall/wait/span)
    uint64_t id2;     // edge: pred id; end: state; wait, span begin: the instruction waiting
                      // (0 if none); span end: items
    uint32_t track;   // lane * kStreamKinds + kind (+1), or 0
    uint32_t track2;  // edge: pred's track; span end: status
    uint32_t detail;  // end of a failed instruction: 1 + index into details_, or 0
    Kind kind;
    char name[27];    // instruction name or wait kind, truncated
  };

 private:
  static constexpr size_t kInitialEvents = 1024;  // room reserved at (re)start

  void push(const Event& ev, std::string* detail = nullptr);
  bool take_events(std::vector<Event>& events, std::vector<std::string>& details, uint64_t& dropped);
  Event instr_event(Kind kind, const Instr& i) const;  // an event of `i` on its track, named
  void push_thread_event(Kind kind, const char* what, uint64_t id2, uint32_t track2);
  int64_t now() const;

  Engine* engine_;
  std::FILE* file_;
  std::string path_;
  // The trace's time origin (steady_clock, ns): restart() moves it while a hook of the
  // previous trace may still read it. Relaxed: a timestamp orders nothing.
  std::atomic<int64_t> t0_ns_;
  mutable SpinLock mu_;
  bool closed_ = false;
  std::vector<Event> ring_;
  size_t next_ = 0;       // ring_ index of the next write once full
  uint64_t dropped_ = 0;
  std::vector<std::string> details_;  // failed instructions' error texts (kMaxDetails at most)
  uint64_t pid_;
};

// The Chrome trace-event JSON of a trace's events (oldest first), `details` the failed
// instructions' texts (Event::detail indexes them), `dropped` the events the ring lost,
// `t_end` when the trace stopped (instructions still open end there) (trace_json.cpp).
std::string chrome_trace_json(const std::vector<TraceObserver::Event>& events, const std::vector<std::string>& details,
                              uint64_t dropped, uint64_t pid, int64_t t_end);

// fl_trace_start / fl_trace_stop; FLOWLANE_TRACE at engine creation; engine destroy.
void trace_start(Engine* e, const char* path);
void trace_stop(Engine* e, bool at_destroy);

}  // namespace flowlane::diag
