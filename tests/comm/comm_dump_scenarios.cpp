// Distributed hangs acted out by ranks that are engines of one process (FL_COMM_HOST_FAKE),
// each writing its own communicator dump, for tools/fl_comm_analyze.py to explain
// (tests/comm/run_dump_scenario.py runs both and compares the verdict with
// tests/comm/expected/<scenario>.txt). Public C API only.
//
//   flowlane_comm_dump_scenarios SCENARIO OUT_DIR
//
//   mismatch   4 ranks; at seq 3 rank 2 all-reduces 5 elements, the others 4 (the host
//              backend fails them all); every rank dumps on demand (fl_comm_dump, NULL path)
//   stuck      4 ranks; rank 1's seq 3 reads an object its host callback 'backward' (lane 0)
//              never finishes writing; the others wait in seq 3 until FLOWLANE_COMM_TIMEOUT_MS
//              dumps them and asks rank 1 to dump too (DUMP_REQUEST), then fails their seq 3
//   dead       4 ranks; rank 3 stops after seq 2 and writes no dump; ranks 0-2 wait in seq 3
//              and dump on demand to a path each
//   crossed    2 ranks, two communicators on one lane: rank 0 submits c1 then c2, rank 1 c2
//              then c1; the comm timeout dumps both
//   truncated  2 ranks, FLOWLANE_COMM_TRACE_SIZE=8: 40 collectives, then rank 1 stuck as in
//              `stuck` while rank 0 queues 20 more (its record of the one it waits in is
//              dropped from its ring)
//   bound      2 ranks, 10^4 collectives (groups of 6 parts, long names), then both dump:
//              prints the file sizes and the bound they must stay under
//   sigterm    2 ranks stuck as in `stuck`, FLOWLANE_COMM_DUMP_ON_SIGNAL=TERM; prints READY
//              and waits for the SIGTERM that ends it (the driver checks it died of it);
//              with a 3rd argument `chain`, a SIGTERM handler of its own is installed first:
//              it runs after the dumps and exits with status 77
//
// Every wait is bounded (a hung scenario exits 3 with a message, never hangs the test). Lines
// "latency_ms ..." report how long after its trigger a dump appeared. Scenarios whose dumps
// come from triggers move them, once they show the hang, into OUT_DIR/job (freeze()), which
// the driver analyzes.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "flowlane/flowlane.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kBound = std::chrono::seconds(30);  // generous: a slow machine never fails a scenario
constexpr uint64_t kSyncNs = 30'000'000'000ull;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "scenario failed: %s (%s)\n", what.c_str(), fl_last_error_message());
  std::exit(3);
}
void ok(fl_status_t st, const char* what) {
  if (st != FL_OK) die(std::string(what) + " returned " + fl_status_name(st));
}

struct Rank {
  fl_engine_t* engine = nullptr;
  std::vector<fl_comm_t*> comms;
  fl_stream_t* coll = nullptr;  // lane 1's collective stream
  fl_stream_t* host0 = nullptr;  // lane 0's host stream
  std::vector<float> send, recv;
  fl_object_t* grad = nullptr;  // what 'backward' writes and the collective reads
};

std::vector<Rank> make_ranks(int n, int comms) {
  std::vector<fl_comm_unique_id_t> ids(static_cast<size_t>(comms));
  for (auto& id : ids) ok(fl_comm_get_unique_id(FL_COMM_HOST_FAKE, &id), "fl_comm_get_unique_id");
  std::vector<Rank> ranks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    Rank& k = ranks[size_t(r)];
    fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
    d.num_workers = 2;
    d.max_lanes = 4;
    ok(fl_engine_create(&d, &k.engine), "fl_engine_create");
    for (int c = 0; c < comms; ++c) {
      fl_comm_desc_t cd = FL_COMM_DESC_INIT;
      cd.nranks = uint64_t(n);
      cd.rank = uint64_t(r);
      cd.lane = 1;
      cd.backend = FL_COMM_HOST_FAKE;
      fl_comm_t* comm = nullptr;
      ok(fl_comm_create(k.engine, &cd, &ids[size_t(c)], &comm), "fl_comm_create");
      k.comms.push_back(comm);
    }
    fl_device_t cpu{FL_DEVICE_CPU, 0};
    ok(fl_stream_get(k.engine, 1, cpu, FL_STREAM_COLLECTIVE, &k.coll), "fl_stream_get");
    ok(fl_stream_get(k.engine, 0, cpu, FL_STREAM_HOST, &k.host0), "fl_stream_get");
    k.send.assign(64, float(r + 1));
    k.recv.assign(64 * size_t(n), 0.0f);
    ok(fl_object_create(k.engine, nullptr, nullptr, &k.grad), "fl_object_create");
  }
  return ranks;
}

void destroy(std::vector<Rank>& ranks) {
  for (Rank& k : ranks) {
    fl_object_release(k.grad);
    fl_engine_destroy(k.engine);  // aborts what still waits (its peers' collectives are cancelled)
  }
}

fl_coll_part_t allreduce(Rank& k, uint64_t count) {
  fl_coll_part_t p{};
  p.op = FL_COLL_ALL_REDUCE;
  p.dtype = FL_DTYPE_FLOAT32;
  p.redop = FL_REDOP_SUM;
  p.sendbuf = k.send.data();
  p.recvbuf = k.recv.data();
  p.count = count;
  return p;
}
fl_coll_part_t allgather(Rank& k, uint64_t count) {
  fl_coll_part_t p = allreduce(k, count);
  p.op = FL_COLL_ALL_GATHER;
  return p;
}

void submit(Rank& k, size_t comm, std::vector<fl_coll_part_t> parts, const char* name, bool reads_grad = false) {
  fl_operand_t op{k.grad, FL_READ, 0};
  fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
  in.parts = parts.data();
  in.num_parts = parts.size();
  in.operands = reads_grad ? &op : nullptr;
  in.num_operands = reads_grad ? 1 : 0;
  in.name = name;
  ok(fl_submit_collective(k.coll, k.comms[comm], &in, nullptr), "fl_submit_collective");
}

void sync_all(std::vector<Rank>& ranks) {
  for (Rank& k : ranks) ok(fl_engine_synchronize_for(k.engine, kSyncNs), "fl_engine_synchronize_for");
}

// Waits for every rank's work after a hang the timeout ended: the timed-out collectives
// failed (FL_ERR_TIMEOUT), and what came after them on their communicator too. Each wait
// returns one failure; bounded.
void sync_after_timeouts(std::vector<Rank>& ranks) {
  for (Rank& k : ranks) {
    int n = 0;
    while (fl_engine_synchronize_for(k.engine, kSyncNs) != FL_OK)
      if (++n > 256) die("the ranks' work did not finish after the timeouts");
  }
}

// A host instruction on lane 0 that writes `grad` and returns only once `release` is set
// (bounded: it gives up after kBound, failing the scenario).
std::atomic<bool> g_release{false};
fl_status_t backward_fn(fl_instr_ctx_t*, void*) {
  const auto until = Clock::now() + kBound * 2;
  while (!g_release.load() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return FL_OK;
}
void submit_backward(Rank& k) {
  fl_operand_t op{k.grad, FL_WRITE, 0};
  fl_host_instr_t h = FL_HOST_INSTR_INIT;
  h.fn = &backward_fn;
  h.operands = &op;
  h.num_operands = 1;
  h.name = "backward";
  ok(fl_submit_host(k.host0, &h, nullptr), "fl_submit_host");
}

std::vector<std::string> json_files(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* e = readdir(d)) {
      const std::string s = e->d_name;
      if (s.size() > 5 && s.compare(s.size() - 5, 5, ".json") == 0 && s.find(".tmp-") == std::string::npos)
        out.push_back(dir + "/" + s);
    }
    closedir(d);
  }
  return out;
}

// Waits (bounded) for n dump files in dir; the milliseconds it took from `since`.
double wait_for_dumps(const std::string& dir, size_t n, Clock::time_point since) {
  const auto until = Clock::now() + kBound;
  while (json_files(dir).size() < n) {
    if (Clock::now() > until)
      die("only " + std::to_string(json_files(dir).size()) + " of " + std::to_string(n) + " dumps in " + dir);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

// Waits (bounded) until rank r's dump file in dir says `what` (a dump can be rewritten: a
// rank asked for its dump before it issued its collective is dumped again on its own
// timeout, once it waits too).
void wait_for_dump_saying(const std::string& dir, int r, const std::string& what) {
  const auto until = Clock::now() + kBound;
  const std::string tag = "flowlane-comm-rank" + std::to_string(r) + "-";
  for (;;) {
    for (const std::string& f : json_files(dir)) {
      if (f.find(tag) == std::string::npos) continue;
      FILE* in = std::fopen(f.c_str(), "r");
      if (in == nullptr) continue;
      std::string text;
      char chunk[4096];
      for (size_t n; (n = std::fread(chunk, 1, sizeof chunk, in)) > 0;) text.append(chunk, n);
      std::fclose(in);
      if (text.find(what) != std::string::npos) return;
    }
    if (Clock::now() > until) die("rank " + std::to_string(r) + "'s dump never said " + what);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// The job's dumps as they are now, moved into <dir>/job for the analyzer: a dump request
// still in flight, handled after the scenario went on (released the stuck rank, aborted),
// would show a later state than the hang.
void freeze(const std::string& dir) {
  const std::string job = dir + "/job";
  if (mkdir(job.c_str(), 0755) != 0) die("mkdir " + job);
  for (const std::string& f : json_files(dir))
    if (std::rename(f.c_str(), (job + f.substr(f.rfind('/'))).c_str()) != 0) die("rename " + f);
}

void set(const char* name, const std::string& value) { setenv(name, value.c_str(), 1); }

// Warm-up: `n` all-reduces on every rank, completed.
void warm_up(std::vector<Rank>& ranks, int n) {
  for (int s = 0; s < n; ++s)
    for (Rank& k : ranks) submit(k, 0, {allreduce(k, 4)}, "warmup");
  sync_all(ranks);
}

// ---- the scenarios -------------------------------------------------------------------------

void mismatch(const std::string& dir) {
  set("FLOWLANE_COMM_DUMP_DIR", dir);
  auto ranks = make_ranks(4, 1);
  warm_up(ranks, 2);
  for (int r = 0; r < 4; ++r) submit(ranks[size_t(r)], 0, {allreduce(ranks[size_t(r)], r == 2 ? 5 : 4)}, "grad.bucket0");
  for (Rank& k : ranks) (void)fl_engine_synchronize_for(k.engine, kSyncNs);  // seq 3 fails on every rank
  for (Rank& k : ranks) ok(fl_comm_dump(k.comms[0], nullptr), "fl_comm_dump");
  destroy(ranks);
}

// Waits (bounded) until rank k's state dump says `what`.
void wait_for_state(Rank& k, const std::string& what) {
  const auto until = Clock::now() + kBound;
  for (;;) {
    static char buf[1 << 16];
    uint64_t need = 0;
    ok(fl_engine_dump(k.engine, buf, sizeof buf, &need), "fl_engine_dump");
    if (std::strstr(buf, what.c_str()) != nullptr) return;
    if (Clock::now() > until) die("the state dump never said: " + what);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// stuck_rank's next collective reads grad, which its 'backward' callback never finishes
// writing: once its lane shows it blocked (a loaded machine may take a while to run the
// lane), the other ranks submit theirs and wait in it.
void stuck_at(std::vector<Rank>& ranks, size_t stuck_rank) {
  submit_backward(ranks[stuck_rank]);
  submit(ranks[stuck_rank], 0, {allreduce(ranks[stuck_rank], 4)}, "grad.allreduce", true);
  wait_for_state(ranks[stuck_rank], "collective) BLOCKED");
  for (size_t r = 0; r < ranks.size(); ++r)
    if (r != stuck_rank) submit(ranks[r], 0, {allreduce(ranks[r], 4)}, "grad.allreduce");
}

void stuck(const std::string& dir) {
  set("FLOWLANE_COMM_DUMP_DIR", dir);
  set("FLOWLANE_COMM_TIMEOUT_MS", "300");
  auto ranks = make_ranks(4, 1);
  warm_up(ranks, 2);
  const auto t0 = Clock::now();
  stuck_at(ranks, 1);
  const double ms = wait_for_dumps(dir, 4, t0);
  std::printf("latency_ms comm_timeout+request %.1f (timeout 300 ms; the 4th dump %.1f ms after the timeout)\n", ms,
              ms - 300.0);
  for (int r : {0, 2, 3}) wait_for_dump_saying(dir, r, "\"state\":\"issued\"");
  freeze(dir);
  g_release = true;
  sync_after_timeouts(ranks);  // the timeout failed seq 3 on ranks 0, 2, 3 after their dumps
  destroy(ranks);
}

// Waits (bounded) until rank k's collective `seq` is issued (it waits in the rendezvous).
void wait_issued(Rank& k, int seq) {
  wait_for_state(k, "sequence numbers: queued " + std::to_string(seq) + ", issued " + std::to_string(seq));
}

void dead(const std::string& dir) {
  auto ranks = make_ranks(4, 1);
  warm_up(ranks, 2);
  for (size_t r = 0; r < 3; ++r) submit(ranks[r], 0, {allreduce(ranks[r], 4)}, "grad.allreduce");
  // Ranks 0-2 wait in seq 3 (their dumps show it issued); rank 3 never comes.
  for (size_t r = 0; r < 3; ++r) {
    wait_issued(ranks[r], 3);
    const std::string path = dir + "/rank" + std::to_string(r) + ".json";
    ok(fl_comm_dump(ranks[r].comms[0], path.c_str()), "fl_comm_dump");
  }
  destroy(ranks);
}

void crossed(const std::string& dir) {
  set("FLOWLANE_COMM_DUMP_DIR", dir);
  set("FLOWLANE_COMM_TIMEOUT_MS", "300");
  auto ranks = make_ranks(2, 2);
  submit(ranks[0], 0, {allreduce(ranks[0], 4)}, "layer.allreduce");
  submit(ranks[0], 1, {allgather(ranks[0], 2)}, "pipeline.allgather");
  submit(ranks[1], 1, {allgather(ranks[1], 2)}, "pipeline.allgather");
  submit(ranks[1], 0, {allreduce(ranks[1], 4)}, "layer.allreduce");
  const double ms = wait_for_dumps(dir, 2, Clock::now());
  std::printf("latency_ms comm_timeout %.1f (timeout 300 ms)\n", ms);
  for (int r : {0, 1}) wait_for_dump_saying(dir, r, "\"state\":\"issued\"");
  freeze(dir);
  destroy(ranks);  // the deadlock is broken by the abort: every collective is cancelled
}

void truncated(const std::string& dir) {
  set("FLOWLANE_COMM_DUMP_DIR", dir);
  set("FLOWLANE_COMM_TIMEOUT_MS", "300");
  set("FLOWLANE_COMM_TRACE_SIZE", "8");
  auto ranks = make_ranks(2, 1);
  warm_up(ranks, 40);
  stuck_at(ranks, 1);
  for (int s = 0; s < 19; ++s) submit(ranks[0], 0, {allreduce(ranks[0], 4)}, "grad.next");
  wait_for_dumps(dir, 2, Clock::now());
  wait_for_dump_saying(dir, 0, "collective seq 41");  // rank 0's own timeout
  freeze(dir);
  g_release = true;
  for (int s = 0; s < 19; ++s) submit(ranks[1], 0, {allreduce(ranks[1], 4)}, "grad.next");
  sync_after_timeouts(ranks);  // rank 0 left at its timeout: the rest fails on both ranks
  destroy(ranks);
}

void bound(const std::string& dir) {
  set("FLOWLANE_COMM_DUMP_DIR", dir);
  auto ranks = make_ranks(2, 1);
  const int n = std::getenv("FL_SCENARIO_SMALL") ? 3000 : 10000;
  const std::string name(100, 'n');  // cut to the record's 47 bytes
  for (int s = 0; s < n; ++s)
    for (Rank& k : ranks) submit(k, 0, {allreduce(k, 4), allreduce(k, 4), allgather(k, 2), allreduce(k, 3),
                                        allreduce(k, 2), allreduce(k, 1)}, name.c_str());
  sync_all(ranks);
  for (Rank& k : ranks) ok(fl_comm_dump(k.comms[0], nullptr), "fl_comm_dump");
  for (const std::string& f : json_files(dir)) {
    struct stat st;
    if (stat(f.c_str(), &st) != 0) die("stat " + f);
    std::printf("dump_bytes %lld collectives %d file %s\n", static_cast<long long>(st.st_size), n, f.c_str());
  }
  destroy(ranks);
}

void on_user_term(int) {
  static const char msg[] = "user SIGTERM handler ran\n";
  (void)!write(2, msg, sizeof msg - 1);
  _exit(77);
}

void sigterm(const std::string& dir, bool chain) {
  if (chain) signal(SIGTERM, &on_user_term);
  set("FLOWLANE_COMM_DUMP_DIR", dir);
  set("FLOWLANE_COMM_DUMP_ON_SIGNAL", "TERM,USR1");
  auto ranks = make_ranks(2, 1);
  warm_up(ranks, 2);
  stuck_at(ranks, 1);
  wait_issued(ranks[0], 3);  // rank 0 waits in seq 3: what the dumps are to show
  std::printf("READY\n");
  std::fflush(stdout);
  std::this_thread::sleep_for(kBound * 2);  // the SIGTERM ends the process before this returns
  die("no SIGTERM came");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s mismatch|stuck|dead|crossed|truncated|bound|sigterm OUT_DIR [chain]\n", argv[0]);
    return 2;
  }
  const std::string what = argv[1], dir = argv[2];
  if (what == "mismatch") mismatch(dir);
  else if (what == "stuck") stuck(dir);
  else if (what == "dead") dead(dir);
  else if (what == "crossed") crossed(dir);
  else if (what == "truncated") truncated(dir);
  else if (what == "bound") bound(dir);
  else if (what == "sigterm") sigterm(dir, argc > 3 && std::string(argv[3]) == "chain");
  else {
    std::fprintf(stderr, "unknown scenario '%s'\n", what.c_str());
    return 2;
  }
  return 0;
}
