// Timeline traces in Chrome trace-event JSON (diag/trace.hpp).
#include "diag/trace.hpp"

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstring>

#include "diag/watchdog.hpp"

namespace flowlane::diag {

using core::InstrState;
using core::kStreamKinds;
using core::Stream;

namespace {

uint32_t thread_token() {
  static std::atomic<uint32_t> next{1};
  thread_local uint32_t token = next.fetch_add(1, std::memory_order_relaxed);
  return token;
}

uint32_t track_of(const Stream* s) {
  uint32_t slot = s->device.type == FL_DEVICE_CPU ? 0 : 1 + uint32_t(s->device.index);
  return (s->lane->id * 16 + slot) * kStreamKinds + uint32_t(s->kind) + 1;
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

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
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

void TraceObserver::on_replay_node(bool begin, const char* name, uint32_t node, uint32_t status) {
  Event ev{};
  ev.ts_ns = now();
  ev.kind = begin ? Kind::kNodeBegin : Kind::kNodeEnd;
  ev.id = thread_token();
  ev.id2 = node;
  ev.track2 = begin ? 0 : status;
  // On the thread running the launch's function: inside the launch's slice, on its track.
  // Other workers run the launch's tasks under its frame too, on tracks of their own.
  if (begin) {
    const core::CallbackFrame* f = core::current_frame();
    if (f != nullptr && f->instr != nullptr && core::on_this_thread(f) && core::is_launch(f->instr))
      ev.track = track_of(f->instr->stream);
  }
  copy_name(ev.name, name);
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

// Takes the recorded events (oldest first), the failures' texts and the drop count, and
// closes the trace; false if it was closed already. Both branches leave ring_ without
// storage (the observer outlives the trace).
bool TraceObserver::take_events(std::vector<Event>& events, std::vector<std::string>& details, uint64_t& dropped) {
  std::lock_guard<SpinLock> lock(mu_);
  if (closed_) return false;
  closed_ = true;
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
  return true;
}

bool TraceObserver::finish(std::string& error) {
  std::vector<Event> events;
  std::vector<std::string> details;
  uint64_t dropped = 0;
  if (!take_events(events, details, dropped)) return true;
  const int64_t t_end = now();
  pid_ = engine_->handle() & 0xffffffffu;  // set after construction (FLOWLANE_TRACE starts in the constructor)
  const std::string out = chrome_trace_json(events, details, dropped, pid_, t_end);
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
