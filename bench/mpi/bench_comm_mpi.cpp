// flowlane's collectives over MPI against raw MPI on the same buffers, in the same run
// (bench/run_comm_mpi.sh runs it under mpirun and writes its section of BENCHMARKS.md).
//
//   mpirun -np 2 bench_comm_mpi [--rounds R] [--json FILE]
//   bench_comm_mpi --loop CHECK ELEMENTS COUNT   (only the collectives: for callgrind)
//
// Latency, per all-reduce (float32 sum) of 4 B, 64 KiB and 4 MiB, each variant timed over a
// batch of back-to-back operations, the variants alternating within a round (each round
// starts with the other one):
//   raw          MPI_Iallreduce + MPI_Wait            (the goal's reference)
//   raw_blocking MPI_Allreduce                        (for scale: Open MPI's tuned path)
//   strict       fl_submit_collective + fl_instr_wait_for, FLOWLANE_COMM_CHECK=strict (default)
//   alongside    the same with FLOWLANE_COMM_CHECK=alongside
// Overlap, a 4 MiB all-reduce issued, then C ms of compute on this rank (C: 1.5x the
// all-reduce's own time), the total against comm alone plus compute alone:
//   hidden = (t_comm + t_compute - t_both) / t_comm
// for the raw baseline (the main thread computes while a thread polls MPI_Test, sleeping 20
// to 200 us between tests) and for flowlane (the collective on lane 1, the compute a host
// instruction on lane 0). Idle: the process's CPU time over 1 s with an engine, an MPI
// communicator and nothing in flight, in percent of one core.
// Every figure is rank 0's; the median of R rounds, with min and max.
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "flowlane/flowlane.h"
#include "flowlane/flowlane_mpi.h"

namespace {

using Clock = std::chrono::steady_clock;
int g_rank = 0, g_size = 1;

void ok(fl_status_t st, const char* what) {
  if (st == FL_OK) return;
  std::fprintf(stderr, "rank %d: %s: %s: %s\n", g_rank, what, fl_status_name(st), fl_last_error_message());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct Fl {
  fl_engine_t* engine = nullptr;
  fl_comm_t* comm = nullptr;
  fl_stream_t* coll = nullptr;
  fl_stream_t* host0 = nullptr;
  explicit Fl(const char* check) {
    setenv("FLOWLANE_COMM_CHECK", check, 1);  // read at creation, alike on every rank
    fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
    d.num_workers = 2;
    d.max_lanes = 4;
    ok(fl_engine_create(&d, &engine), "fl_engine_create");
    fl_comm_desc_t cd = FL_COMM_DESC_INIT;
    cd.lane = 1;
    MPI_Comm world = MPI_COMM_WORLD;
    ok(fl_mpi_comm_create(engine, &cd, &world, &comm), "fl_mpi_comm_create");
    ok(fl_stream_get(engine, 1, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_COLLECTIVE, &coll), "fl_stream_get");
    ok(fl_stream_get(engine, 0, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST, &host0), "fl_stream_get");
  }
  ~Fl() {
    ok(fl_comm_destroy(comm), "fl_comm_destroy");
    ok(fl_engine_destroy(engine), "fl_engine_destroy");
  }
  uint64_t flags = 0;
  fl_instr_id allreduce(float* buf, uint64_t n) {
    fl_coll_part_t p{};
    p.op = FL_COLL_ALL_REDUCE;
    p.dtype = FL_DTYPE_FLOAT32;
    p.sendbuf = buf;
    p.recvbuf = buf;
    p.count = n;
    fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
    in.parts = &p;
    in.num_parts = 1;
    in.flags = flags;
    fl_instr_id id = 0;
    ok(fl_submit_collective(coll, comm, &in, &id), "fl_submit_collective");
    return id;
  }
  void wait(fl_instr_id id) { ok(fl_instr_wait_for(coll, id, 120'000'000'000ull), "fl_instr_wait_for"); }
  // As MPI_Wait does: polls (fl_instr_query) instead of sleeping, then takes the outcome.
  void poll(fl_instr_id id) {
    uint32_t state = FL_INSTR_PENDING;
    while (fl_instr_query(coll, id, &state) == FL_OK && state == FL_INSTR_PENDING) {
    }
    wait(id);
  }
};

void compute(double s) {  // busy, on the calling thread
  const auto until = Clock::now() + std::chrono::duration<double>(s);
  volatile double x = 1;
  while (Clock::now() < until)
    for (int k = 0; k < 1000; ++k) x = x * 1.0000001 + 1e-9;
}

// ---- latency ---------------------------------------------------------------------------

using Op = void (*)(Fl*, float*, uint64_t);
void raw_op(Fl*, float* b, uint64_t n) {
  MPI_Request r;
  MPI_Iallreduce(MPI_IN_PLACE, b, int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
  MPI_Wait(&r, MPI_STATUS_IGNORE);
}
void raw_blocking_op(Fl*, float* b, uint64_t n) { MPI_Allreduce(MPI_IN_PLACE, b, int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); }
void fl_op(Fl* f, float* b, uint64_t n) { f->wait(f->allreduce(b, n)); }
void fl_poll_op(Fl* f, float* b, uint64_t n) { f->poll(f->allreduce(b, n)); }

// Seconds per operation over a batch of `iters`, after a barrier.
double time_batch(Op op, Fl* f, float* b, uint64_t n, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = Clock::now();
  for (int k = 0; k < iters; ++k) op(f, b, n);
  return seconds(t0, Clock::now()) / iters;
}

// ---- overlap ----------------------------------------------------------------------------

double raw_both(float* b, uint64_t n, double c) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = Clock::now();
  MPI_Request r;
  MPI_Iallreduce(MPI_IN_PLACE, b, int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
  std::atomic<bool> done{false};
  std::thread poller([&] {  // the baseline's progress: MPI_Test with a back-off sleep
    int flag = 0;
    int64_t sleep_us = 20;
    while (!flag) {
      MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
      if (!flag) {
        std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
        sleep_us = std::min<int64_t>(sleep_us * 2, 200);
      }
    }
    done = true;
  });
  compute(c);
  poller.join();
  return seconds(t0, Clock::now());
}

struct Compute {
  double s;
};
fl_status_t compute_fn(fl_instr_ctx_t*, void* ud) {
  compute(static_cast<Compute*>(ud)->s);
  return FL_OK;
}

double fl_both(Fl& f, float* b, uint64_t n, double c) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = Clock::now();
  f.allreduce(b, n);
  Compute job{c};
  fl_host_instr_t h = FL_HOST_INSTR_INIT;
  h.fn = &compute_fn;
  h.user_data = &job;
  ok(fl_submit_host(f.host0, &h, nullptr), "fl_submit_host");
  ok(fl_engine_synchronize_for(f.engine, 120'000'000'000ull), "fl_engine_synchronize_for");
  return seconds(t0, Clock::now());
}

// ---- idle -------------------------------------------------------------------------------

double cpu_seconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// ---- statistics --------------------------------------------------------------------------

struct Stat {
  double median, min, max;
};
Stat stat(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  int rounds = 9;
  std::string json;
  for (int k = 1; k + 1 < argc; k += 2) {
    if (!std::strcmp(argv[k], "--rounds")) rounds = std::atoi(argv[k + 1]);
    if (!std::strcmp(argv[k], "--json")) json = argv[k + 1];
  }
  // --loop CHECK ELEMENTS COUNT: COUNT float32 all-reduces of ELEMENTS, submitted inline and
  // waited for one by one (CHECK "raw": MPI_Iallreduce + MPI_Wait), nothing else
  // (scripts/dev/callgrind-comm-mpi.sh counts them).
  if (argc == 5 && !std::strcmp(argv[1], "--loop")) {
    const uint64_t n = std::strtoull(argv[3], nullptr, 10);
    const long count = std::atol(argv[4]);
    std::vector<float> buf(n == 0 ? 1 : n, 1.0f);
    if (!std::strcmp(argv[2], "raw")) {
      for (long i = 0; i < count; ++i) raw_op(nullptr, buf.data(), n);
    } else {
      Fl f(argv[2]);
      f.flags = FL_SUBMIT_INLINE;
      for (long i = 0; i < count; ++i) fl_op(&f, buf.data(), n);
    }
    MPI_Finalize();
    return 0;
  }
  Fl strict("strict"), alongside("alongside");
  struct Size {
    const char* name;
    uint64_t n;
    int iters;
  } sizes[] = {{"4 B", 1, 2000}, {"64 KiB", 16384, 200}, {"4 MiB", 1u << 20, 8}};
  std::vector<float> buf(size_t(1) << 20, 1.0f);
  // strict/alongside: the waiting thread sleeps (fl_instr_wait_for); *_poll: it polls, as
  // MPI_Wait does. Submissions with FL_SUBMIT_INLINE (the start on the caller).
  strict.flags = alongside.flags = FL_SUBMIT_INLINE;
  const char* names[] = {"raw", "raw_blocking", "strict", "alongside", "strict_poll", "alongside_poll"};
  const Op ops[] = {&raw_op, &raw_blocking_op, &fl_op, &fl_op, &fl_poll_op, &fl_poll_op};
  Fl* fls[] = {nullptr, nullptr, &strict, &alongside, &strict, &alongside};
  constexpr int kVariants = 6;
  std::map<std::string, std::map<std::string, std::vector<double>>> lat;  // size -> variant -> per round (s)
  for (const Size& s : sizes) time_batch(&fl_op, &strict, buf.data(), s.n, 3);  // warm up
  for (int r = 0; r < rounds; ++r)
    for (const Size& s : sizes)
      for (int v = 0; v < kVariants; ++v) {
        const int k = (v + r) % kVariants;  // each round starts with another variant
        std::fill(buf.begin(), buf.begin() + long(s.n), 1.0f);
        lat[s.name][names[k]].push_back(time_batch(ops[k], fls[k], buf.data(), s.n, s.iters));
      }

  // Overlap of a 4 MiB all-reduce with compute.
  const uint64_t big = 1u << 20;
  std::vector<double> raw_hidden, fl_hidden, comm_s;
  for (int r = 0; r < rounds; ++r) {
    const double t_comm_raw = time_batch(&raw_op, nullptr, buf.data(), big, 2);
    const double t_comm_fl = time_batch(&fl_op, &strict, buf.data(), big, 2);
    double c_all = 1.5 * std::max(t_comm_raw, t_comm_fl);
    MPI_Bcast(&c_all, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);  // one compute length for every rank
    const double c = c_all;
    MPI_Barrier(MPI_COMM_WORLD);
    auto t0 = Clock::now();
    compute(c);
    const double t_compute = seconds(t0, Clock::now());
    double both_raw, both_fl;
    if (r % 2 == 0) {
      both_raw = raw_both(buf.data(), big, c);
      both_fl = fl_both(strict, buf.data(), big, c);
    } else {
      both_fl = fl_both(strict, buf.data(), big, c);
      both_raw = raw_both(buf.data(), big, c);
    }
    raw_hidden.push_back((t_comm_raw + t_compute - both_raw) / t_comm_raw);
    fl_hidden.push_back((t_comm_fl + t_compute - both_fl) / t_comm_fl);
    comm_s.push_back(t_comm_raw);
  }

  // Idle: an engine and a communicator, nothing in flight.
  MPI_Barrier(MPI_COMM_WORLD);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // past the progress thread's back-off
  const double c0 = cpu_seconds();
  const auto i0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double idle_pct = 100 * (cpu_seconds() - c0) / seconds(i0, Clock::now());
  double idle_max = 0;
  MPI_Reduce(&idle_pct, &idle_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

  if (g_rank == 0) {
    std::string out = "{\"ranks\":" + std::to_string(g_size) + ",\"rounds\":" + std::to_string(rounds) +
                      ",\"latency_us\":{";
    bool first_size = true;
    for (const Size& s : sizes) {
      out += std::string(first_size ? "" : ",") + "\"" + s.name + "\":{";
      first_size = false;
      for (int v = 0; v < kVariants; ++v) {
        const Stat st = stat(lat[s.name][names[v]]);
        char b[160];
        std::snprintf(b, sizeof b, "%s\"%s\":[%.3f,%.3f,%.3f]", v ? "," : "", names[v], st.median * 1e6, st.min * 1e6,
                      st.max * 1e6);
        out += b;
      }
      out += "}";
    }
    auto triple = [](const std::vector<double>& v) {
      const Stat st = stat(v);
      char b[96];
      std::snprintf(b, sizeof b, "[%.4f,%.4f,%.4f]", st.median, st.min, st.max);
      return std::string(b);
    };
    out += "},\"hidden\":{\"raw\":" + triple(raw_hidden) + ",\"flowlane\":" + triple(fl_hidden) +
           "},\"comm_4mib_s\":" + triple(comm_s);
    char b[64];
    std::snprintf(b, sizeof b, ",\"idle_cpu_percent\":%.3f}", idle_max);
    out += b;
    std::printf("%s\n", out.c_str());
    if (!json.empty()) {
      FILE* f = std::fopen(json.c_str(), "w");
      if (f != nullptr) {
        std::fprintf(f, "%s\n", out.c_str());
        std::fclose(f);
      }
    }
  }
  MPI_Finalize();
  return 0;
}
