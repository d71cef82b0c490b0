// Hangs across processes for the communicator dumps and flowlane-comm-analyze (issue 32's
// scenarios, now with one process per rank under mpirun): `flowlane_mpi_scenarios hang KIND`,
// run by tests/mpi/run_mpi_hang.py, which collects the dumps of FLOWLANE_COMM_DUMP_DIR and
// compares the analyzer's report with tests/mpi/expected/KIND.txt.
//
//   mismatch  the last rank all-reduces 5 elements at seq 3, the others 4: every rank's
//             collective fails (the check), then every rank dumps on demand
//   stuck     the last rank's seq 3 reads what its host callback 'backward' (lane 0) has not
//             finished: the others time out (FLOWLANE_COMM_TIMEOUT_MS), dump, and ask it for
//             its dump (DUMP_REQUEST); once every dump is there, 'backward' returns and the
//             late collective pairs with its peers' requests, still outstanding
//   dead      rank 1 dies (SIGKILL) after seq 2; the others wait in seq 3 until mpirun
//             ends the job with SIGTERM, on which they dump (FLOWLANE_COMM_DUMP_ON_SIGNAL)
//   crossed   two communicators on one lane, submitted in opposite orders by even and odd
//             ranks: they complete (nothing holds the lane); every rank dumps on demand
#include <mpi.h>
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "flowlane/flowlane.h"
#include "flowlane/flowlane_mpi.h"

namespace {

using Clock = std::chrono::steady_clock;

int rank_of() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int size_of() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "rank %d: hang scenario failed: %s (%s)\n", rank_of(), what.c_str(), fl_last_error_message());
  std::exit(3);
}
void ok(fl_status_t st, const char* what) {
  if (st != FL_OK) die(std::string(what) + " returned " + fl_status_name(st));
}

struct Job {
  fl_engine_t* engine = nullptr;
  std::vector<fl_comm_t*> comms;
  fl_stream_t* coll = nullptr;
  std::vector<std::vector<float>> bufs;
  explicit Job(int ncomms) {
    fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
    d.num_workers = 2;
    d.max_lanes = 4;
    ok(fl_engine_create(&d, &engine), "fl_engine_create");
    for (int c = 0; c < ncomms; ++c) {
      fl_comm_desc_t cd = FL_COMM_DESC_INIT;
      cd.lane = 1;
      fl_comm_t* comm = nullptr;
      MPI_Comm world = MPI_COMM_WORLD;
      ok(fl_mpi_comm_create(engine, &cd, &world, &comm), "fl_mpi_comm_create");
      comms.push_back(comm);
    }
    ok(fl_stream_get(engine, 1, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_COLLECTIVE, &coll), "fl_stream_get");
    bufs.reserve(64);
  }
  fl_instr_id submit(int comm, fl_coll_op_t op, uint64_t count, const char* name, const fl_operand_t* operand = nullptr) {
    bufs.emplace_back(64 * 8, 1.0f);
    fl_coll_part_t p{};
    p.op = op;
    p.dtype = FL_DTYPE_FLOAT32;
    p.sendbuf = bufs.back().data();
    p.recvbuf = op == FL_COLL_ALL_GATHER ? bufs.back().data() + 64 * 4 : bufs.back().data();
    p.count = count;
    fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
    in.parts = &p;
    in.num_parts = 1;
    in.operands = operand;
    in.num_operands = operand != nullptr ? 1 : 0;
    in.name = name;
    fl_instr_id id = 0;
    ok(fl_submit_collective(coll, comms[size_t(comm)], &in, &id), "fl_submit_collective");
    return id;
  }
  // Waits for everything, whatever failed (each wait returns one failure).
  void drain() {
    for (int n = 0; fl_engine_synchronize_for(engine, 60'000'000'000ull) != FL_OK; ++n)
      if (n > 64) die("the work did not finish");
  }
  void dump() { ok(fl_comm_dump(comms[0], nullptr), "fl_comm_dump"); }
  ~Job() { fl_engine_destroy(engine); }
};

size_t count_dumps(const std::string& dir) {
  size_t n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* e = readdir(d)) {
      const std::string s = e->d_name;
      n += s.rfind("flowlane-comm-rank", 0) == 0 && s.size() > 5 && s.compare(s.size() - 5, 5, ".json") == 0;
    }
    closedir(d);
  }
  return n;
}

std::string dump_dir() {
  const char* d = std::getenv("FLOWLANE_COMM_DUMP_DIR");
  if (d == nullptr) die("FLOWLANE_COMM_DUMP_DIR is not set");
  return d;
}

// 'backward' of `stuck`: returns once every rank's dump is in the folder (bounded).
fl_status_t backward(fl_instr_ctx_t*, void*) {
  const std::string dir = dump_dir();
  const size_t want = size_t(size_of());
  const auto until = Clock::now() + std::chrono::seconds(30);
  while (count_dumps(dir) < want && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the last file renamed into place, its writer done
  return FL_OK;
}

}  // namespace

void hang(const std::string& kind) {
  const int r = rank_of(), n = size_of();
  if (kind == "mismatch") {
    Job j(1);
    for (int s = 0; s < 2; ++s) j.submit(0, FL_COLL_ALL_REDUCE, 4, "grad.allreduce");
    j.submit(0, FL_COLL_ALL_REDUCE, r == n - 1 ? 5 : 4, "grad.allreduce");
    j.drain();
    j.dump();
    MPI_Barrier(MPI_COMM_WORLD);
  } else if (kind == "stuck") {
    Job j(1);
    for (int s = 0; s < 2; ++s) j.submit(0, FL_COLL_ALL_REDUCE, 4, "grad.allreduce");
    j.drain();
    if (r == n - 1) {
      fl_object_t* grad = nullptr;
      ok(fl_object_create(j.engine, nullptr, nullptr, &grad), "fl_object_create");
      fl_stream_t* host0 = nullptr;
      ok(fl_stream_get(j.engine, 0, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST, &host0), "fl_stream_get");
      fl_operand_t w{grad, FL_WRITE, 0}, rd{grad, FL_READ, 0};
      fl_host_instr_t h = FL_HOST_INSTR_INIT;
      h.fn = &backward;
      h.operands = &w;
      h.num_operands = 1;
      h.name = "backward";
      ok(fl_submit_host(host0, &h, nullptr), "fl_submit_host");
      j.submit(0, FL_COLL_ALL_REDUCE, 4, "grad.allreduce", &rd);
      j.drain();
      fl_object_release(grad);
    } else {
      j.submit(0, FL_COLL_ALL_REDUCE, 4, "grad.allreduce");
      j.drain();  // seq 3 times out (after its dump)
    }
    MPI_Barrier(MPI_COMM_WORLD);
  } else if (kind == "dead") {
    Job j(1);
    for (int s = 0; s < 2; ++s) j.submit(0, FL_COLL_ALL_REDUCE, 4, "grad.allreduce");
    j.drain();
    MPI_Barrier(MPI_COMM_WORLD);
    if (r == 1) raise(SIGKILL);
    j.submit(0, FL_COLL_ALL_REDUCE, 4, "grad.allreduce");
    std::printf("rank %d: waiting in seq 3 for mpirun's SIGTERM\n", r);
    std::fflush(stdout);
    j.drain();  // never: mpirun ends the job (or the comm timeout, if set)
    die("seq 3 finished although rank 1 is dead");
  } else if (kind == "crossed") {
    Job j(2);
    if (r % 2 == 0) {
      j.submit(0, FL_COLL_ALL_REDUCE, 4, "layer.allreduce");
      j.submit(1, FL_COLL_ALL_GATHER, 2, "pipeline.allgather");
    } else {
      j.submit(1, FL_COLL_ALL_GATHER, 2, "pipeline.allgather");
      j.submit(0, FL_COLL_ALL_REDUCE, 4, "layer.allreduce");
    }
    ok(fl_engine_synchronize_for(j.engine, 60'000'000'000ull), "crossed orders completed");
    j.dump();
    MPI_Barrier(MPI_COMM_WORLD);
  } else {
    die("unknown hang " + kind);
  }
}
