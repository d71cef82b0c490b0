// The dump monitor (comm/dump.hpp): one thread per process, running while it watches
// engines with communicators (those with a dump folder or a communicator timeout). Every
// kPeriod, or at once when its pipe is written, it:
//
//   1. reads the pipe: a byte per signal caught (`T` SIGTERM, `U` SIGUSR1) or a wake-up;
//   2. looks at every watched communicator with a timeout: its oldest unfinished collective,
//      issued (waiting for its peers) for longer than its timeout (FLOWLANE_COMM_TIMEOUT_MS,
//      fl_comm_set_timeout) and not reported yet, triggers a comm_timeout dump of its engine
//      and a DUMP_REQUEST for the other ranks (without a dump folder: one line on stderr);
//   3. stats <folder>/DUMP_REQUEST of every folder it watches: a request it has not handled,
//      made after this thread started (older ones are a previous job's), dumps every engine
//      of that folder; then fails the collectives of step 2 (Communicator::time_out:
//      FL_ERR_TIMEOUT, the communicator breaks);
//   4. after a signal dumps every engine it watches and, for SIGTERM, restores the previous
//      disposition and raises SIGTERM again (the default: the process ends, as it would have).
//
// Signals (FLOWLANE_COMM_DUMP_ON_SIGNAL, opt-in): the handler does only async-signal-safe
// things: an atomic exchange, a load, write(2) of one byte to the pipe (non-blocking; created
// once and never closed, so the descriptor is always this pipe's), and, when no monitor runs
// or on a second SIGTERM while the first one's dump is being written, sigaction(2) and
// raise(3) to chain to the previous disposition at once. A previous handler function is
// called from ours for SIGUSR1 and reinstated for SIGTERM. A monitor thread that exits reads
// the pipe once more after it stopped announcing itself (g_monitor_alive), so a SIGTERM
// written meanwhile still ends the process.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "comm/dump.hpp"

namespace flowlane::comm {

namespace {

constexpr std::chrono::milliseconds kPeriod{100};

struct Monitor {
  std::mutex mu;
  std::vector<std::weak_ptr<EngineDumps>> engines;  // under mu
  bool running = false;                              // a thread runs; under mu
  int64_t started_unix_ns = 0;                       // when it started; under mu
};
Monitor& monitor() {
  static Monitor* m = new Monitor();  // never destroyed: the thread may outlive statics
  return *m;
}

// ---- the self-pipe and the signal handler --------------------------------------------------

int g_pipe_r = -1;
std::atomic<int> g_pipe_w{-1};  // written once (make_pipe), read by the signal handler
std::once_flag g_pipe_once;

void make_pipe() {
  int fds[2];
  if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) return;  // no pipe: signals chain at once, the monitor polls
  g_pipe_r = fds[0];
  g_pipe_w.store(fds[1], std::memory_order_release);  // pairs with the acquire load in on_signal()
}

struct SignalSlot {
  int sig;
  struct sigaction prev;               // written before our handler is installed
  std::atomic<bool> installed{false};
};
SignalSlot g_term{SIGTERM, {}, {}};
SignalSlot g_usr1{SIGUSR1, {}, {}};
// A monitor thread reads the pipe. Release/acquire: set with its start (monitor_watch) and
// cleared before its last read of the pipe; the handler's acquire load pairs with them.
std::atomic<bool> g_monitor_alive{false};
std::atomic<bool> g_term_pending{false};  // a SIGTERM's dump is being written

// Restores the previous disposition of s and raises the signal again (async-signal-safe).
void chain_now(SignalSlot& s) {
  s.installed.store(false, std::memory_order_relaxed);
  sigaction(s.sig, &s.prev, nullptr);
  raise(s.sig);
}

void call_previous(const SignalSlot& s, int sig, siginfo_t* info, void* ctx) {
  if ((s.prev.sa_flags & SA_SIGINFO) != 0) {
    if (s.prev.sa_sigaction != nullptr) s.prev.sa_sigaction(sig, info, ctx);
  } else if (s.prev.sa_handler != SIG_DFL && s.prev.sa_handler != SIG_IGN && s.prev.sa_handler != nullptr) {
    s.prev.sa_handler(sig);
  }
}

void on_signal(int sig, siginfo_t* info, void* ctx) {
  const int saved = errno;
  SignalSlot& s = sig == SIGTERM ? g_term : g_usr1;
  const char byte = sig == SIGTERM ? 'T' : 'U';
  const int fd = g_pipe_w.load(std::memory_order_acquire);  // pairs with the release store in make_pipe()
  // Pairs with the release stores in monitor_watch() and watched(): a monitor reads the pipe.
  const bool alive = g_monitor_alive.load(std::memory_order_acquire);
  // acq_rel: a second SIGTERM sees the first one's exchange.
  const bool second_term = sig == SIGTERM && g_term_pending.exchange(true, std::memory_order_acq_rel);
  if (second_term) {
    chain_now(s);  // the user will not wait for the first one's dump
  } else if (fd >= 0 && alive && write(fd, &byte, 1) == 1) {
    // The monitor dumps, then chains SIGTERM; SIGUSR1's previous handler runs now.
    if (sig == SIGUSR1) call_previous(s, sig, info, ctx);
  } else if (sig == SIGTERM) {
    chain_now(s);
  } else {
    call_previous(s, sig, info, ctx);
  }
  errno = saved;
}

// Waits up to kPeriod for the pipe; what signals it brought.
void wait_for_pipe(bool& term, bool& usr1) {
  if (g_pipe_r < 0) {
    std::this_thread::sleep_for(kPeriod);
    return;
  }
  struct pollfd p{g_pipe_r, POLLIN, 0};
  (void)poll(&p, 1, int(kPeriod.count()));
  char buf[64];
  for (ssize_t n; (n = read(g_pipe_r, buf, sizeof buf)) > 0;)
    for (ssize_t k = 0; k < n; ++k) {
      term |= buf[k] == 'T';
      usr1 |= buf[k] == 'U';
    }
}

// ---- what the thread looks at ----------------------------------------------------------------

using DumpsList = std::vector<std::shared_ptr<EngineDumps>>;

// A collective found timed out: failed (Communicator::time_out) once the dumps are written.
struct TimedOut {
  std::shared_ptr<Communicator> comm;
  uint64_t seq;
  std::string detail;
};

// The communicators of d's engine whose oldest unfinished collective has been issued for
// longer than their timeout (each collective reported once): what the dump says; each is
// added to `found`.
std::string timed_out(EngineDumps& d, std::vector<TimedOut>& found) {
  std::unique_lock<std::mutex> lk(d.mu, std::defer_lock);
  if (!lock_within(lk, kPeriod) || d.engine == nullptr) return "";
  std::string detail;
  for (const auto& c : communicators(*d.engine)) {
    if (c->timeout_ms.load(std::memory_order_relaxed) == 0) continue;
    const uint64_t seq = c->recorder.finished_seq() + 1;
    if (seq > c->recorder.issued_seq() || seq <= c->timeout_seen) continue;
    CollRecord r;
    int64_t t_issued = -1;
    std::string what = "(its record was dropped from the ring)";
    if (c->recorder.read(seq, r)) {
      if (r.state != CollState::kIssued) continue;
      t_issued = r.t_issued_ns;
      what = record_signature(r);
    } else if (c->recorder.last_issued(&t_issued) != seq) {
      continue;  // older than the last issued one and gone from the ring: no time to go by
    }
    const int64_t waited_ms = (c->since_created_ns() - t_issued) / 1'000'000;
    if (t_issued < 0 || waited_ms < int64_t(c->timeout_ms.load(std::memory_order_relaxed))) continue;
    c->timeout_seen = seq;
    std::string one = "collective seq " + std::to_string(seq) + " " + what + " of communicator " + hex(c->id) +
                      " (rank " + std::to_string(c->rank) + " of " + std::to_string(c->nranks) + ") has waited " +
                      std::to_string(waited_ms) + " ms for its peers (FLOWLANE_COMM_TIMEOUT_MS " +
                      std::to_string(c->timeout_ms.load(std::memory_order_relaxed)) + ")";
    detail += (detail.empty() ? "" : "; ") + one;
    found.push_back(TimedOut{c, seq, std::move(one)});
  }
  return detail;
}

// Dumps the engines with timed-out collectives; `found` gets the collectives to fail.
void check_timeouts(const DumpsList& list, std::vector<TimedOut>& found) {
  for (const auto& d : list) {
    const std::string detail = timed_out(*d, found);
    if (detail.empty()) continue;
    if (d->dir.empty())
      std::fprintf(stderr, "flowlane: %s (set FLOWLANE_COMM_DUMP_DIR for a dump)\n", detail.c_str());
    else
      dump_triggered(d, DumpReason::kCommTimeout, detail, /*request_all=*/true);
  }
}

// A dump request's file: its identity (so an unchanged file is not read again) and content.
struct RequestSeen {
  ino_t ino = 0;
  int64_t mtime_ns = -1;
  off_t size = -1;
};

// "key":"value" or "key":number of a one-line JSON object written by request_dumps().
std::string field(const std::string& text, const std::string& key) {
  size_t at = text.find("\"" + key + "\":");
  if (at == std::string::npos) return "";
  at += key.size() + 3;
  if (at < text.size() && text[at] == '"') {
    size_t end = text.find('"', at + 1);
    return end == std::string::npos ? "" : text.substr(at + 1, end - at - 1);
  }
  size_t end = text.find_first_of(",}", at);
  return end == std::string::npos ? "" : text.substr(at, end - at);
}

void check_requests(const DumpsList& list, int64_t started_unix_ns, std::map<std::string, RequestSeen>& seen) {
  std::set<std::string> dirs;
  for (const auto& d : list)
    if (!d->dir.empty()) dirs.insert(d->dir);
  for (const std::string& dir : dirs) {
    const std::string path = dir + "/" + kDumpRequestFile;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) continue;
    RequestSeen now{st.st_ino, int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec, st.st_size};
    RequestSeen& was = seen[dir];
    if (now.ino == was.ino && now.mtime_ns == was.mtime_ns && now.size == was.size) continue;
    was = now;
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    const std::string t = text.str();
    const std::string when = field(t, "time_unix_ns");
    if (when.empty() || std::strtoll(when.c_str(), nullptr, 10) < started_unix_ns) continue;  // a previous job's
    const std::string why = "asked by process " + field(t, "pid") + " (" + kDumpRequestFile + "): " + field(t, "why");
    for (const auto& d : list)
      if (d->dir == dir) dump_triggered(d, DumpReason::kRequest, why, /*request_all=*/false);
  }
}

// The watched engines still alive (under mu); empty: the thread stops (running cleared).
DumpsList watched(Monitor& m) {
  std::lock_guard<std::mutex> lk(m.mu);
  DumpsList out;
  for (auto it = m.engines.begin(); it != m.engines.end();) {
    std::shared_ptr<EngineDumps> d = it->lock();
    if (d == nullptr) {
      it = m.engines.erase(it);
      continue;
    }
    out.push_back(std::move(d));
    ++it;
  }
  if (out.empty()) {
    m.running = false;
    // Release pairs with the acquire load in on_signal(): a handler that still sees the
    // monitor alive wrote its byte before this thread's last read of the pipe.
    g_monitor_alive.store(false, std::memory_order_release);
  }
  return out;
}

void run() {
  Monitor& m = monitor();
  int64_t started;
  {
    std::lock_guard<std::mutex> lk(m.mu);
    started = m.started_unix_ns;
  }
  std::map<std::string, RequestSeen> seen;
  for (;;) {
    bool term = false, usr1 = false;
    wait_for_pipe(term, usr1);
    DumpsList list = watched(m);
    if (list.empty()) {
      // A SIGTERM written before the handlers saw g_monitor_alive cleared still ends the process.
      char buf[64];
      for (ssize_t n; g_pipe_r >= 0 && (n = read(g_pipe_r, buf, sizeof buf)) > 0;)
        for (ssize_t k = 0; k < n; ++k) term |= buf[k] == 'T';
      if (term) chain_now(g_term);
      return;
    }
    std::vector<TimedOut> found;
    check_timeouts(list, found);
    check_requests(list, started, seen);
    // After every dump of this round, the requested ones of this process's other engines
    // included: what the dumps show is the hang, not its undoing.
    for (TimedOut& t : found) t.comm->time_out(t.seq, t.detail);
    if (term || usr1) {
      const std::string why = std::string("signal ") + (term ? "SIGTERM" : "SIGUSR1") + " received";
      for (const auto& d : list) dump_triggered(d, DumpReason::kSignal, why, /*request_all=*/false);
    }
    if (term) {
      g_term_pending.store(false, std::memory_order_relaxed);
      chain_now(g_term);  // SIG_DFL: the process ends here
    }
  }
}

}  // namespace

void monitor_watch(const std::shared_ptr<EngineDumps>& d) {
  std::call_once(g_pipe_once, make_pipe);
  Monitor& m = monitor();
  std::lock_guard<std::mutex> lk(m.mu);
  for (const auto& w : m.engines)
    if (w.lock() == d) return;
  m.engines.push_back(d);
  if (m.running) return;
  m.running = true;
  m.started_unix_ns = Communicator::unix_now_ns();
  g_monitor_alive.store(true, std::memory_order_release);  // pairs with the acquire load in on_signal()
  std::thread(run).detach();  // stops by itself once no watched engine is left
}

void monitor_install_signals(uint32_t signals) {
  std::call_once(g_pipe_once, make_pipe);
  for (SignalSlot* s : {&g_term, &g_usr1}) {
    if ((signals & (s == &g_term ? kSignalTerm : kSignalUsr1)) == 0) continue;
    if (s->installed.exchange(true, std::memory_order_relaxed)) continue;
    sigaction(s->sig, nullptr, &s->prev);  // read first: our handler may run as soon as it is installed
    struct sigaction ours = {};
    ours.sa_sigaction = &on_signal;
    ours.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&ours.sa_mask);
    sigaction(s->sig, &ours, nullptr);
  }
}

}  // namespace flowlane::comm
