// Communicator dumps (fl_comm_dump, FLOWLANE_COMM_*; comm/README.md, "Dumps"): the file of
// each rank, its errors, the settings read from the environment, every trigger (on demand,
// watchdog, abort, comm timeout, dump request, SIGUSR1), one dump per hang, and dumps taken
// while collectives run. The analyzer's verdicts on dumps of whole scenarios are the
// comm.dump.* tests (tests/comm).
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "test_diag_util.hpp"

using namespace fldiag;

namespace {

constexpr auto kBound = std::chrono::seconds(30);  // generous: a slow machine never fails these

// Sets an environment variable for the scope (fl_comm_create reads them).
struct Env {
  std::string name;
  Env(const char* n, const std::string& v) : name(n) { setenv(n, v.c_str(), 1); }
  ~Env() { unsetenv(name.c_str()); }
};

std::string fresh_dir(const std::string& name) {
  std::string d = fltest::unique_temp_path(name);
  std::string cmd = "rm -rf '" + d + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_EQ(mkdir(d.c_str(), 0755), 0) << d;
  return d;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> dumps_in(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* e = readdir(d)) {
      std::string s = e->d_name;
      if (s.size() > 5 && s.compare(s.size() - 5, 5, ".json") == 0 && s.find(".tmp-") == std::string::npos)
        out.push_back(dir + "/" + s);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Waits (bounded) until `dir` holds a dump of rank `rank` whose text contains `fragment`.
std::string wait_for_rank_dump(const std::string& dir, int rank, const std::string& fragment) {
  const auto until = Clock::now() + kBound;
  const std::string tag = "flowlane-comm-rank" + std::to_string(rank) + "-";
  for (;;) {
    for (const std::string& f : dumps_in(dir))
      if (contains(f, tag)) {
        std::string text = slurp(f);
        if (contains(text, fragment)) return text;
      }
    if (Clock::now() > until) return "";
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

// The value of "key": in a dump's text (the first one).
std::string field(const std::string& text, const std::string& key) {
  size_t at = text.find("\"" + key + "\":");
  if (at == std::string::npos) return "";
  at += key.size() + 3;
  size_t end = text.find_first_of(",}", text[at] == '"' ? text.find('"', at + 1) : at);
  return text.substr(at, end - at);
}

// Ranks: one engine each, a host-fake communicator on lane 1.
struct Ranks {
  std::vector<fl_engine_t*> engines;
  std::vector<fl_comm_t*> comms;
  std::vector<std::vector<float>> buf;
  explicit Ranks(int n) {
    fl_comm_unique_id_t id;
    EXPECT_FL_OK(fl_comm_get_unique_id(FL_COMM_HOST_FAKE, &id));
    for (int r = 0; r < n; ++r) {
      fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
      d.num_workers = 2;
      d.max_lanes = 4;
      fl_engine_t* e = nullptr;
      EXPECT_FL_OK(fl_engine_create(&d, &e));
      engines.push_back(e);
      fl_comm_desc_t cd = FL_COMM_DESC_INIT;
      cd.nranks = uint64_t(n);
      cd.rank = uint64_t(r);
      cd.lane = 1;
      cd.backend = FL_COMM_HOST_FAKE;
      fl_comm_t* c = nullptr;
      EXPECT_FL_OK(fl_comm_create(e, &cd, &id, &c));
      comms.push_back(c);
      buf.emplace_back(16, 1.0f);
    }
  }
  ~Ranks() {
    for (fl_engine_t* e : engines) fl_engine_destroy(e);
  }
  void allreduce(int r, const char* name = "grad", fl_status_t expect = FL_OK) {
    fl_coll_part_t p = fltest::coll_part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, buf[size_t(r)].data(),
                                         buf[size_t(r)].data(), 4);
    fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
    in.parts = &p;
    in.num_parts = 1;
    in.name = name;
    EXPECT_EQ(fl_submit_collective(coll_of(engines[size_t(r)], 1), comms[size_t(r)], &in, nullptr), expect)
        << fl_last_error_message();
  }
  void sync() {
    for (fl_engine_t* e : engines) EXPECT_FL_OK(fl_engine_synchronize_for(e, 60'000'000'000ull));
  }
};

}  // namespace

TEST(CommDump, OnDemandWritesOneFilePerRankWithTheCommunicatorIdOfEveryRank) {
  Ranks ranks(2);
  for (int s = 0; s < 3; ++s)
    for (int r = 0; r < 2; ++r) ranks.allreduce(r);
  ranks.sync();
  const std::string dir = fresh_dir("dump_on_demand");
  std::string text[2];
  for (int r = 0; r < 2; ++r) {
    const std::string path = dir + "/r" + std::to_string(r) + ".json";
    ASSERT_FL_OK(fl_comm_dump(ranks.comms[size_t(r)], path.c_str()));
    text[r] = slurp(path);
    EXPECT_EQ(text[r].rfind("{\"schema\":\"flowlane.comm_dump/1\"", 0), 0u) << text[r];
    EXPECT_EQ(text[r].substr(text[r].size() - 2), "}\n") << "a whole file";
    EXPECT_EQ(field(text[r], "reason"), "\"on_demand\"");
    EXPECT_EQ(count(text[r], "{\"seq\":"), 3u) << text[r];
    EXPECT_EQ(count(text[r], "\"state\":\"completed\""), 3u) << text[r];
    EXPECT_EQ(field(text[r], "records_dropped"), "0");
    EXPECT_TRUE(contains(text[r], "\"rank\":" + std::to_string(r) + ",\"nranks\":2,\"lane\":1")) << text[r];
    EXPECT_TRUE(contains(text[r], "\"signature\":\"all_reduce(float32, sum, count=4)\"")) << text[r];
    EXPECT_TRUE(contains(text[r], "\"lanes\":[")) << text[r];
    EXPECT_TRUE(contains(text[r], "\"text\":\"=== flowlane state dump")) << text[r];
  }
  EXPECT_FALSE(field(text[0], "id").empty());
  EXPECT_EQ(field(text[0], "id"), field(text[1], "id")) << "the communicator id is equal on every rank";
  EXPECT_NE(field(text[0], "handle"), field(text[1], "handle"));

  // From a callback (code the engine runs), and replacing the file.
  const std::string path = dir + "/r0.json";
  struct Ctx {
    fl_comm_t* comm;
    std::string path;
    fl_status_t st = FL_ERR_INTERNAL;
  } ctx{ranks.comms[0], path};
  fl_host_instr_t h = FL_HOST_INSTR_INIT;
  h.fn = [](fl_instr_ctx_t*, void* ud) {
    auto* c = static_cast<Ctx*>(ud);
    c->st = fl_comm_dump(c->comm, c->path.c_str());
    return FL_OK;
  };
  h.user_data = &ctx;
  ASSERT_FL_OK(fl_submit_host(host_of(ranks.engines[0], 0), &h, nullptr));
  ASSERT_FL_OK(fl_engine_synchronize(ranks.engines[0]));
  EXPECT_EQ(ctx.st, FL_OK) << fl_last_error_message();
  EXPECT_EQ(count(slurp(path), "{\"seq\":"), 3u);
}

TEST(CommDump, ErrorsNameTheProblem) {
  Ranks ranks(1);
  EXPECT_FL_ERR(fl_comm_dump(nullptr, "/tmp/x.json"), FL_ERR_INVALID_HANDLE, "fl_comm_dump");
  EXPECT_FL_ERR(fl_comm_dump(ranks.comms[0], ""), FL_ERR_INVALID_ARGUMENT, "path is empty");
  EXPECT_FL_ERR(fl_comm_dump(ranks.comms[0], nullptr), FL_ERR_INVALID_ARGUMENT,
                "FLOWLANE_COMM_DUMP_DIR was not set when this engine created its first communicator");
  EXPECT_FL_ERR(fl_comm_dump(ranks.comms[0], "/nonexistent-flowlane-dir/x.json"), FL_ERR_INVALID_ARGUMENT,
                "cannot create '/nonexistent-flowlane-dir/x.json.tmp-");
  fl_comm_t* stale = ranks.comms[0];
  ASSERT_FL_OK(fl_comm_destroy(stale));
  ranks.comms[0] = nullptr;
  EXPECT_FL_ERR(fl_comm_dump(stale, "/tmp/x.json"), FL_ERR_INVALID_HANDLE, "fl_comm_dump");
}

TEST(CommDump, SettingsFromTheEnvironmentAreChecked) {
  EngineFixture f(2, 4);
  fl_comm_unique_id_t id;
  ASSERT_FL_OK(fl_comm_get_unique_id(FL_COMM_HOST_FAKE, &id));
  fl_comm_desc_t d = FL_COMM_DESC_INIT;
  d.nranks = 1;
  d.lane = 1;
  d.backend = FL_COMM_HOST_FAKE;
  fl_comm_t* c = nullptr;
  for (const char* bad : {"abc", "0", "65537", "-1", "12x"}) {
    Env e("FLOWLANE_COMM_TRACE_SIZE", bad);
    EXPECT_FL_ERR(fl_comm_create(f.engine, &d, &id, &c), FL_ERR_INVALID_ARGUMENT,
                  std::string("FLOWLANE_COMM_TRACE_SIZE='") + bad + "' is not a whole number in 1..65536");
  }
  {
    Env e("FLOWLANE_COMM_TIMEOUT_MS", "soon");
    EXPECT_FL_ERR(fl_comm_create(f.engine, &d, &id, &c), FL_ERR_INVALID_ARGUMENT, "FLOWLANE_COMM_TIMEOUT_MS='soon'");
  }
  {
    Env dir("FLOWLANE_COMM_DUMP_DIR", "/tmp");
    Env e("FLOWLANE_COMM_DUMP_ON_SIGNAL", "TERM,INT");
    EXPECT_FL_ERR(fl_comm_create(f.engine, &d, &id, &c), FL_ERR_INVALID_ARGUMENT,
                  "names 'INT'; the signals it takes are TERM and USR1");
  }
  {
    Env e("FLOWLANE_COMM_DUMP_ON_SIGNAL", "TERM");
    EXPECT_FL_ERR(fl_comm_create(f.engine, &d, &id, &c), FL_ERR_INVALID_ARGUMENT,
                  "FLOWLANE_COMM_DUMP_ON_SIGNAL is set but FLOWLANE_COMM_DUMP_DIR is not");
  }
  // A refused creation used nothing: the rank can still join.
  ASSERT_FL_OK(fl_comm_create(f.engine, &d, &id, &c));
  EXPECT_FL_OK(fl_comm_destroy(c));
}

TEST(CommDump, TraceSizeBoundsTheRing) {
  Env e("FLOWLANE_COMM_TRACE_SIZE", "8");
  Ranks ranks(2);
  for (int s = 0; s < 20; ++s)
    for (int r = 0; r < 2; ++r) ranks.allreduce(r);
  ranks.sync();
  const std::string path = fresh_dir("dump_ring") + "/r0.json";
  ASSERT_FL_OK(fl_comm_dump(ranks.comms[0], path.c_str()));
  const std::string text = slurp(path);
  EXPECT_EQ(count(text, "{\"seq\":"), 8u) << text;
  EXPECT_TRUE(contains(text, "{\"seq\":13,")) << "the last 8 are kept: " << text;
  EXPECT_FALSE(contains(text, "{\"seq\":12,")) << text;
  EXPECT_EQ(field(text, "records_dropped"), "12");
  EXPECT_EQ(field(text, "trace_size"), "8");
  EXPECT_EQ(field(text, "queued"), "20");
}

// Rank 0 waits in a collective rank 1 never submits: the watchdog of rank 0's engine writes
// its dump and asks every rank for theirs (rank 1's comes through the DUMP_REQUEST file).
TEST(CommDump, WatchdogDumpsAndAsksTheOtherRanks) {
  const std::string dir = fresh_dir("dump_watchdog");
  Env e("FLOWLANE_COMM_DUMP_DIR", dir);
  Ranks ranks(2);
  fl_watchdog_desc_t w = FL_WATCHDOG_DESC_INIT;
  w.timeout_ms = 200;
  w.path = "/dev/null";
  ASSERT_FL_OK(fl_engine_set_watchdog(ranks.engines[0], &w));
  ranks.allreduce(0, "lonely");
  const std::string r0 = wait_for_rank_dump(dir, 0, "\"reason\":\"watchdog\"");
  ASSERT_FALSE(r0.empty()) << "no watchdog dump of rank 0 in " << dir;
  EXPECT_TRUE(contains(r0, "\"name\":\"lonely\"")) << r0;
  EXPECT_TRUE(contains(r0, "\"state\":\"issued\"")) << r0;
  EXPECT_TRUE(contains(field(r0, "detail"), "watchdog: no instruction completed for")) << r0;
  const std::string r1 = wait_for_rank_dump(dir, 1, "\"reason\":\"dump_request\"");
  EXPECT_FALSE(r1.empty()) << "rank 1 did not answer the dump request";
  ranks.allreduce(1, "lonely");
  ranks.sync();
}

// A DUMP_REQUEST written by another process (here: the test) makes every rank dump; one left
// by an earlier job (older than the monitor) is not a request.
TEST(CommDump, DumpRequestFileIsHonouredButAStaleOneIsNot) {
  const std::string dir = fresh_dir("dump_request");
  auto request = [&](int64_t time_ns, const std::string& why) {
    std::ofstream(dir + "/DUMP_REQUEST.new")
        << "{\"token\":\"" << why << "\",\"time_unix_ns\":" << time_ns << ",\"pid\":1,\"why\":\"" << why << "\"}\n";
    ASSERT_EQ(std::rename((dir + "/DUMP_REQUEST.new").c_str(), (dir + "/DUMP_REQUEST").c_str()), 0);
  };
  request(1000, "stale request");  // 1970: before any monitor started
  Env e("FLOWLANE_COMM_DUMP_DIR", dir);
  Ranks ranks(2);
  // Wait until the monitor has looked at (and ignored) the stale request: ask for a dump of
  // the state only a fresh request can produce, after a pause of several monitor periods.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const int64_t now_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  request(now_ns, "fresh request");
  for (int r = 0; r < 2; ++r) {
    const std::string text = wait_for_rank_dump(dir, r, "\"reason\":\"dump_request\"");
    ASSERT_FALSE(text.empty()) << "rank " << r << " did not dump";
    // Had the stale request been honoured, its dump would stand (one dump per hang).
    EXPECT_TRUE(contains(field(text, "detail"), "fresh request")) << text;
  }
}

// One dump per hang: a later trigger of the same hang (the abort) leaves the first dump;
// after a collective completed, the next hang is dumped again. (The watchdog triggers the
// dumps: a comm timeout would also fail the collective, ending the hang.)
TEST(CommDump, OneDumpPerHang) {
  const std::string dir = fresh_dir("dump_once");
  Env e("FLOWLANE_COMM_DUMP_DIR", dir);
  Ranks ranks(2);
  fl_watchdog_desc_t w = FL_WATCHDOG_DESC_INIT;
  w.timeout_ms = 100;
  w.path = "/dev/null";
  ASSERT_FL_OK(fl_engine_set_watchdog(ranks.engines[0], &w));
  ranks.allreduce(0, "first");
  std::string r0 = wait_for_rank_dump(dir, 0, "\"reason\":\"watchdog\"");
  ASSERT_FALSE(r0.empty());
  EXPECT_TRUE(contains(r0, "{\"seq\":1,")) << r0;
  // The watchdog asked every rank for its dump: once rank 1 answered, the request is handled
  // (handled later, it would dump rank 0 again, in the next hang).
  ASSERT_FALSE(wait_for_rank_dump(dir, 1, "\"reason\":\"dump_request\"").empty());
  ranks.allreduce(1, "first");  // completes: progress
  ranks.sync();
  ranks.allreduce(0, "second");
  r0 = wait_for_rank_dump(dir, 0, "\"name\":\"second\"");
  ASSERT_FALSE(r0.empty()) << "the second hang was not dumped";
  EXPECT_EQ(field(r0, "reason"), "\"watchdog\"");
  // fl_comm_destroy with seq 2 pending: an abort trigger of the same hang.
  ASSERT_FL_OK(fl_comm_destroy(ranks.comms[0]));
  ranks.comms[0] = nullptr;
  for (const std::string& f : dumps_in(dir)) {
    if (contains(f, "rank0-")) {
      EXPECT_EQ(field(slurp(f), "reason"), "\"watchdog\"") << "the first dump stands";
    }
  }
}

// The comm timeout (fl_comm_set_timeout here) dumps first, then fails the collective with
// FL_ERR_TIMEOUT: the rank leaves the communicator. Its later collectives fail with
// FL_ERR_CANCELLED, and its peer's collective of the same sequence number fails naming it,
// instead of waiting forever. Before this, the timeout only dumped and the collective waited.
TEST(CommDump, TimeoutFailsTheCollectiveAfterItsDump) {
  const std::string dir = fresh_dir("dump_timeout_fails");
  Env e("FLOWLANE_COMM_DUMP_DIR", dir);
  Ranks ranks(2);
  ASSERT_FL_OK(fl_comm_set_timeout(ranks.comms[0], 100));
  EXPECT_FL_ERR(fl_comm_set_timeout(ranks.comms[0], 86'400'001), FL_ERR_OUT_OF_RANGE, "over one day");
  fl_stream_t* s0 = coll_of(ranks.engines[0], 1);
  fl_coll_part_t p = fltest::coll_part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, ranks.buf[0].data(), ranks.buf[0].data(), 4);
  fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
  in.parts = &p;
  in.num_parts = 1;
  in.name = "waits";
  fl_instr_id id = 0;
  ASSERT_FL_OK(fl_submit_collective(s0, ranks.comms[0], &in, &id));
  EXPECT_FL_ERR(fl_instr_wait_for(s0, id, 60'000'000'000ull), FL_ERR_TIMEOUT, "timed out");
  const std::string r0 = wait_for_rank_dump(dir, 0, "\"reason\":\"comm_timeout\"");
  EXPECT_TRUE(contains(r0, "\"state\":\"issued\"")) << "the dump shows the hang, before the failure: " << r0;
  in.name = "after";
  ASSERT_FL_OK(fl_submit_collective(s0, ranks.comms[0], &in, &id));
  EXPECT_FL_ERR(fl_instr_wait_for(s0, id, 60'000'000'000ull), FL_ERR_CANCELLED, "left the communicator");
  fl_stream_t* s1 = coll_of(ranks.engines[1], 1);
  p.sendbuf = p.recvbuf = ranks.buf[1].data();
  in.name = "late";
  ASSERT_FL_OK(fl_submit_collective(s1, ranks.comms[1], &in, &id));
  EXPECT_FL_ERR(fl_instr_wait_for(s1, id, 60'000'000'000ull), FL_ERR_INSTRUCTION_FAILED, "rank 0 left the communicator");
}

// A rank asked for its dump before it reached the collective its peers wait in is dumped
// again when it times out there (it moved), unlike an abort of the same hang.
TEST(CommDump, ARankThatMovedSinceItsDumpIsDumpedAgain) {
  const std::string dir = fresh_dir("dump_moved");
  Env e("FLOWLANE_COMM_DUMP_DIR", dir);
  Env t("FLOWLANE_COMM_TIMEOUT_MS", "100");
  Ranks ranks(3);  // rank 2 never comes
  ranks.allreduce(0, "step");
  ASSERT_FALSE(wait_for_rank_dump(dir, 1, "\"reason\":\"dump_request\"").empty()) << "rank 1 was not asked";
  ranks.allreduce(1, "step");
  const std::string r1 = wait_for_rank_dump(dir, 1, "\"reason\":\"comm_timeout\"");
  ASSERT_FALSE(r1.empty()) << "rank 1's dump still shows it before the collective";
  EXPECT_TRUE(contains(r1, "\"state\":\"issued\"")) << r1;
}

TEST(CommDump, AbortWithCollectivesPendingDumpsAtOnce) {
  const std::string dir = fresh_dir("dump_abort");
  Env e("FLOWLANE_COMM_DUMP_DIR", dir);
  Ranks ranks(2);
  ranks.allreduce(0, "orphan");
  fltest::wait_for_dump(ranks.engines[0], {"queued 1, issued 1"});
  ASSERT_FL_OK(fl_comm_destroy(ranks.comms[0]));  // the dump is written before it returns
  ranks.comms[0] = nullptr;
  std::vector<std::string> files = dumps_in(dir);
  ASSERT_FALSE(files.empty());
  const std::string text = slurp(files[0]);
  EXPECT_EQ(field(text, "reason"), "\"abort\"") << text;
  EXPECT_TRUE(contains(field(text, "detail"), "destroyed communicator")) << text;
  struct stat st;
  EXPECT_EQ(stat((dir + "/DUMP_REQUEST").c_str(), &st), 0) << "the other ranks are asked to dump";
}

namespace {
std::atomic<int> g_user_usr1{0};
}  // namespace

// SIGUSR1 (mpirun forwards it to every rank): every rank dumps, a handler installed before
// is still called, and the program goes on.
TEST(CommDump, SigusrDumpsEveryRankAndCallsThePreviousHandler) {
  struct sigaction user = {};
  user.sa_handler = [](int) { g_user_usr1.fetch_add(1); };
  sigemptyset(&user.sa_mask);
  struct sigaction saved;
  ASSERT_EQ(sigaction(SIGUSR1, &user, &saved), 0);
  const std::string dir = fresh_dir("dump_usr1");
  Env e("FLOWLANE_COMM_DUMP_DIR", dir);
  Env s("FLOWLANE_COMM_DUMP_ON_SIGNAL", "USR1");
  {
    Ranks ranks(2);
    ranks.allreduce(0);
    ranks.allreduce(1);
    ranks.sync();
    ASSERT_EQ(raise(SIGUSR1), 0);
    for (int r = 0; r < 2; ++r) EXPECT_FALSE(wait_for_rank_dump(dir, r, "\"reason\":\"signal\"").empty()) << r;
    EXPECT_EQ(g_user_usr1.load(), 1);
    ranks.allreduce(0);  // still working
    ranks.allreduce(1);
    ranks.sync();
  }
  sigaction(SIGUSR1, &saved, nullptr);  // this process's handler stays ours otherwise: put the old one back
}

// Dumps taken while collectives run (two ranks, each submitting from its own thread; two
// threads dumping into files): every file is whole, the collectives unharmed. Under
// ThreadSanitizer this is the recorder's protocol under load (comm/recorder.hpp).
TEST(CommDump, DumpsWhileCollectivesRunAreWholeAndNeverBlockThem) {
  const int kCollectives = int(fl_scaled(2000, 300));
  Ranks ranks(2);
  const std::string dir = fresh_dir("dump_concurrent");
  std::atomic<bool> done{false};
  std::atomic<int> written{0};
  std::vector<std::thread> dumpers;
  for (int d = 0; d < 2; ++d)
    dumpers.emplace_back([&, d] {
      const std::string path = dir + "/d" + std::to_string(d) + ".json";
      while (!done.load()) {
        EXPECT_FL_OK(fl_comm_dump(ranks.comms[size_t(d)], path.c_str()));
        const std::string text = slurp(path);
        EXPECT_EQ(text.rfind("{\"schema\":", 0), 0u);
        EXPECT_EQ(text.substr(text.size() - 2), "}\n");
        written.fetch_add(1);
      }
    });
  std::vector<std::thread> submitters;
  for (int r = 0; r < 2; ++r)
    submitters.emplace_back([&, r] {
      for (int s = 0; s < kCollectives; ++s) ranks.allreduce(r);
    });
  for (auto& t : submitters) t.join();
  ranks.sync();
  done = true;
  for (auto& t : dumpers) t.join();
  EXPECT_GT(written.load(), 0);
  ASSERT_FL_OK(fl_comm_dump(ranks.comms[0], (dir + "/final.json").c_str()));
  EXPECT_EQ(field(slurp(dir + "/final.json"), "succeeded"), std::to_string(kCollectives));
}

// Names are cut before a whole UTF-8 character and escaped: the file stays valid JSON.
TEST(CommDump, NamesAreEscapedAndCutBetweenCharacters) {
  Ranks ranks(1);
  const std::string name = "q\"b\\n\nt" + std::string(39, 'a') + "\xc3\xa9";  // 46 bytes, then a 2-byte 'é' at 47
  ranks.allreduce(0, name.c_str());
  ranks.sync();
  const std::string path = fresh_dir("dump_names") + "/r0.json";
  ASSERT_FL_OK(fl_comm_dump(ranks.comms[0], path.c_str()));
  const std::string text = slurp(path);
  EXPECT_TRUE(contains(text, "\"name\":\"q\\\"b\\\\n\\nt" + std::string(39, 'a') + "\",")) << text;
}
