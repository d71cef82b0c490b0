// Ranks from the launcher's environment (fl_comm_get_env) and the file rendezvous
// (fl_comm_rendezvous_file): each launcher's variables, bad values named, ranks meeting
// from real processes (fork), a rank that never comes, an earlier job's file.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "test_util.hpp"

namespace {

// Sets (or, with nullptr, unsets) variables for the scope.
struct EnvVars {
  std::vector<std::pair<std::string, std::string>> saved;
  std::vector<std::string> unset_after;
  explicit EnvVars(std::initializer_list<std::pair<const char*, const char*>> vars) {
    // Every launcher variable is cleared first: the test may itself run under a launcher.
    for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                          "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK",
                          "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "SLURM_PROCID", "SLURM_NTASKS",
                          "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"})
      set(v, nullptr);
    for (auto& [k, v] : vars) set(k, v);
  }
  void set(const char* k, const char* v) {
    if (const char* old = std::getenv(k))
      saved.emplace_back(k, old);
    else
      unset_after.push_back(k);
    if (v != nullptr)
      setenv(k, v, 1);
    else
      unsetenv(k);
  }
  ~EnvVars() {
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) setenv(it->first.c_str(), it->second.c_str(), 1);
    for (const std::string& k : unset_after) unsetenv(k.c_str());
  }
};

fl_comm_env_t get_env() {
  fl_comm_env_t e = FL_COMM_ENV_INIT;
  EXPECT_FL_OK(fl_comm_get_env(&e));
  return e;
}

std::string fresh_dir(const std::string& name) {
  const std::string d = fltest::unique_temp_path(name);
  std::system(("rm -rf '" + d + "'").c_str());
  mkdir(d.c_str(), 0755);
  return d;
}

fl_comm_unique_id_t id_of(char c) {
  fl_comm_unique_id_t id;
  std::memset(id.internal, c, sizeof id.internal);
  return id;
}

}  // namespace

TEST(CommEnv, EachLaunchersVariables) {
  {
    EnvVars v({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
               {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
    fl_comm_env_t e = get_env();
    EXPECT_STREQ(e.launcher, "torchrun") << "torchrun's children may run under mpirun: its variables win";
    EXPECT_EQ(e.rank, 3u);
    EXPECT_EQ(e.size, 8u);
    EXPECT_EQ(e.local_rank, 1u);
    EXPECT_EQ(e.local_size, 2u);
  }
  {
    EnvVars v({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
               {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"},
               {"RANK", "7"}});  // RANK alone (no LOCAL_RANK) is not torchrun
    fl_comm_env_t e = get_env();
    EXPECT_STREQ(e.launcher, "ompi");
    EXPECT_EQ(e.rank, 2u);
    EXPECT_EQ(e.size, 4u);
    EXPECT_EQ(e.local_size, 2u);
  }
  {
    EnvVars v({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS_PER_NODE", "3(x2)"}});
    fl_comm_env_t e = get_env();
    EXPECT_STREQ(e.launcher, "slurm");
    EXPECT_EQ(e.rank, 5u);
    EXPECT_EQ(e.local_rank, 1u);
    EXPECT_EQ(e.local_size, 3u);
  }
  {
    EnvVars v({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}});
    fl_comm_env_t e = get_env();
    EXPECT_STREQ(e.launcher, "pmi");
    EXPECT_EQ(e.local_rank, 0u) << "not given: 0";
    EXPECT_EQ(e.local_size, 1u) << "not given: 1";
  }
}

TEST(CommEnv, BadValuesAndNoLauncherAreNamed) {
  fl_comm_env_t e = FL_COMM_ENV_INIT;
  {
    EnvVars v({});
    EXPECT_FL_ERR(fl_comm_get_env(&e), FL_ERR_INVALID_ARGUMENT, "no launcher's variables are set");
  }
  {
    EnvVars v({{"OMPI_COMM_WORLD_RANK", "x1"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
    EXPECT_FL_ERR(fl_comm_get_env(&e), FL_ERR_INVALID_ARGUMENT, "OMPI_COMM_WORLD_RANK='x1'");
  }
  {
    EnvVars v({{"PMI_RANK", "4"}, {"PMI_SIZE", "4"}});
    EXPECT_FL_ERR(fl_comm_get_env(&e), FL_ERR_INVALID_ARGUMENT, "PMI_RANK=4 is not a rank of PMI_SIZE=4");
  }
  EXPECT_FL_ERR(fl_comm_get_env(nullptr), FL_ERR_INVALID_ARGUMENT, "fl_comm_get_env");
  e.struct_size = 4;
  EXPECT_FL_ERR(fl_comm_get_env(&e), FL_ERR_INVALID_ARGUMENT, "struct_size");
}

// Four processes meet: every rank ends with rank 0's id, and the files are gone.
TEST(CommEnv, RendezvousOfForkedProcesses) {
  const std::string dir = fresh_dir("rdv_fork");
  const fl_comm_unique_id_t made = id_of('x');
  std::vector<pid_t> kids;
  for (int r = 1; r < 4; ++r) {
    pid_t p = fork();
    if (p == 0) {
      fl_comm_unique_id_t got = id_of(0);
      const fl_status_t st = fl_comm_rendezvous_file(dir.c_str(), "job1", uint64_t(r), 4, 30'000, &got);
      _exit(st == FL_OK && std::memcmp(got.internal, made.internal, 128) == 0 ? 0 : 1);
    }
    kids.push_back(p);
  }
  fl_comm_unique_id_t mine = made;
  ASSERT_FL_OK(fl_comm_rendezvous_file(dir.c_str(), "job1", 0, 4, 30'000, &mine));
  for (pid_t p : kids) {
    int status = 0;
    ASSERT_EQ(waitpid(p, &status, 0), p);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a rank did not read rank 0's id";
  }
  struct stat st;
  EXPECT_NE(stat((dir + "/job1.id").c_str(), &st), 0) << "rank 0 removes the files";
  EXPECT_NE(stat((dir + "/job1.ack2").c_str(), &st), 0);
}

TEST(CommEnv, RendezvousTimeoutsNameWhoDidNotCome) {
  const std::string dir = fresh_dir("rdv_timeout");
  fl_comm_unique_id_t id = id_of('a');
  EXPECT_FL_ERR(fl_comm_rendezvous_file(dir.c_str(), "k", 0, 3, 100, &id), FL_ERR_TIMEOUT, "did not read");
  EXPECT_NE(std::string(fl_last_error_message()).find(": 1, 2"), std::string::npos) << fl_last_error_message();
  EXPECT_FL_ERR(fl_comm_rendezvous_file(dir.c_str(), "k", 1, 3, 100, &id), FL_ERR_TIMEOUT, "waited 100 ms for rank 0");
}

// A file an earlier job left (older than the timeout) is not read; one of another size is
// refused; bad arguments are named.
TEST(CommEnv, RendezvousRefusesStaleFilesAndBadArguments) {
  const std::string dir = fresh_dir("rdv_stale");
  {
    std::ofstream f(dir + "/old.id");
    f << std::string(160, 'z');
  }
  std::system(("touch -d '1 hour ago' '" + dir + "/old.id'").c_str());
  fl_comm_unique_id_t id = id_of('a');
  EXPECT_FL_ERR(fl_comm_rendezvous_file(dir.c_str(), "old", 1, 2, 200, &id), FL_ERR_TIMEOUT, "waited 200 ms");
  {
    std::ofstream f(dir + "/bad.id");
    f << std::string(160, 'z');
  }
  EXPECT_FL_ERR(fl_comm_rendezvous_file(dir.c_str(), "bad", 1, 2, 200, &id), FL_ERR_INVALID_ARGUMENT,
                "not a rendezvous file");
  EXPECT_FL_ERR(fl_comm_rendezvous_file(dir.c_str(), "a/b", 0, 2, 200, &id), FL_ERR_INVALID_ARGUMENT, "contains '/'");
  EXPECT_FL_ERR(fl_comm_rendezvous_file(dir.c_str(), "k", 2, 2, 200, &id), FL_ERR_INVALID_ARGUMENT, "rank 2");
  EXPECT_FL_ERR(fl_comm_rendezvous_file(nullptr, "k", 0, 2, 200, &id), FL_ERR_INVALID_ARGUMENT, "dir");
  EXPECT_FL_ERR(fl_comm_rendezvous_file("/nonexistent/flowlane", "k", 0, 2, 200, &id), FL_ERR_INVALID_ARGUMENT,
                "cannot write");
  EXPECT_FL_ERR(fl_comm_rendezvous_file(dir.c_str(), "k", 0, 2, 200, nullptr), FL_ERR_INVALID_ARGUMENT, "inout_id");
}
