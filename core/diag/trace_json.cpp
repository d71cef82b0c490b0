// Writing a trace as Chrome trace-event JSON (diag/trace.hpp).
#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>

#include "base/json.hpp"
#include "diag/trace.hpp"

namespace flowlane::diag {

using core::InstrState;
using core::kStreamKinds;

namespace {

constexpr uint32_t kThreadTrackBase = 1000000;  // tids of submitter/waiter thread tracks

std::string track_name(uint32_t track) {
  static const char* kKinds[] = {"host", "compute", "h2d", "d2h", "collective"};
  uint32_t t = track - 1;
  uint32_t kind = t % kStreamKinds;
  uint32_t slot = (t / kStreamKinds) % 16;
  uint32_t lane = t / kStreamKinds / 16;
  std::string s = "lane " + std::to_string(lane) + " ";
  if (slot > 0) s += "cuda:" + std::to_string(slot - 1) + " ";
  return s + kKinds[kind];
}

const char* end_state(uint64_t s) {
  switch (InstrState(s)) {
    case InstrState::kDone: return "done";
    case InstrState::kFailed: return "failed";
    case InstrState::kSkipped: return "skipped";
    default: return "?";
  }
}

// The Chrome trace-event JSON of one trace: events are added oldest first; instruction
// start/end pairs become slices, wait and span begin/end pairs nested slices, edges flow
// arrows once both ends' slices are known.
class ChromeWriter {
 public:
  using Event = TraceObserver::Event;
  using Kind = TraceObserver::Kind;

  ChromeWriter(uint64_t pid, const std::vector<std::string>& details) : pid_(std::to_string(pid)), details_(details) {}

  void begin(uint64_t dropped, size_t events) {
    out_.reserve(events * 120 + 4096);
    out_ += "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"flowlane\",\"dropped_events\":" +
            std::to_string(dropped) + ",\"capacity\":" + std::to_string(TraceObserver::kCapacity) +
            "},\n\"traceEvents\":[\n";
    emit("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + pid_ + ",\"tid\":0,\"args\":{\"name\":\"flowlane engine " +
         pid_ + "\"}}");
  }

  void add(const Event& ev) {
    switch (ev.kind) {
      case Kind::kStart:
        open_[ev.id] = ev;
        tracks_[ev.track] = track_name(ev.track);
        break;
      case Kind::kEnd: instr_end(ev); break;
      case Kind::kEdge: edges_.push_back(ev); break;
      case Kind::kStallBegin: stall_begin(ev); break;
      case Kind::kStallEnd: stall_end(ev); break;
      case Kind::kWaitBegin:
      case Kind::kSpanBegin:
      case Kind::kNodeBegin: waits_[ev.id].push_back(ev); break;
      case Kind::kWaitEnd:
      case Kind::kSpanEnd: thread_end(ev); break;
      case Kind::kNodeEnd: node_end(ev); break;
    }
  }

  // Closes what is still open at `t_end`, draws the flow arrows, names the tracks.
  std::string& end(int64_t t_end) {
    still_running(t_end);
    flows();
    track_names();
    out_ += "\n]}\n";
    return out_;
  }

 private:
  struct Slice {
    int64_t start = -1, end = -1;
    uint32_t track = 0;
  };

  static std::string us(int64_t ns) {
    char b[40];
    std::snprintf(b, sizeof b, "%.3f", double(ns) / 1000.0);
    return b;
  }
  static std::string escaped(const char* s) {
    std::string out;
    json_escape(out, s, std::strlen(s));
    return out;
  }

  void emit(const std::string& ev) {
    if (!first_) out_ += ",\n";
    first_ = false;
    out_ += ev;
  }

  void instr_end(const Event& ev) {
    tracks_[ev.track] = track_name(ev.track);
    const std::string name = escaped(ev.name);
    auto it = open_.find(ev.id);
    if (it == open_.end()) {
      if (InstrState(ev.id2) == InstrState::kSkipped)
        emit("{\"ph\":\"i\",\"s\":\"t\",\"name\":\"skipped: " + name + "\",\"pid\":" + pid_ + ",\"tid\":" +
             std::to_string(ev.track) + ",\"ts\":" + us(ev.ts_ns) + ",\"args\":{\"id\":" + std::to_string(ev.id) + "}}");
      return;  // started before the trace (or dropped): no slice
    }
    std::string error;
    if (ev.detail != 0 && ev.detail <= details_.size())
      error = ",\"error\":\"" + escaped(details_[ev.detail - 1].c_str()) + '"';
    emit("{\"ph\":\"X\",\"cat\":\"instr\",\"name\":\"" + name + "\",\"pid\":" + pid_ + ",\"tid\":" +
         std::to_string(ev.track) + ",\"ts\":" + us(it->second.ts_ns) + ",\"dur\":" + us(ev.ts_ns - it->second.ts_ns) +
         ",\"args\":{\"id\":" + std::to_string(ev.id) + ",\"state\":\"" + end_state(ev.id2) + "\"" + error + "}}");
    slices_[ev.id] = Slice{it->second.ts_ns, ev.ts_ns, ev.track};
    open_.erase(it);
  }

  void stall_begin(const Event& ev) {
    stalls_[ev.id] = ev;
    tracks_[kThreadTrackBase + uint32_t(ev.id)] = "thread " + std::to_string(ev.id) + " (submitter)";
    emit("{\"ph\":\"i\",\"s\":\"t\",\"name\":\"window full\",\"pid\":" + pid_ + ",\"tid\":" +
         std::to_string(kThreadTrackBase + ev.id) + ",\"ts\":" + us(ev.ts_ns) + "}");
  }

  void stall_end(const Event& ev) {
    auto it = stalls_.find(ev.id);
    if (it == stalls_.end()) return;
    emit("{\"ph\":\"X\",\"cat\":\"window\",\"name\":\"window stall\",\"pid\":" + pid_ + ",\"tid\":" +
         std::to_string(kThreadTrackBase + ev.id) + ",\"ts\":" + us(it->second.ts_ns) + ",\"dur\":" +
         us(ev.ts_ns - it->second.ts_ns) + "}");
    stalls_.erase(it);
  }

  // The end of a wait or a span: a slice from its begin, on the instruction's track it ran
  // inside, or on the thread's own track.
  void thread_end(const Event& ev) {
    auto& stack = waits_[ev.id];
    if (stack.empty()) return;
    Event b = stack.back();
    stack.pop_back();
    uint32_t tid = b.track ? b.track : kThreadTrackBase + uint32_t(ev.id);
    if (!b.track) tracks_[tid] = "thread " + std::to_string(ev.id) + " (submitter)";
    const std::string name = escaped(b.name);
    const bool span = ev.kind == Kind::kSpanEnd;
    std::string args;
    if (span) {
      const char* outcome = ev.track2 == core::Observer::kSpanUnwound ? "unwound by an exception"
                                                                        : fl_status_name(fl_status_t(ev.track2));
      args = ",\"args\":{\"items\":" + std::to_string(ev.id2) + ",\"status\":\"" + outcome + "\"}";
    }
    emit("{\"ph\":\"X\",\"cat\":\"" + std::string(span ? "parallel" : "wait") + "\",\"name\":\"" + name +
         "\",\"pid\":" + pid_ + ",\"tid\":" + std::to_string(tid) + ",\"ts\":" + us(b.ts_ns) +
         ",\"dur\":" + us(ev.ts_ns - b.ts_ns) + args + "}");
    if (!span)
      emit("{\"ph\":\"i\",\"s\":\"t\",\"name\":\"" + name + "\",\"pid\":" + pid_ + ",\"tid\":" + std::to_string(tid) +
           ",\"ts\":" + us(b.ts_ns) + "}");
  }

  // The end of a node of a program's launch: a slice from its begin, nested in the launch's
  // slice on the launch's thread, else on the worker's own track.
  void node_end(const Event& ev) {
    auto& stack = waits_[ev.id];
    if (stack.empty()) return;
    Event b = stack.back();
    stack.pop_back();
    uint32_t tid = b.track ? b.track : kThreadTrackBase + uint32_t(ev.id);
    if (!b.track && tracks_.count(tid) == 0) tracks_[tid] = "thread " + std::to_string(ev.id);
    emit("{\"ph\":\"X\",\"cat\":\"replay\",\"name\":\"" + escaped(b.name) + "\",\"pid\":" + pid_ +
         ",\"tid\":" + std::to_string(tid) + ",\"ts\":" + us(b.ts_ns) + ",\"dur\":" + us(ev.ts_ns - b.ts_ns) +
         ",\"args\":{\"node\":" + std::to_string(b.id2) + ",\"status\":\"" +
         fl_status_name(fl_status_t(ev.track2)) + "\"}}");
  }

  // Instructions still running when the trace stopped.
  void still_running(int64_t t_end) {
    for (auto& [id, ev] : open_) {
      emit("{\"ph\":\"X\",\"cat\":\"instr\",\"name\":\"" + escaped(ev.name) + "\",\"pid\":" + pid_ + ",\"tid\":" +
           std::to_string(ev.track) + ",\"ts\":" + us(ev.ts_ns) + ",\"dur\":" + us(t_end - ev.ts_ns) +
           ",\"args\":{\"id\":" + std::to_string(id) + ",\"state\":\"running at trace stop\"}}");
      slices_[id] = Slice{ev.ts_ns, t_end, ev.track};
    }
  }

  // Flow arrows: from the end of the producer's slice to the start of the consumer's.
  void flows() {
    uint64_t flow = 0;
    for (const Event& ev : edges_) {
      auto p = slices_.find(ev.id2);
      auto s = slices_.find(ev.id);
      if (p == slices_.end() || s == slices_.end()) continue;
      ++flow;
      int64_t at = std::max(p->second.start, p->second.end - 1);
      emit("{\"ph\":\"s\",\"cat\":\"dep\",\"name\":\"dep\",\"id\":" + std::to_string(flow) + ",\"pid\":" + pid_ +
           ",\"tid\":" + std::to_string(p->second.track) + ",\"ts\":" + us(at) + "}");
      emit("{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"dep\",\"name\":\"dep\",\"id\":" + std::to_string(flow) +
           ",\"pid\":" + pid_ + ",\"tid\":" + std::to_string(s->second.track) + ",\"ts\":" + us(s->second.start) + "}");
    }
  }

  void track_names() {
    for (auto& [tid, name] : tracks_) {
      emit("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + pid_ + ",\"tid\":" + std::to_string(tid) +
           ",\"args\":{\"name\":\"" + name + "\"}}");
      emit("{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":" + pid_ + ",\"tid\":" + std::to_string(tid) +
           ",\"args\":{\"sort_index\":" + std::to_string(tid) + "}}");
    }
  }

  const std::string pid_;
  const std::vector<std::string>& details_;
  std::string out_;
  bool first_ = true;
  std::map<uint32_t, std::string> tracks_;                 // tid -> name
  std::unordered_map<uint64_t, Slice> slices_;             // finished instructions, by id
  std::unordered_map<uint64_t, Event> open_;               // running instructions
  std::unordered_map<uint64_t, std::vector<Event>> waits_; // per thread token: begin stack
  std::unordered_map<uint64_t, Event> stalls_;             // per thread token
  std::vector<Event> edges_;
};

}  // namespace

std::string chrome_trace_json(const std::vector<TraceObserver::Event>& events, const std::vector<std::string>& details,
                              uint64_t dropped, uint64_t pid, int64_t t_end) {
  ChromeWriter w(pid, details);
  w.begin(dropped, events.size());
  for (const TraceObserver::Event& ev : events) w.add(ev);
  return std::move(w.end(t_end));
}

}  // namespace flowlane::diag
