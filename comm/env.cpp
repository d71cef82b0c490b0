// Ranks from the launcher's environment (fl_comm_get_env) and a unique id shared through files
// (fl_comm_rendezvous_file): how processes started without MPI (torchrun, srun, a shell
// loop) find their rank and meet, for NCCL across processes (comm/README.md, "Across
// processes").
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "comm/comm.hpp"

namespace flowlane::comm {

namespace {

struct Known {
  const char* name;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
  bool needs_local;  // the launcher always sets local_rank (torchrun): required to recognize it
};
// First match wins: torchrun's children run under srun or mpirun too, and MPICH's Hydra
// under Slurm (its PMI rank is the process's, SLURM_PROCID the node's task).
constexpr Known kKnown[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", true},
    {"ompi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", false},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", false},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", false},
};

bool is_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != 0;
}

// The variable's leading whole number ("2(x3)", Slurm's per-node counts, reads 2); `fallback`
// when unset. Anything else is FL_ERR_INVALID_ARGUMENT naming it.
uint64_t number(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == 0) return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(v, &end, 10);
  if (*v == '-' || end == v || errno != 0 || (*end != 0 && *end != '('))
    fail(FL_ERR_INVALID_ARGUMENT, std::string("fl_comm_get_env: ") + name + "='" + v + "' is not a whole number");
  return x;
}

}  // namespace

bool detect_launcher(LauncherInfo* out) {
  for (const Known& k : kKnown) {
    if (!is_set(k.rank) || !is_set(k.size) || (k.needs_local && !is_set(k.local_rank))) continue;
    const uint64_t rank = number(k.rank, 0), size = number(k.size, 0);
    const uint64_t local_rank = number(k.local_rank, 0), local_size = number(k.local_size, 1);
    if (size == 0 || rank >= size)
      fail(FL_ERR_INVALID_ARGUMENT, std::string("fl_comm_get_env: ") + k.rank + "=" + std::to_string(rank) + " is not a rank of " +
                                        k.size + "=" + std::to_string(size));
    if (local_size == 0 || local_rank >= local_size)
      fail(FL_ERR_INVALID_ARGUMENT, std::string("fl_comm_get_env: ") + k.local_rank + "=" + std::to_string(local_rank) +
                                        " is not a rank of " + k.local_size + "=" + std::to_string(local_size));
    *out = LauncherInfo{k.name, rank, size, local_rank, local_size};
    return true;
  }
  return false;
}

void launcher_env(fl_comm_env_t* out) {
  LauncherInfo l;
  if (!detect_launcher(&l))
    fail(FL_ERR_INVALID_ARGUMENT,
         "fl_comm_get_env: no launcher's variables are set (torchrun: RANK, WORLD_SIZE, LOCAL_RANK; Open MPI: "
         "OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE; PMI: PMI_RANK, PMI_SIZE; Slurm: SLURM_PROCID, SLURM_NTASKS): "
         "start the processes with a launcher, or pass the rank yourself");
  out->rank = l.rank;
  out->size = l.size;
  out->local_rank = l.local_rank;
  out->local_size = l.local_size;
  std::memset(out->launcher, 0, sizeof out->launcher);
  std::strncpy(out->launcher, l.name, sizeof out->launcher - 1);
}

// ---- the file rendezvous ---------------------------------------------------------------------

namespace {

using Clock = std::chrono::steady_clock;
constexpr char kMagic[16] = "flowlane-rdv1";

struct IdFile {
  char magic[16];
  uint64_t nranks;
  char id[128];
};

std::string errno_text() { return std::strerror(errno); }

// Sleeps a little longer each time (1 ms to 50 ms) until `deadline`; false once past it.
bool pause_until(Clock::time_point deadline, int& n) {
  if (Clock::now() >= deadline) return false;
  std::this_thread::sleep_for(std::chrono::milliseconds(std::min(50, 1 << std::min(n++, 6))));
  return true;
}

void write_id(const std::string& dir, const std::string& key, uint64_t nranks, const fl_comm_unique_id_t& id) {
  const std::string path = dir + "/" + key + ".id";
  const std::string tmp = dir + "/." + key + ".id.tmp-" + std::to_string(getpid());
  IdFile f{};
  std::memcpy(f.magic, kMagic, sizeof kMagic);
  f.nranks = nranks;
  std::memcpy(f.id, id.internal, sizeof f.id);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(FL_ERR_INVALID_ARGUMENT, "fl_comm_rendezvous_file: cannot write " + tmp + ": " + errno_text());
  const bool whole = ::write(fd, &f, sizeof f) == ssize_t(sizeof f);
  const std::string why = errno_text();
  ::close(fd);
  if (!whole || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    fail(FL_ERR_INVALID_ARGUMENT, "fl_comm_rendezvous_file: cannot write " + path + ": " + why);
  }
}

// Reads <dir>/<key>.id if it is there and younger than `max_age` (older ones are an earlier
// job's: rank 0 waits for no longer than that).
bool read_id(const std::string& path, uint64_t nranks, std::chrono::milliseconds max_age, fl_comm_unique_id_t* out) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return false;
  const auto mtime = std::chrono::system_clock::time_point(std::chrono::seconds(st.st_mtim.tv_sec) +
                                                           std::chrono::nanoseconds(st.st_mtim.tv_nsec));
  if (std::chrono::system_clock::now() - mtime > max_age) return false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;  // replaced meanwhile: look again
  IdFile f{};
  const bool whole = ::read(fd, &f, sizeof f) == ssize_t(sizeof f);
  ::close(fd);
  if (!whole || std::memcmp(f.magic, kMagic, sizeof kMagic) != 0)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_comm_rendezvous_file: " + path + " is not a rendezvous file of flowlane");
  if (f.nranks != nranks)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_comm_rendezvous_file: " + path + " was written by a rank 0 of " +
                                      std::to_string(f.nranks) + " ranks, not " + std::to_string(nranks) +
                                      " (another job with the same key?)");
  std::memcpy(out->internal, f.id, sizeof f.id);
  return true;
}

}  // namespace

void rendezvous_file(const char* dir_c, const char* key_c, uint64_t rank, uint64_t nranks, uint64_t timeout_ms,
                     fl_comm_unique_id_t* inout) {
  const std::string fn = "fl_comm_rendezvous_file: ";
  if (dir_c == nullptr || *dir_c == 0) fail(FL_ERR_INVALID_ARGUMENT, fn + "dir is NULL or empty");
  if (key_c == nullptr || *key_c == 0) fail(FL_ERR_INVALID_ARGUMENT, fn + "key is NULL or empty");
  const std::string dir = dir_c, key = key_c;
  if (key.find('/') != std::string::npos) fail(FL_ERR_INVALID_ARGUMENT, fn + "key '" + key + "' contains '/'");
  if (nranks == 0 || rank >= nranks)
    fail(FL_ERR_INVALID_ARGUMENT, fn + "rank " + std::to_string(rank) + " is not a rank of " + std::to_string(nranks));
  const auto timeout = std::chrono::milliseconds(timeout_ms);
  const auto deadline = Clock::now() + timeout;
  const std::string id_path = dir + "/" + key + ".id";
  auto ack_path = [&](uint64_t r) { return dir + "/" + key + ".ack" + std::to_string(r); };
  int n = 0;
  if (rank != 0) {
    while (!read_id(id_path, nranks, timeout, inout))
      if (!pause_until(deadline, n))
        fail(FL_ERR_TIMEOUT, fn + "rank " + std::to_string(rank) + " waited " + std::to_string(timeout_ms) +
                                 " ms for rank 0's " + id_path + ": is rank 0 running, with the same folder and key?");
    const int fd = ::open(ack_path(rank).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) fail(FL_ERR_INVALID_ARGUMENT, fn + "cannot write " + ack_path(rank) + ": " + errno_text());
    ::close(fd);
    return;
  }
  ::unlink(id_path.c_str());  // an earlier job's
  for (uint64_t r = 1; r < nranks; ++r) ::unlink(ack_path(r).c_str());
  write_id(dir, key, nranks, *inout);
  std::string missing;
  for (;;) {
    missing.clear();
    uint64_t count = 0;
    for (uint64_t r = 1; r < nranks; ++r) {
      if (::access(ack_path(r).c_str(), F_OK) == 0) continue;
      if (++count <= 16) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    if (count == 0) break;
    if (!pause_until(deadline, n)) {
      ::unlink(id_path.c_str());  // no later job may read it
      fail(FL_ERR_TIMEOUT, fn + std::to_string(count) + " rank(s) did not read " + id_path + " within " +
                               std::to_string(timeout_ms) + " ms: " + missing + (count > 16 ? ", ..." : ""));
    }
  }
  ::unlink(id_path.c_str());
  for (uint64_t r = 1; r < nranks; ++r) ::unlink(ack_path(r).c_str());
}

}  // namespace flowlane::comm
