// Communicator dumps (comm/dump.hpp): the JSON of one rank, its file, and the triggers.
#include "comm/dump.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "base/json.hpp"

namespace flowlane::comm {

const char* dump_reason_name(DumpReason r) {
  switch (r) {
    case DumpReason::kOnDemand: return "on_demand";
    case DumpReason::kCommTimeout: return "comm_timeout";
    case DumpReason::kWatchdog: return "watchdog";
    case DumpReason::kAbort: return "abort";
    case DumpReason::kSignal: return "signal";
    case DumpReason::kRequest: return "dump_request";
  }
  return "?";
}

namespace {

// The launcher's view of this process (detect_launcher, env.cpp); a variable set but wrong
// is treated as no launcher here (a dump is never refused for it).
struct Launcher {
  const char* name = nullptr;
  int64_t rank = -1, size = -1;
};

Launcher launcher() {
  LauncherInfo l;
  try {
    if (detect_launcher(&l)) return Launcher{l.name, int64_t(l.rank), int64_t(l.size)};
  } catch (...) {
  }
  return Launcher{};
}

// The rank a dump file is named by: the launcher's, else this engine's rank in its first
// communicator.
int64_t process_rank(const Launcher& l, const std::vector<std::shared_ptr<Communicator>>& comms) {
  if (l.name != nullptr) return l.rank;
  return comms.empty() ? -1 : int64_t(comms.front()->rank);
}

std::string host_name() {
  char b[256] = {};
  if (gethostname(b, sizeof b - 1) != 0) return "?";
  return b;
}

void process_json(std::string& out, const Launcher& l, int64_t rank) {
  auto num = [](int64_t v) { return v < 0 ? std::string("null") : std::to_string(v); };
  out += "\"process\":{\"host\":" + json_string(host_name()) + ",\"pid\":" + std::to_string(getpid()) +
         ",\"launcher\":" + (l.name ? json_string(l.name) : std::string("null")) +
         ",\"launcher_rank\":" + num(l.rank) + ",\"launcher_size\":" + num(l.size) + ",\"rank\":" + num(rank) + "}";
}

void communicator_json(std::string& out, Communicator& c) {
  std::string reason;
  const char* state = c.state_word(&reason);
  const FlightRecorder& r = c.recorder;
  out += "{\"id\":\"" + hex(c.id) + "\",\"handle\":\"" + hex(c.handle.load(std::memory_order_relaxed)) + "\",\"backend\":\"" + c.backend_name +
         "\",\"rank\":" + std::to_string(c.rank) + ",\"nranks\":" + std::to_string(c.nranks) +
         ",\"lane\":" + std::to_string(c.lane) + ",\"state\":\"" + state + "\",\"reason\":" +
         (reason.empty() ? std::string("null") : json_string(reason, 1024)) +
         ",\"queued\":" + std::to_string(r.queued_seq()) + ",\"issued\":" + std::to_string(r.issued_seq()) +
         ",\"finished\":" + std::to_string(r.finished_seq()) + ",\"succeeded\":" + std::to_string(r.succeeded()) +
         ",\"trace_size\":" + std::to_string(r.capacity()) + ",\"timeout_ms\":" + std::to_string(c.timeout_ms.load(std::memory_order_relaxed)) +
         ",\"created_unix_ns\":" + std::to_string(c.created_unix_ns) +
         ",\"age_ns\":" + std::to_string(c.since_created_ns()) + ",\n ";
  r.dump_json(out);
  out += "}";
}

// How far the communicators got: collectives completed, queued plus issued, and whether
// one is issued and waiting now.
struct Progress {
  uint64_t succeeded = 0, moved = 0;
  bool waiting = false;
};
Progress progress(const std::vector<std::shared_ptr<Communicator>>& comms) {
  Progress p;
  for (const auto& c : comms) {
    const FlightRecorder& r = c->recorder;
    p.succeeded += r.succeeded();
    p.moved += r.queued_seq() + r.issued_seq();
    p.waiting = p.waiting || r.issued_seq() > r.finished_seq();
  }
  return p;
}

}  // namespace

std::string dump_json(Engine& e, uint64_t serial, DumpReason why, const std::string& detail) {
  auto comms = communicators(e);
  const Launcher l = launcher();
  std::string out = "{\"schema\":\"" + std::string(kDumpSchema) + "\",\"reason\":\"" + dump_reason_name(why) +
                    "\",\"detail\":" + json_string(detail, 4096) +
                    ",\"time_unix_ns\":" + std::to_string(Communicator::unix_now_ns()) + ",\n";
  process_json(out, l, process_rank(l, comms));
  out += ",\n\"engine\":{\"handle\":\"" + hex(e.handle()) + "\",\"serial\":" + std::to_string(serial) +
         ",\"lanes\":" + std::to_string(e.lane_count()) + ",\"workers\":" + std::to_string(e.worker_count()) + "},\n";
  out += "\"communicators\":[";
  for (size_t k = 0; k < comms.size(); ++k) {
    out += k ? ",\n" : "\n";
    communicator_json(out, *comms[k]);
  }
  out += "]";
  for (core::Extension* x : e.extensions()) x->dump_json(out);  // the diagnostics: lanes, cycles, the text dump
  out += "}\n";
  return out;
}

std::string dump_file(Engine& e, const std::string& dir, uint64_t serial) {
  const int64_t rank = process_rank(launcher(), communicators(e));
  return dir + "/flowlane-comm-rank" + (rank < 0 ? std::string("x") : std::to_string(rank)) + "-pid" +
         std::to_string(getpid()) + "-e" + std::to_string(serial) + ".json";
}

std::string write_file_atomically(const std::string& path, const std::string& text) {
  static std::atomic<uint64_t> counter{0};
  const std::string aside = path + ".tmp-" + std::to_string(getpid()) + "-" +
                            std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
  int fd = ::open(aside.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return "cannot create '" + aside + "': " + std::strerror(errno);
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string err = "writing '" + aside + "' failed: " + std::strerror(errno);
      ::close(fd);
      ::unlink(aside.c_str());
      return err;
    }
    done += size_t(n);
  }
  if (::close(fd) != 0) {
    std::string err = "writing '" + aside + "' failed: " + std::strerror(errno);
    ::unlink(aside.c_str());
    return err;
  }
  if (::rename(aside.c_str(), path.c_str()) != 0) {
    std::string err = "cannot rename '" + aside + "' to '" + path + "': " + std::strerror(errno);
    ::unlink(aside.c_str());
    return err;
  }
  return "";
}

bool lock_within(std::unique_lock<std::mutex>& lk, std::chrono::milliseconds wait) {
  const auto until = std::chrono::steady_clock::now() + wait;
  while (!lk.try_lock()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

void dump_on_demand(Communicator& c, const char* path) {
  const std::string fn = "fl_comm_dump";
  std::shared_ptr<EngineDumps> d = engine_dumps(*c.engine);
  std::unique_lock<std::mutex> lk(d->mu);
  if (d->engine == nullptr) fail(FL_ERR_SHUTDOWN, fn + ": the communicator's engine is being destroyed");
  std::string where;
  if (path != nullptr) {
    if (*path == 0) fail(FL_ERR_INVALID_ARGUMENT, fn + ": path is empty (NULL means the file in FLOWLANE_COMM_DUMP_DIR)");
    where = path;
  } else {
    if (d->dir.empty())
      fail(FL_ERR_INVALID_ARGUMENT, fn + ": path is NULL but FLOWLANE_COMM_DUMP_DIR was not set when this engine "
                                         "created its first communicator; give a path, or set the variable");
    where = dump_file(*d->engine, d->dir, d->serial);
  }
  const std::string err = write_file_atomically(where, dump_json(*d->engine, d->serial, DumpReason::kOnDemand, "fl_comm_dump"));
  if (!err.empty()) fail(FL_ERR_INVALID_ARGUMENT, fn + ": " + err);
}

void dump_triggered(const std::shared_ptr<EngineDumps>& d, DumpReason why, const std::string& detail,
                    bool request_all) {
  try {
    std::unique_lock<std::mutex> lk(d->mu, std::defer_lock);
    if (!lock_within(lk, kTriggerWait)) {
      std::fprintf(stderr, "flowlane: communicator dump (%s) skipped: another dump of this engine took over %lld ms\n",
                   dump_reason_name(why), static_cast<long long>(kTriggerWait.count()));
      return;
    }
    if (d->engine == nullptr || d->dir.empty()) return;
    // This hang is on file already: nothing completed since, and nothing was queued or
    // issued since that waits now (an abort, which the dump of a hang precedes, and the
    // cancellations that follow it never count).
    const Progress now = progress(communicators(*d->engine));
    if (d->written && now.succeeded == d->succeeded_at_write &&
        (why == DumpReason::kAbort || now.moved == d->moved_at_write || !now.waiting))
      return;
    const std::string path = dump_file(*d->engine, d->dir, d->serial);
    const std::string err = write_file_atomically(path, dump_json(*d->engine, d->serial, why, detail));
    if (!err.empty()) {
      std::fprintf(stderr, "flowlane: communicator dump (%s) failed: %s\n", dump_reason_name(why), err.c_str());
      return;
    }
    d->written = true;
    d->succeeded_at_write = now.succeeded;
    d->moved_at_write = now.moved;
    std::fprintf(stderr, "flowlane: communicator dump (%s) written to %s\n", dump_reason_name(why), path.c_str());
    if (request_all) request_dumps(d->dir, detail);
  } catch (const std::exception& ex) {  // out of memory, mostly: a trigger must not throw
    std::fprintf(stderr, "flowlane: communicator dump (%s) failed: %s\n", dump_reason_name(why), ex.what());
  } catch (...) {
    std::fprintf(stderr, "flowlane: communicator dump (%s) failed\n", dump_reason_name(why));
  }
}

void request_dumps(const std::string& dir, const std::string& why) {
  std::random_device rd;
  char token[40];
  std::snprintf(token, sizeof token, "%08x%08x", rd(), rd());
  const std::string text = "{\"token\":\"" + std::string(token) + "\",\"time_unix_ns\":" +
                           std::to_string(Communicator::unix_now_ns()) + ",\"pid\":" + std::to_string(getpid()) +
                           ",\"why\":" + json_string(why, 1024) + "}\n";
  const std::string err = write_file_atomically(dir + "/" + kDumpRequestFile, text);
  if (!err.empty()) std::fprintf(stderr, "flowlane: cannot ask the other ranks to dump: %s\n", err.c_str());
}

}  // namespace flowlane::comm
