// Diagnostics turned on without code: FLOWLANE_WATCHDOG_MS at engine creation (the header,
// fl_engine_create), and the bound on the descriptor's watchdog_ms. The watchdog's stderr
// sink is read back by sending this process's stderr to a file for the test's duration
// (ctest runs each test in its own process). No timing assertions: the wait for a dump is
// bounded generously (30 s).
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "test_diag_util.hpp"

using namespace fldiag;

namespace {

// Sends file descriptor 2 to a fresh file while it lives; text() reads what was written.
class StderrToFile {
 public:
  StderrToFile() : path_(fltest::unique_temp_path("flowlane_stderr.txt")) {
    std::fflush(stderr);
    saved_ = ::dup(2);
    int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    EXPECT_GE(fd, 0);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~StderrToFile() {
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    std::remove(path_.c_str());
  }
  StderrToFile(const StderrToFile&) = delete;
  StderrToFile& operator=(const StderrToFile&) = delete;

  std::string text() const {
    std::fflush(stderr);
    std::ifstream f(path_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  // Waits (30 s at most) until the text contains `needle`.
  bool wait_for(const std::string& needle) const {
    for (int k = 0; k < 3000; ++k) {
      if (contains(text(), needle)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

 private:
  std::string path_;
  int saved_ = -1;
};

// fl_engine_create with FLOWLANE_WATCHDOG_MS set to `value` (and unset again at once).
fl_engine_t* create_with_env(const char* value, uint64_t watchdog_ms = 0) {
  ::setenv("FLOWLANE_WATCHDOG_MS", value, 1);
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = 2;
  d.watchdog_ms = watchdog_ms;
  fl_engine_t* e = nullptr;
  fl_status_t st = fl_engine_create(&d, &e);
  ::unsetenv("FLOWLANE_WATCHDOG_MS");
  EXPECT_EQ(st, FL_OK) << fl_last_error_message();
  return e;
}

}  // namespace

// An engine created with watchdog_ms 0 under FLOWLANE_WATCHDOG_MS has its watchdog on, with
// the stderr sink: a stall is dumped there, naming the stuck instruction.
TEST(WatchdogEnvironment, FlowlaneWatchdogMsTurnsTheWatchdogOnWithoutCode) {
  StderrToFile err;
  fl_engine_t* e = create_with_env("100");
  ASSERT_NE(e, nullptr);
  Gate gate;
  submit(host_of(e, 1), [&](fl_instr_ctx_t*) { return gate.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {}, "env.stall");
  EXPECT_TRUE(err.wait_for("'env.stall'")) << "no watchdog dump on stderr:\n" << err.text();
  EXPECT_TRUE(contains(err.text(), "timeout 100 ms")) << err.text();
  gate.open = true;
  ASSERT_FL_OK(fl_engine_synchronize(e));
  ASSERT_FL_OK(fl_engine_destroy(e));
}

// The descriptor's own watchdog_ms is used when set: the environment's timeout does not
// replace it (the dump states the timeout it fired with).
TEST(WatchdogEnvironment, TheDescriptorsWatchdogMsWinsOverTheEnvironment) {
  StderrToFile err;
  fl_engine_t* e = create_with_env("60000", /*watchdog_ms=*/100);
  ASSERT_NE(e, nullptr);
  Gate gate;
  submit(host_of(e, 1), [&](fl_instr_ctx_t*) { return gate.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {}, "desc.stall");
  EXPECT_TRUE(err.wait_for("'desc.stall'")) << err.text();
  EXPECT_TRUE(contains(err.text(), "timeout 100 ms")) << err.text();
  gate.open = true;
  ASSERT_FL_OK(fl_engine_synchronize(e));
  ASSERT_FL_OK(fl_engine_destroy(e));
}

// A value that is not a count of milliseconds up to one day is ignored with a line on
// stderr that names it; the engine is created and works.
TEST(WatchdogEnvironment, ABadValueIsIgnoredWithAMessage) {
  for (const char* bad : {"abc", "-5", "10ms", " 10", "86400001", "99999999999999999999999"}) {
    StderrToFile err;
    fl_engine_t* e = create_with_env(bad);
    ASSERT_NE(e, nullptr) << bad;
    EXPECT_TRUE(contains(err.text(), std::string("FLOWLANE_WATCHDOG_MS ignored: '") + bad + "'")) << err.text();
    submit(host_of(e, 0), [](fl_instr_ctx_t*) { return FL_OK; });
    ASSERT_FL_OK(fl_engine_synchronize(e));
    ASSERT_FL_OK(fl_engine_destroy(e));
  }
  // The largest timeout and 0 (off) are accepted silently.
  for (const char* good : {"86400000", "0"}) {
    StderrToFile err;
    fl_engine_t* e = create_with_env(good);
    ASSERT_NE(e, nullptr) << good;
    EXPECT_FALSE(contains(err.text(), "FLOWLANE_WATCHDOG_MS")) << err.text();
    ASSERT_FL_OK(fl_engine_destroy(e));
  }
}

// The descriptor's watchdog_ms has the bound of fl_engine_set_watchdog's timeout_ms.
TEST(WatchdogEnvironment, ADescriptorWatchdogOverOneDayIsOutOfRange) {
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.watchdog_ms = 86'400'001;
  fl_engine_t* e = nullptr;
  EXPECT_FL_ERR(fl_engine_create(&d, &e), FL_ERR_OUT_OF_RANGE, "watchdog_ms 86400001 exceeds one day");
  EXPECT_EQ(e, nullptr);
  d.watchdog_ms = 86'400'000;
  ASSERT_FL_OK(fl_engine_create(&d, &e));
  ASSERT_FL_OK(fl_engine_destroy(e));
}
