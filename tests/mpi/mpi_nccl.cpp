// fl_mpi_nccl_comm_create under mpirun, on the fake NCCL in cross-process mode and the fake
// CUDA runtime (tests/gpu/fake; no GPU needed): rank 0's unique id travels over MPI, each
// process is one rank of the NCCL communicator (ctest: mpi.nccl.*).
//
//   flowlane_mpi_nccl MODE
//
//   ops    twice (desc nranks 0: taken from MPI; then given): every op and several dtypes,
//          checked (tests/gpu/fake/fake_nccl_ops.hpp)
//   desc   the last rank's desc names another rank: every rank is refused with
//          FL_ERR_INVALID_ARGUMENT, the last saying why, the others naming it
//   lane   the last rank's lane does not exist on its engine: every rank is refused at once
//          (before, the others waited in NCCL's init until FLOWLANE_NCCL_INIT_TIMEOUT_MS)
//   device the last rank's device does not exist: likewise (FL_ERR_NO_DEVICE on that rank)
//   engine the last rank passes a NULL engine: likewise (FL_ERR_INVALID_HANDLE on that rank)
//   noid   rank 0 cannot load NCCL (FLOWLANE_NCCL_PATH names no file): every rank gets rank
//          0's status and reason
//
// Rank 0 makes the fake's shared folder (FAKE_NCCL_SHARED_DIR; the id carries it to the
// others) and removes it at the end. Exit status 0 when every check passed on this rank.
#include <mpi.h>
#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "fake_nccl_ops.hpp"
#include "flowlane/flowlane_mpi.h"

extern "C" long fake_nccl_counter(const char* name);  // (also links the fakes in: libflowlane finds them)

using namespace fake_procs;

namespace {
MPI_Comm g_world = MPI_COMM_WORLD;  // (Open MPI's MPI_COMM_WORLD is not an lvalue)
}

namespace {

// The same status on every rank.
void check_same_everywhere(fl_status_t st, const std::string& what) {
  int mine[2] = {int(st), -int(st)}, all[2] = {0, 0};
  MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  check(all[0] == -all[1], what + ": the ranks got different statuses");
}

void ops(int r, int n) {
  fl_engine_t* e = make_engine();
  for (uint64_t given : {0, 1}) {
    fl_comm_desc_t d = given ? nccl_desc(uint64_t(n), uint64_t(r)) : nccl_desc(0, 0);
    fl_comm_t* c = nullptr;
    check_ok(fl_mpi_nccl_comm_create(e, &d, &g_world, &c), given ? "create (desc given)" : "create (nranks 0)");
    if (c == nullptr) break;
    run_ops(e, c, r, n);
    check_ok(fl_comm_destroy(c), "fl_comm_destroy");
  }
  fl_engine_destroy(e);
  check(fake_nccl_counter("mismatches") == 0, "the fake NCCL counted a mismatch");
}

void desc_mismatch(int r, int n) {
  fl_engine_t* e = make_engine();
  const int last = n - 1;
  fl_comm_desc_t d = nccl_desc(uint64_t(n), uint64_t(r == last ? (r + 1) % n : r));
  fl_comm_t* c = nullptr;
  const fl_status_t st = fl_mpi_nccl_comm_create(e, &d, &g_world, &c);
  if (n == 1) {
    check_ok(st, "rank 0 of 1 named as itself");  // (r + 1) % 1 == 0: no mismatch with one rank
  } else if (r == last) {
    check_err(st, FL_ERR_INVALID_ARGUMENT, "desc says rank " + std::to_string((r + 1) % n) + " of " + std::to_string(n) +
              ", but this process is rank " + std::to_string(r), "the mismatched rank");
  } else {
    check_err(st, FL_ERR_INVALID_ARGUMENT, "rank " + std::to_string(last) + " could not create its communicator",
              "a rank whose peer is mismatched");
  }
  check((st == FL_OK) == (c != nullptr), "*out_comm is set exactly when it succeeds");
  if (c != nullptr) fl_comm_destroy(c);
  check_same_everywhere(st, "a desc mismatch");
  fl_engine_destroy(e);
}

// The last rank's `what` (lane, device, engine) is bad: every rank is refused at once.
void bad_place(int r, int n, const std::string& what) {
  fl_engine_t* e = make_engine();
  const int last = n - 1;
  fl_comm_desc_t d = nccl_desc(0, 0, r == last && what == "lane" ? 1000 : 1);
  if (r == last && what == "device") d.device = 5;  // the fake runtime has one device
  fl_comm_t* c = nullptr;
  const fl_status_t st = fl_mpi_nccl_comm_create(r == last && what == "engine" ? nullptr : e, &d, &g_world, &c);
  if (r == last && what == "lane")
    check_err(st, FL_ERR_OUT_OF_RANGE, "lane 1000 is out of range", "the rank with a bad lane");
  else if (r == last && what == "device")
    check_err(st, FL_ERR_NO_DEVICE, "CUDA device 5 does not exist", "the rank with a bad device");
  else if (r == last)
    check_err(st, FL_ERR_INVALID_HANDLE, "engine is NULL", "the rank with a NULL engine");
  else
    check_err(st, FL_ERR_INVALID_ARGUMENT, "rank " + std::to_string(last) + " could not create its communicator",
              "a rank whose peer has a bad " + what);
  check(c == nullptr, "no communicator");
  fl_engine_destroy(e);
}

void no_id(int r) {
  if (r == 0) setenv("FLOWLANE_NCCL_PATH", "/nonexistent/flowlane/libnccl.so", 1);  // before NCCL is first loaded
  fl_engine_t* e = make_engine();
  fl_comm_desc_t d = nccl_desc(0, 0);
  fl_comm_t* c = nullptr;
  const fl_status_t st = fl_mpi_nccl_comm_create(e, &d, &g_world, &c);
  check(st != FL_OK && c == nullptr, "no NCCL on rank 0 fails every rank");
  check_err(st, st, "rank 0 could not make the NCCL unique id", "rank 0 without NCCL");
  check_err(st, st, "/nonexistent/flowlane/libnccl.so", "rank 0's reason");
  check_same_everywhere(st, "rank 0 without NCCL");
  fl_engine_destroy(e);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int r = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  my_rank() = r;
  const std::string mode = argc > 1 ? argv[1] : "";
  std::string shared;
  if (r == 0) {
    char tmpl[] = "/tmp/flowlane-mpi-nccl-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      std::perror("mkdtemp");
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    shared = tmpl;
    setenv("FAKE_NCCL_SHARED_DIR", shared.c_str(), 1);
  }
  if (mode == "ops") {
    ops(r, n);
  } else if (mode == "desc") {
    desc_mismatch(r, n);
  } else if (mode == "lane" || mode == "device" || mode == "engine") {
    bad_place(r, n, mode);
  } else if (mode == "noid") {
    no_id(r);
  } else {
    std::fprintf(stderr, "usage: %s ops|desc|lane|device|engine|noid\n", argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (r == 0) std::filesystem::remove_all(shared);
  if (failures() == 0) std::printf("rank %d of %d: %s ok\n", r, n, mode.c_str());
  MPI_Finalize();
  return failures() == 0 ? 0 : 1;
}
