// Communicator dumps: one JSON file per rank (an engine with communicators), schema
// flowlane.comm_dump/1, read by tools/fl_comm_analyze.py across the ranks of a job. The
// schema, the triggers and the files are written down in comm/README.md, "Dumps".
//
// Triggers: fl_comm_dump (on demand, any time); the engine's watchdog; an abort with
// collectives pending (fl_comm_destroy, engine destroy); a collective issued for longer
// than FLOWLANE_COMM_TIMEOUT_MS, a DUMP_REQUEST file in the dump folder and, opted in,
// SIGTERM / SIGUSR1 (the dump monitor, dump_monitor.cpp). A triggered dump goes to the
// engine's file in FLOWLANE_COMM_DUMP_DIR, once per hang: it is written again only after a
// collective of the engine completed since (the first dump of a hang is the one that shows
// it; an abort's would show it being torn down), or, for triggers other than an abort,
// after one was queued or issued since that waits now (a rank asked for its dump before it
// reached the collective its peers wait in is dumped again when it times out there). Files are replaced atomically (written
// aside, then renamed), so a reader never sees half a dump.
//
// Locks: EngineDumps::mu (one dump of an engine at a time), then the engine's registry,
// then a backend's lock (briefly, for its state), then the lanes' diag locks (the
// snapshot). Flight recorders are read without locks (comm/recorder.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "comm/comm.hpp"

namespace flowlane::comm {

inline constexpr const char* kDumpSchema = "flowlane.comm_dump/1";
inline constexpr const char* kDumpRequestFile = "DUMP_REQUEST";

enum class DumpReason : uint8_t { kOnDemand, kCommTimeout, kWatchdog, kAbort, kSignal, kRequest };
// "on_demand", "comm_timeout", "watchdog", "abort", "signal", "dump_request"
const char* dump_reason_name(DumpReason r);

// One engine's dumps. Owned by the engine's registry of communicators and by the dump
// monitor (shared); `engine` goes null (under mu) when the engine begins its destroy, after
// which nothing dumps it.
struct EngineDumps {
  EngineDumps(Engine* e, std::string dump_dir, uint64_t serial_no)
      : engine(e), dir(std::move(dump_dir)), serial(serial_no) {}
  std::mutex mu;          // one dump of this engine at a time; guards what follows
  Engine* engine;         // null once the engine is being destroyed
  const std::string dir;  // FLOWLANE_COMM_DUMP_DIR at the engine's first communicator; "": no triggered dumps
  const uint64_t serial;  // the file name's e<N>: engines with communicators of this process, counted
  bool written = false;   // a triggered dump was written, when the communicators had ...
  uint64_t succeeded_at_write = 0;  // ... completed this many collectives,
  uint64_t moved_at_write = 0;      // ... and queued and issued this many
};

// e's dumps (made with its registry of communicators; comm.cpp).
std::shared_ptr<EngineDumps> engine_dumps(Engine& e);

// The dump of e (its communicators, lanes and state dump), as JSON text.
std::string dump_json(Engine& e, uint64_t serial, DumpReason why, const std::string& detail);
// The engine's file in `dir`: "<dir>/flowlane-comm-rank<R>-pid<P>-e<serial>.json".
std::string dump_file(Engine& e, const std::string& dir, uint64_t serial);
// fl_comm_dump: writes the dump of c's engine to `path`, or to its file in the dump folder
// (NULL). Throws (FL_ERR_INVALID_ARGUMENT naming the file and the system's error).
void dump_on_demand(Communicator& c, const char* path);
// A trigger: writes the dump of d's engine to its file unless triggered dumps are off, the
// engine is going, or this hang was dumped already; with `request_all`, asks every rank to
// dump too (DUMP_REQUEST). Waits at most kTriggerWait for a dump of this engine already
// being written. Never throws; says on stderr what it wrote or why it could not.
void dump_triggered(const std::shared_ptr<EngineDumps>& d, DumpReason why, const std::string& detail,
                    bool request_all);
inline constexpr std::chrono::milliseconds kTriggerWait{2000};
// Locks `mu` if it can within `wait` (try_lock, polled every millisecond: the timed locks of
// std::timed_mutex are invisible to ThreadSanitizer). False: another dump holds it.
bool lock_within(std::unique_lock<std::mutex>& lk, std::chrono::milliseconds wait);

// Writes <dir>/DUMP_REQUEST (replacing it): every rank's dump monitor that sees it dumps.
void request_dumps(const std::string& dir, const std::string& why);
// Writes `text` to `path` atomically (aside, then renamed). Returns "" or the error.
std::string write_file_atomically(const std::string& path, const std::string& text);

// ---- the dump monitor (dump_monitor.cpp) ----------------------------------------------------

// From now on the monitor watches d's engine (comm timeouts, dump requests, signals); it
// runs while it watches engines whose dumps live.
void monitor_watch(const std::shared_ptr<EngineDumps>& d);
// Installs the handlers of FLOWLANE_COMM_DUMP_ON_SIGNAL (bits of kSignalTerm, kSignalUsr1),
// once per signal and process.
void monitor_install_signals(uint32_t signals);
inline constexpr uint32_t kSignalTerm = 1, kSignalUsr1 = 2;

}  // namespace flowlane::comm
