// Timeline traces in Chrome trace-event JSON (diag/trace.hpp).
#include "diag/trace.hpp"

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <map>
#include <unordered_map>

#include "diag/watchdog.hpp"

namespace flowlane::diag {

using core::InstrState;
using core::kStreamKinds;
using core::Stream;

namespace {

constexpr uint32_t kThreadTrackBase = 1000000;  // tids of submitter/waiter thread tracks

uint32_t thread_token() {
  static std::atomic<uint32_t> next{1};
  thread_local uint32_t token = next.fetch_add(1, std::memory_order_relaxed);
  return token;
}

uint32_t track_of(const Stream* s) {
  uint32_t slot = s->device.type == FL_DEVICE_CPU ? 0 : 1 + uint32_t(s->device.index);
  return (s->lane->id * 16 + slot) * kStreamKinds + uint32_t(s->kind) + 1;
}

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

template <size_t N>
void copy_name(char (&dst)[N], const char* src, size_t len) {
  size_t n = std::min(len, N - 1);
  // A cut name ends before a whole UTF-8 character, never inside one (the JSON file must
  // stay valid UTF-8): back off over the continuation bytes (10xxxxxx) of a cut character.
  if (n < len)
    while (n > 0 && (static_cast<unsigned char>(src[n]) & 0xC0) == 0x80) --n;
  std::memcpy(dst, src, n);
  dst[n] = 0;
}
template <size_t N>
void copy_name(char (&dst)[N], const char* src) {
  copy_name(dst, src, std::strlen(src));
}
template <size_t N>
void copy_instr_name(char (&dst)[N], const Instr& i) {
  if (i.name.empty())
    copy_name(dst, "<unnamed>");
  else
    copy_name(dst, i.name.data(), i.name.size());
}

void put_escaped(std::string& out, const char* s) {
  for (; *s; ++s) {
    unsigned char c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      out += b;
    } else {
      out += char(c);
    }
  }
}

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const char* end_state(uint64_t s) {
  switch (InstrState(s)) {
    case InstrState::kDone: return "done";
    case InstrState::kFailed: return "failed";
    case InstrState::kSkipped: return "skipped";
    default: return "?";
  }
}

}  // namespace

TraceObserver::TraceObserver(Engine* e, std::FILE* f, std::string path)
    : engine_(e), file_(f), path_(std::move(path)), t0_ns_(steady_ns()), pid_(0) {
  ring_.reserve(kInitialEvents);
}

void TraceObserver::restart(std::FILE* f, std::string path) {
  std::vector<Event> ring;
  try {
    ring.reserve(kInitialEvents);
  } catch (...) {
    std::fclose(f);
    throw;
  }
  file_ = f;
  path_ = std::move(path);
  t0_ns_.store(steady_ns(), std::memory_order_relaxed);
  std::lock_guard<SpinLock> lock(mu_);
  ring_.swap(ring);
  next_ = 0;
  dropped_ = 0;
  details_.clear();
  closed_ = false;
}

TraceObserver::~TraceObserver() {
  if (file_ != nullptr) std::fclose(file_);
}

int64_t TraceObserver::now() const {
  return steady_ns() - t0_ns_.load(std::memory_order_relaxed);
}

void TraceObserver::push(const Event& ev, std::string* detail) {
  std::lock_guard<SpinLock> lock(mu_);
  if (closed_) return;
  Event e = ev;
  if (detail != nullptr && details_.size() < kMaxDetails) {
    try {
      details_.push_back(std::move(*detail));
      e.detail = uint32_t(details_.size());
    } catch (...) {  // out of memory: the slice goes without its text
    }
  }
  if (ring_.size() < kCapacity) {
    try {
      ring_.push_back(e);
    } catch (...) {  // out of memory: the event is dropped (hooks run on paths that must not throw)
      ++dropped_;
    }
  } else {
    ring_[next_] = e;
    next_ = (next_ + 1) % kCapacity;
    ++dropped_;
  }
}

size_t TraceObserver::buffer_capacity() const {
  std::lock_guard<SpinLock> lock(mu_);
  return ring_.capacity();
}

void TraceObserver::on_submit(const Instr&) {}

void TraceObserver::on_edge(const Instr& pred, const Instr& succ, const Object*) {
  Event ev{};
  ev.ts_ns = now();
  ev.kind = Kind::kEdge;
  ev.id = succ.id;
  ev.id2 = pred.id;
  ev.track = track_of(succ.stream);
  ev.track2 = track_of(pred.stream);
  push(ev);
}

TraceObserver::Event TraceObserver::instr_event(Kind kind, const Instr& i) const {
  Event ev{};
  ev.ts_ns = now();
  ev.kind = kind;
  ev.id = i.id;
  ev.track = track_of(i.stream);
  copy_instr_name(ev.name, i);
  return ev;
}

void TraceObserver::on_start(const Instr& i) { push(instr_event(Kind::kStart, i)); }

void TraceObserver::on_end(const Instr& i) {
  Event ev = instr_event(Kind::kEnd, i);
  ev.id2 = uint64_t(i.load_state());
  std::string text;
  if (InstrState(ev.id2) == InstrState::kFailed && !i.error.empty()) {
    try {
      text = i.error;
    } catch (...) {  // out of memory: the slice goes without its text
    }
  }
  push(ev, text.empty() ? nullptr : &text);
}

void TraceObserver::on_window_stall(bool begin) {
  Event ev{};
  ev.ts_ns = now();
  ev.kind = begin ? Kind::kStallBegin : Kind::kStallEnd;
  ev.id = thread_token();
  copy_name(ev.name, "window stall");
  push(ev);
}

void TraceObserver::on_wait(bool begin, const char* what) {
  push_thread_event(begin ? Kind::kWaitBegin : Kind::kWaitEnd, what ? what : "wait", 0, 0);
}

void TraceObserver::on_span(bool begin, const char* what, uint64_t items, uint32_t status) {
  push_thread_event(begin ? Kind::kSpanBegin : Kind::kSpanEnd, what, begin ? 0 : items, status);
}

void TraceObserver::on_share(bool begin, uint64_t items) {
  // A span on the thread's own track (not the instruction's it runs for: a loop's shares
  // run at once on several threads), so a loop's load balance shows thread by thread.
  Event ev{};
  ev.ts_ns = now();
  ev.kind = begin ? Kind::kSpanBegin : Kind::kSpanEnd;
  ev.id = thread_token();
  ev.id2 = begin ? 0 : items;
  ev.track2 = FL_OK;
  copy_name(ev.name, "fl_parallel_for share");
  push(ev);
}

// An event of the calling thread (a wait or a span): on the track of the instruction it runs
// inside, if any, else on the thread's own track. End events carry id2/track2 as given.
void TraceObserver::push_thread_event(Kind kind, const char* what, uint64_t id2, uint32_t track2) {
  Event ev{};
  ev.ts_ns = now();
  ev.kind = kind;
  ev.id = thread_token();
  ev.id2 = id2;
  ev.track2 = track2;
  if (kind == Kind::kWaitBegin || kind == Kind::kSpanBegin) {
    if (Instr* self = core::current_instr()) {
      ev.id2 = self->id;
      ev.track = track_of(self->stream);
    }
  }
  copy_name(ev.name, what);
  push(ev);
}

bool TraceObserver::finish(std::string& error) {
  std::vector<Event> events;
  std::vector<std::string> details;
  uint64_t dropped;
  {
    std::lock_guard<SpinLock> lock(mu_);
    if (closed_) return true;
    closed_ = true;
    // Both branches leave ring_ without storage (the observer outlives the trace).
    if (ring_.size() < kCapacity) {
      events.swap(ring_);
    } else {
      events.reserve(ring_.size());
      events.insert(events.end(), ring_.begin() + long(next_), ring_.end());
      events.insert(events.end(), ring_.begin(), ring_.begin() + long(next_));
      std::vector<Event>().swap(ring_);
    }
    dropped = dropped_;
    details.swap(details_);
  }
  const int64_t t_end = now();
  auto us = [](int64_t ns) {
    char b[40];
    std::snprintf(b, sizeof b, "%.3f", double(ns) / 1000.0);
    return std::string(b);
  };
  std::string out;
  out.reserve(events.size() * 120 + 4096);
  out += "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"flowlane\",\"dropped_events\":" +
         std::to_string(dropped) + ",\"capacity\":" + std::to_string(kCapacity) + "},\n\"traceEvents\":[\n";
  pid_ = engine_->handle() & 0xffffffffu;  // set after construction (FLOWLANE_TRACE starts in the constructor)
  const std::string pid = std::to_string(pid_);
  bool first = true;
  auto emit = [&](const std::string& ev) {
    if (!first) out += ",\n";
    first = false;
    out += ev;
  };
  emit("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + pid + ",\"tid\":0,\"args\":{\"name\":\"flowlane engine " +
       pid + "\"}}");
  std::map<uint32_t, std::string> tracks;  // tid -> name

  struct Slice {
    int64_t start = -1, end = -1;
    uint32_t track = 0;
  };
  std::unordered_map<uint64_t, Slice> slices;
  std::unordered_map<uint64_t, Event> open;                  // running instructions
  std::unordered_map<uint64_t, std::vector<Event>> waits;    // per thread token: begin stack
  std::unordered_map<uint64_t, Event> stalls;                // per thread token
  std::vector<Event> edges;
  for (const Event& ev : events) {
    switch (ev.kind) {
      case Kind::kStart:
        open[ev.id] = ev;
        tracks[ev.track] = track_name(ev.track);
        break;
      case Kind::kEnd: {
        tracks[ev.track] = track_name(ev.track);
        std::string name;
        put_escaped(name, ev.name);
        auto it = open.find(ev.id);
        if (it == open.end()) {
          if (InstrState(ev.id2) == InstrState::kSkipped)
            emit("{\"ph\":\"i\",\"s\":\"t\",\"name\":\"skipped: " + name + "\",\"pid\":" + pid + ",\"tid\":" +
                 std::to_string(ev.track) + ",\"ts\":" + us(ev.ts_ns) + ",\"args\":{\"id\":" + std::to_string(ev.id) + "}}");
          break;  // started before the trace (or dropped): no slice
        }
        std::string error;
        if (ev.detail != 0 && ev.detail <= details.size()) {
          error = ",\"error\":\"";
          put_escaped(error, details[ev.detail - 1].c_str());
          error += '"';
        }
        emit("{\"ph\":\"X\",\"cat\":\"instr\",\"name\":\"" + name + "\",\"pid\":" + pid + ",\"tid\":" +
             std::to_string(ev.track) + ",\"ts\":" + us(it->second.ts_ns) + ",\"dur\":" + us(ev.ts_ns - it->second.ts_ns) +
             ",\"args\":{\"id\":" + std::to_string(ev.id) + ",\"state\":\"" + end_state(ev.id2) + "\"" + error + "}}");
        slices[ev.id] = Slice{it->second.ts_ns, ev.ts_ns, ev.track};
        open.erase(it);
        break;
      }
      case Kind::kEdge:
        edges.push_back(ev);
        break;
      case Kind::kStallBegin:
        stalls[ev.id] = ev;
        tracks[kThreadTrackBase + uint32_t(ev.id)] = "thread " + std::to_string(ev.id) + " (submitter)";
        emit("{\"ph\":\"i\",\"s\":\"t\",\"name\":\"window full\",\"pid\":" + pid + ",\"tid\":" +
             std::to_string(kThreadTrackBase + ev.id) + ",\"ts\":" + us(ev.ts_ns) + "}");
        break;
      case Kind::kStallEnd: {
        auto it = stalls.find(ev.id);
        if (it == stalls.end()) break;
        emit("{\"ph\":\"X\",\"cat\":\"window\",\"name\":\"window stall\",\"pid\":" + pid + ",\"tid\":" +
             std::to_string(kThreadTrackBase + ev.id) + ",\"ts\":" + us(it->second.ts_ns) + ",\"dur\":" +
             us(ev.ts_ns - it->second.ts_ns) + "}");
        stalls.erase(it);
        break;
      }
      case Kind::kWaitBegin:
      case Kind::kSpanBegin:
        waits[ev.id].push_back(ev);
        break;
      case Kind::kWaitEnd:
      case Kind::kSpanEnd: {
        auto& stack = waits[ev.id];
        if (stack.empty()) break;
        Event b = stack.back();
        stack.pop_back();
        uint32_t tid = b.track ? b.track : kThreadTrackBase + uint32_t(ev.id);
        if (!b.track) tracks[tid] = "thread " + std::to_string(ev.id) + " (submitter)";
        std::string name;
        put_escaped(name, b.name);
        const bool span = ev.kind == Kind::kSpanEnd;
        std::string args;
        if (span) {
          const char* outcome = ev.track2 == core::Observer::kSpanUnwound ? "unwound by an exception"
                                                                            : fl_status_name(fl_status_t(ev.track2));
          args = ",\"args\":{\"items\":" + std::to_string(ev.id2) + ",\"status\":\"" + outcome + "\"}";
        }
        emit("{\"ph\":\"X\",\"cat\":\"" + std::string(span ? "parallel" : "wait") + "\",\"name\":\"" + name +
             "\",\"pid\":" + pid + ",\"tid\":" + std::to_string(tid) + ",\"ts\":" + us(b.ts_ns) +
             ",\"dur\":" + us(ev.ts_ns - b.ts_ns) + args + "}");
        if (!span)
          emit("{\"ph\":\"i\",\"s\":\"t\",\"name\":\"" + name + "\",\"pid\":" + pid + ",\"tid\":" +
               std::to_string(tid) + ",\"ts\":" + us(b.ts_ns) + "}");
        break;
      }
    }
  }
  // Still running when the trace stopped.
  for (auto& [id, ev] : open) {
    std::string name;
    put_escaped(name, ev.name);
    emit("{\"ph\":\"X\",\"cat\":\"instr\",\"name\":\"" + name + "\",\"pid\":" + pid + ",\"tid\":" +
         std::to_string(ev.track) + ",\"ts\":" + us(ev.ts_ns) + ",\"dur\":" + us(t_end - ev.ts_ns) +
         ",\"args\":{\"id\":" + std::to_string(id) + ",\"state\":\"running at trace stop\"}}");
    slices[id] = Slice{ev.ts_ns, t_end, ev.track};
  }
  // Flow arrows: from the end of the producer's slice to the start of the consumer's.
  uint64_t flow = 0;
  for (const Event& ev : edges) {
    auto p = slices.find(ev.id2);
    auto s = slices.find(ev.id);
    if (p == slices.end() || s == slices.end()) continue;
    ++flow;
    int64_t at = std::max(p->second.start, p->second.end - 1);
    emit("{\"ph\":\"s\",\"cat\":\"dep\",\"name\":\"dep\",\"id\":" + std::to_string(flow) + ",\"pid\":" + pid +
         ",\"tid\":" + std::to_string(p->second.track) + ",\"ts\":" + us(at) + "}");
    emit("{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"dep\",\"name\":\"dep\",\"id\":" + std::to_string(flow) + ",\"pid\":" +
         pid + ",\"tid\":" + std::to_string(s->second.track) + ",\"ts\":" + us(s->second.start) + "}");
  }
  for (auto& [tid, name] : tracks) {
    emit("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + pid + ",\"tid\":" + std::to_string(tid) +
         ",\"args\":{\"name\":\"" + name + "\"}}");
    emit("{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":" + pid + ",\"tid\":" + std::to_string(tid) +
         ",\"args\":{\"sort_index\":" + std::to_string(tid) + "}}");
  }
  out += "\n]}\n";
  bool ok = std::fwrite(out.data(), 1, out.size(), file_) == out.size();
  ok = (std::fclose(file_) == 0) && ok;
  file_ = nullptr;
  if (!ok) error = "writing the trace to '" + path_ + "' failed: " + std::strerror(errno);
  return ok;
}

void trace_start(Engine* e, const char* path) {
  Diagnostics* d = &diagnostics(*e);
  if (path == nullptr || *path == 0) fail(FL_ERR_INVALID_ARGUMENT, "fl_trace_start: path is NULL or empty");
  std::lock_guard<std::mutex> lock(d->trace_mu);
  if (d->traces_closed)
    fail(FL_ERR_SHUTDOWN, "fl_trace_start: the engine is being destroyed and has already written its trace, so a "
                          "trace started now would never be written; start traces before fl_engine_destroy");
  if (d->trace != nullptr)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_trace_start: this engine is already tracing to '" + d->trace->path() +
                                      "'; call fl_trace_stop first");
  std::string where = path;  // allocated before the file is opened: nothing to close if it throws
  std::FILE* f = std::fopen(path, "w");
  if (f == nullptr)
    fail(FL_ERR_INVALID_ARGUMENT, std::string("fl_trace_start: cannot open '") + path + "' for writing: " +
                                      std::strerror(errno));
  if (TraceObserver* t = d->stopped_trace) {  // the engine still owns it: restart it
    t->restart(f, std::move(where));
    d->stopped_trace = nullptr;
    d->trace = t;
    e->reinstate_observer(t);
    return;
  }
  std::unique_ptr<TraceObserver> t;
  try {
    t = std::make_unique<TraceObserver>(e, f, std::move(where));
  } catch (...) {
    std::fclose(f);
    throw;
  }
  d->trace = t.get();
  e->set_observer(std::move(t));
}

void trace_stop(Engine* e, bool at_destroy) {
  Diagnostics* d = &diagnostics(*e);
  std::lock_guard<std::mutex> lock(d->trace_mu);
  if (at_destroy) d->traces_closed = true;  // the last chance to write a trace
  if (d->trace == nullptr) {
    if (at_destroy) return;
    fail(FL_ERR_INVALID_ARGUMENT, "fl_trace_stop: this engine is not tracing (no fl_trace_start or FLOWLANE_TRACE)");
  }
  e->clear_observer();
  TraceObserver* t = d->trace;
  d->trace = nullptr;
  d->stopped_trace = t;  // finished below whatever happens: reused by the next trace
  std::string err;
  if (!t->finish(err)) {
    if (at_destroy) {
      std::fprintf(stderr, "flowlane: %s\n", err.c_str());
      return;
    }
    fail(FL_ERR_INVALID_ARGUMENT, "fl_trace_stop: " + err);
  }
}

}  // namespace flowlane::diag
