// Pipeline parallelism across processes: one stage per MPI rank, activations and gradients
// sent between neighbouring stages with flowlane's send/recv collectives over MPI, GPipe and
// 1F1B schedules, the bubble measured as the single-process demo (examples/pipeline) does.
//
//   mpirun -np 4 pipeline_mpi [--micro 8] [--schedule gpipe|1f1b|both] [--work-ms 4]
//
// Stage j (rank j) runs forward F(i) and backward B(i) of micro-batch i on lane 0, in its
// schedule's order. Between stages j and j+1 there are two 2-rank communicators, one per
// direction (each carries its messages in the same order on both ranks, whatever the
// schedule): `fwd` (activations, lane 1 on the receiver, lane 2 on the sender) and `bwd`
// (gradients, lane 3 / lane 4). A receive is a collective that writes the input object F or
// B reads; a send reads the output F or B wrote. Nothing else orders them: a stage computes
// while its sends and receives are in flight. Work model as in examples/pipeline: each F
// takes W ms and each B 2W ms of "device" time (the core is yielded meanwhile), so that four
// stages fit on two cores.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <flowlane/flowlane.h>
#include <flowlane/flowlane_mpi.h>

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kWidth = 64;
int g_rank = 0, g_size = 1;

#define CHECK(call)                                                                                     \
  do {                                                                                                  \
    fl_status_t st_ = (call);                                                                           \
    if (st_ != FL_OK) {                                                                                 \
      std::fprintf(stderr, "rank %d: %s failed: %s: %s\n", g_rank, #call, fl_status_name(st_),           \
                   fl_last_error_message());                                                            \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                                     \
    }                                                                                                   \
  } while (0)

enum Phase { kF = 0, kB = 1 };
struct Op {
  Phase phase;
  int mb;
};

// Stage j's order of its F and B passes (as examples/pipeline).
std::vector<Op> stage_order(const std::string& sched, int j, int n, int m) {
  std::vector<Op> order;
  if (sched == "gpipe") {
    for (int i = 0; i < m; ++i) order.push_back({kF, i});
    for (int i = m - 1; i >= 0; --i) order.push_back({kB, i});
  } else {
    const int warm = std::min(n - j - 1, m);
    for (int i = 0; i < warm; ++i) order.push_back({kF, i});
    for (int k = 0; k < m - warm; ++k) {
      order.push_back({kF, warm + k});
      order.push_back({kB, k});
    }
    for (int k = m - warm; k < m; ++k) order.push_back({kB, k});
  }
  return order;
}

void forward_math(const std::vector<double>& in, std::vector<double>& out, int j) {
  for (int k = 0; k < kWidth; ++k) out[size_t(k)] = std::tanh(in[size_t(k)] * (1.0 + 0.01 * j) + 0.001 * k);
}
void backward_math(const std::vector<double>& gnext, const std::vector<double>& a, std::vector<double>& g) {
  for (int k = 0; k < kWidth; ++k) g[size_t(k)] = gnext[size_t(k)] * (1.0 - a[size_t(k)] * a[size_t(k)]);
}
std::vector<double> input_of(int i) {
  std::vector<double> x(kWidth);
  for (int k = 0; k < kWidth; ++k) x[size_t(k)] = 0.01 * (i + 1) * (k + 1);
  return x;
}

struct Stage {
  int j = 0, n = 1, m = 1;
  double work_ms = 4;
  Clock::time_point t0;
  std::vector<std::vector<double>> in, out, gin, gout;  // per micro-batch: received act, F's output, received grad, B's output
  std::vector<double> busy_start, busy_end;             // per op, ms since t0
};

struct Task {
  Stage* s;
  Op op;
  int index;
};

void device_work(double ms) {  // a kernel of fixed duration: the core is yielded meanwhile
  const auto until = Clock::now() + std::chrono::microseconds(int64_t(ms * 1000));
  while (Clock::now() < until) std::this_thread::sleep_for(std::chrono::microseconds(200));
}

fl_status_t run_op(fl_instr_ctx_t*, void* ud) {
  auto* t = static_cast<Task*>(ud);
  Stage& s = *t->s;
  s.busy_start[size_t(t->index)] = std::chrono::duration<double, std::milli>(Clock::now() - s.t0).count();
  const int i = t->op.mb;
  if (t->op.phase == kF) {
    forward_math(s.j == 0 ? input_of(i) : s.in[size_t(i)], s.out[size_t(i)], s.j);
    device_work(s.work_ms);
  } else {
    const std::vector<double> ones(kWidth, 1.0);  // d(loss)/d(output) = 1 at the last stage
    backward_math(s.j == s.n - 1 ? ones : s.gin[size_t(i)], s.out[size_t(i)], s.gout[size_t(i)]);
    device_work(2 * s.work_ms);
  }
  s.busy_end[size_t(t->index)] = std::chrono::duration<double, std::milli>(Clock::now() - s.t0).count();
  return FL_OK;
}

struct Links {
  fl_comm_t *fwd_left = nullptr, *fwd_right = nullptr, *bwd_left = nullptr, *bwd_right = nullptr;
};

// A send or receive of one vector on a 2-rank communicator (peer: the other rank of it).
void p2p(fl_stream_t* s, fl_comm_t* c, bool send, std::vector<double>& v, fl_object_t* obj, int peer, const char* name) {
  fl_coll_part_t p{};
  p.op = send ? FL_COLL_SEND : FL_COLL_RECV;
  p.dtype = FL_DTYPE_FLOAT64;
  p.peer = uint32_t(peer);
  p.sendbuf = send ? v.data() : nullptr;
  p.recvbuf = send ? nullptr : v.data();
  p.count = kWidth;
  fl_operand_t o{obj, send ? uint32_t(FL_READ) : uint32_t(FL_WRITE), 0};
  fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
  in.parts = &p;
  in.num_parts = 1;
  in.operands = &o;
  in.num_operands = 1;
  in.name = name;
  CHECK(fl_submit_collective(s, c, &in, nullptr));
}

bool run(const std::string& sched, int m, double work_ms, fl_engine_t* e, const Links& links, bool print) {
  const int n = g_size, j = g_rank;
  Stage s;
  s.j = j;
  s.n = n;
  s.m = m;
  s.work_ms = work_ms;
  for (auto* v : {&s.in, &s.out, &s.gin, &s.gout}) v->assign(size_t(m), std::vector<double>(kWidth, 0.0));
  s.busy_start.assign(size_t(2 * m), -1);
  s.busy_end.assign(size_t(2 * m), -1);
  fl_device_t cpu{FL_DEVICE_CPU, 0};
  fl_stream_t *compute, *lane[5];
  CHECK(fl_stream_get(e, 0, cpu, FL_STREAM_HOST, &compute));
  for (int l = 1; l <= 4; ++l) CHECK(fl_stream_get(e, uint32_t(l), cpu, FL_STREAM_COLLECTIVE, &lane[l]));
  const size_t mm = static_cast<size_t>(m);
  std::vector<fl_object_t*> in(mm), out(mm), gin(mm), gout(mm);
  for (auto* v : {&in, &out, &gin, &gout})
    for (auto& o : *v) CHECK(fl_object_create(e, nullptr, nullptr, &o));
  // The stage's left neighbour is rank 0 of the left links, its right neighbour rank 1 of
  // the right links (a pair's ranks keep the world's order).
  MPI_Barrier(MPI_COMM_WORLD);
  s.t0 = Clock::now();
  const std::vector<Op> order = stage_order(sched, j, n, m);
  for (size_t k = 0; k < order.size(); ++k) {
    const Op& op = order[k];
    const int i = op.mb;
    std::vector<fl_operand_t> ops;
    if (op.phase == kF) {
      if (j > 0) p2p(lane[1], links.fwd_left, false, s.in[size_t(i)], in[size_t(i)], 0, "recv act");
      if (j > 0) ops.push_back({in[size_t(i)], FL_READ, 0});
      ops.push_back({out[size_t(i)], FL_WRITE, 0});
    } else {
      if (j < n - 1) p2p(lane[3], links.bwd_right, false, s.gin[size_t(i)], gin[size_t(i)], 1, "recv grad");
      if (j < n - 1) ops.push_back({gin[size_t(i)], FL_READ, 0});
      ops.push_back({out[size_t(i)], FL_READ, 0});
      ops.push_back({gout[size_t(i)], FL_WRITE, 0});
    }
    fl_host_instr_t h = FL_HOST_INSTR_INIT;
    h.fn = &run_op;
    h.user_data = new Task{&s, op, int(k)};
    h.cleanup = [](void* ud) { delete static_cast<Task*>(ud); };
    h.operands = ops.data();
    h.num_operands = ops.size();
    h.name = op.phase == kF ? "F" : "B";
    CHECK(fl_submit_host(compute, &h, nullptr));
    if (op.phase == kF && j < n - 1) p2p(lane[2], links.fwd_right, true, s.out[size_t(i)], out[size_t(i)], 1, "send act");
    if (op.phase == kB && j > 0) p2p(lane[4], links.bwd_left, true, s.gout[size_t(i)], gout[size_t(i)], 0, "send grad");
  }
  CHECK(fl_engine_synchronize(e));
  const double makespan_local = *std::max_element(s.busy_end.begin(), s.busy_end.end());
  for (auto* v : {&in, &out, &gin, &gout})
    for (auto* o : *v) CHECK(fl_object_release(o));

  // The numbers against a sequential run of the whole pipeline (here, without flowlane).
  std::vector<std::vector<double>> a(static_cast<size_t>(n), std::vector<double>(kWidth)), g = a;
  bool same = true;
  for (int i = 0; i < m; ++i) {
    for (int st = 0; st < n; ++st) forward_math(st == 0 ? input_of(i) : a[size_t(st - 1)], a[size_t(st)], st);
    for (int st = n - 1; st >= 0; --st)
      backward_math(st == n - 1 ? std::vector<double>(kWidth, 1.0) : g[size_t(st + 1)], a[size_t(st)], g[size_t(st)]);
    same = same && a[size_t(j)] == s.out[size_t(i)] && g[size_t(j)] == s.gout[size_t(i)];
  }
  // Busy time and bubble, per stage, as examples/pipeline measures them: 1 - busy / makespan,
  // the makespan from the first start to the last end over every stage.
  double busy = 0;
  for (size_t k = 0; k < s.busy_end.size(); ++k) busy += s.busy_end[k] - s.busy_start[k];
  const double first = *std::min_element(s.busy_start.begin(), s.busy_start.end());
  double span[2] = {-first, makespan_local}, global[2];
  MPI_Allreduce(span, global, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  const double makespan = global[1] + global[0];
  std::vector<double> busies(static_cast<size_t>(n));
  MPI_Gather(&busy, 1, MPI_DOUBLE, busies.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  int ok = same, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (print && g_rank == 0) {
    std::printf("\n== %s: %d stages (one per process) x %d micro-batches, F = %.1f ms, B = %.1f ms ==\n",
                sched == "gpipe" ? "GPipe" : "1F1B", n, m, work_ms, 2 * work_ms);
    std::printf("results %s the sequential run on every stage\n", all_ok ? "match" : "DIFFER FROM");
    double sum = 0;
    for (int st = 0; st < n; ++st) {
      const double bubble = 1.0 - busies[size_t(st)] / makespan;
      sum += bubble;
      std::printf("  stage %d (rank %d): busy %8.1f ms of %8.1f ms  bubble %5.1f%%\n", st, st, busies[size_t(st)],
                  makespan, 100 * bubble);
    }
    const double formula = double(n - 1) / double(m + n - 1);
    std::printf("bubble: measured %.1f%% (mean over stages), formula (n-1)/(m+n-1) = %d/%d = %.1f%%\n",
                100 * sum / n, n - 1, m + n - 1, 100 * formula);
  }
  return all_ok != 0;
}

// The 2-rank communicators with the neighbours: two splits of the world pair each rank with
// its left and its right neighbour; on each pair, one flowlane communicator per direction.
Links make_links(fl_engine_t* e) {
  Links links;
  for (int pass = 0; pass < 2; ++pass) {
    // pass 0 pairs (0,1) (2,3) ...; pass 1 pairs (1,2) (3,4) ...
    const int color = (g_rank + pass) / 2;
    const bool paired = (g_rank + pass) % 2 == 0 ? g_rank + 1 < g_size : g_rank - 1 >= 0;
    MPI_Comm pair = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, paired ? color : MPI_UNDEFINED, g_rank, &pair);
    if (pair == MPI_COMM_NULL) continue;
    const bool left_of_pair = (g_rank + pass) % 2 == 0;  // this rank is rank 0 of the pair
    fl_comm_desc_t d = FL_COMM_DESC_INIT;
    fl_comm_t *fwd = nullptr, *bwd = nullptr;
    // fwd: lane 2 on the sender (rank 0 of the pair), lane 1 on the receiver; bwd: lane 3 on
    // the receiver (rank 0), lane 4 on the sender.
    d.lane = left_of_pair ? 2 : 1;
    CHECK(fl_mpi_comm_create(e, &d, &pair, &fwd));
    d.lane = left_of_pair ? 3 : 4;
    CHECK(fl_mpi_comm_create(e, &d, &pair, &bwd));
    MPI_Comm_free(&pair);  // flowlane keeps its own duplicates
    if (left_of_pair) {
      links.fwd_right = fwd;
      links.bwd_right = bwd;
    } else {
      links.fwd_left = fwd;
      links.bwd_left = bwd;
    }
  }
  return links;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  int m = 8;
  double work_ms = 4;
  std::string schedule = "both";
  for (int k = 1; k + 1 < argc; k += 2) {
    const std::string a = argv[k];
    if (a == "--micro") m = std::atoi(argv[k + 1]);
    else if (a == "--work-ms") work_ms = std::atof(argv[k + 1]);
    else if (a == "--schedule") schedule = argv[k + 1];
  }
  fl_engine_desc_t ed = FL_ENGINE_DESC_INIT;
  ed.num_workers = 2;
  ed.max_lanes = 5;
  fl_engine_t* e = nullptr;
  CHECK(fl_engine_create(&ed, &e));
  Links links = make_links(e);
  if (g_rank == 0)
    std::printf("flowlane %s pipeline over MPI: %d stages, one per process; stage j on rank j\n", fl_version_string(),
                g_size);
  bool ok = true;
  for (const char* sched : {"gpipe", "1f1b"})
    if (schedule == "both" || schedule == sched) ok = run(sched, m, work_ms, e, links, true) && ok;
  for (fl_comm_t* c : {links.fwd_left, links.fwd_right, links.bwd_left, links.bwd_right})
    if (c != nullptr) CHECK(fl_comm_destroy(c));
  CHECK(fl_engine_destroy(e));
  MPI_Finalize();
  return ok ? 0 : 1;
}
