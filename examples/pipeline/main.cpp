// Pipeline parallelism on flowlane: GPipe (clock cycles) and 1F1B schedules over n stages
// and m micro-batches. Each stage is a lane; forward and backward are host instructions
// whose cross-stage order comes only from object dependencies:
//   act[i][j]  written by F(i,j), read by F(i,j+1) and by B(i,j) (saved activation);
//   grad[i][j] written by B(i,j), read by B(i,j-1);
//   phony[i][j] (no data) orders the backward passes of one stage the way torchgpipe's
//   fork/join does: GPipe runs B(i+1,j) before B(i,j); 1F1B runs B(i,j) before B(i+1,j).
// The program submits in a topological order of those dependencies that follows each
// stage's schedule, records when every instruction ran, checks the executed order against
// the schedule's dependencies, checks the numbers against a sequential run, and prints
// per-stage busy time and the measured bubble next to (n-1)/(m+n-1). It writes a Chrome
// trace per schedule (open in https://ui.perfetto.dev).
//
// Work model. --work cpu: each instruction does a fixed amount of arithmetic (calibrated
// to W ms on one idle core); honest only with at least n free cores, else the stages
// time-share the CPU and the "bubble" measures contention. --work device: each stage is
// modelled as an accelerator: the instruction computes its (small, real) result, then
// spins — yielding the core — until W ms after it started, like a host thread waiting for
// a kernel of fixed duration; it needs no dedicated core. --work auto (default) picks cpu
// when the machine has at least n cores, else device. Workers default to n (one per stage).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <flowlane/flowlane.h>

namespace {

using Clock = std::chrono::steady_clock;

#define CHECK(call)                                                                          \
  do {                                                                                       \
    fl_status_t st_ = (call);                                                                \
    if (st_ != FL_OK) {                                                                      \
      std::fprintf(stderr, "%s failed: %s: %s\n", #call, fl_status_name(st_), fl_last_error_message()); \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

constexpr int kWidth = 64;  // activation / gradient vector length

struct Options {
  int stages = 4;
  int micro = 8;
  double work_ms = 4.0;  // forward; backward is twice that
  std::string work = "auto";
  int workers = 0;
  std::string schedule = "both";
  std::string trace_prefix = "pipeline";
};

enum Phase { kF = 0, kB = 1 };
struct Op {
  Phase phase;
  int mb;     // micro-batch i
  int stage;  // stage j
};

// Per-stage order of a schedule.
std::vector<std::vector<Op>> stage_orders(const std::string& sched, int n, int m) {
  std::vector<std::vector<Op>> order(n);
  for (int j = 0; j < n; ++j) {
    if (sched == "gpipe") {
      for (int i = 0; i < m; ++i) order[j].push_back({kF, i, j});
      for (int i = m - 1; i >= 0; --i) order[j].push_back({kB, i, j});
    } else {  // 1f1b (PipeDream-flush)
      int warm = std::min(n - j - 1, m);
      for (int i = 0; i < warm; ++i) order[j].push_back({kF, i, j});
      for (int k = 0; k < m - warm; ++k) {
        order[j].push_back({kF, warm + k, j});
        order[j].push_back({kB, k, j});
      }
      for (int k = m - warm; k < m; ++k) order[j].push_back({kB, k, j});
    }
  }
  return order;
}

int op_index(const Op& o, int n, int m) { return (o.phase * m + o.mb) * n + o.stage; }

}  // namespace

namespace {

struct Run;

struct Instr {
  Run* run;
  Op op;
};

struct Run {
  Options opt;
  std::string sched;
  bool device = false;
  uint64_t iters_per_ms = 0;
  int n = 0, m = 0;
  std::vector<std::vector<double>> act, grad;  // [i * n + j][kWidth]
  std::vector<int64_t> start_ns, end_ns;       // per op index
  std::vector<int> exec_order;                 // per stage, filled by the stage's lane
  Clock::time_point t0;
};

thread_local volatile double g_sink = 0;  // per thread: stages run concurrently

// Arithmetic that the compiler cannot drop.
double spin_math(uint64_t iters, double seed) {
  double x = seed;
  for (uint64_t k = 0; k < iters; ++k) x = x * 1.0000001 + 1e-9 * double(k & 7);
  return x;
}

void do_work(Run& r, double ms) {
  if (!r.device) {
    g_sink = spin_math(uint64_t(double(r.iters_per_ms) * ms), g_sink);
    return;
  }
  auto deadline = Clock::now() + std::chrono::microseconds(int64_t(ms * 1000));
  while (Clock::now() < deadline) {
    g_sink = spin_math(2000, g_sink);  // a few microseconds of real arithmetic
    std::this_thread::yield();          // then give the core to whoever needs it
  }
}

void forward_math(const std::vector<double>& in, std::vector<double>& out, int j) {
  for (int k = 0; k < kWidth; ++k) out[k] = std::tanh(in[k] * (1.0 + 0.01 * j) + 0.001 * k);
}
void backward_math(const std::vector<double>& gnext, const std::vector<double>& a, std::vector<double>& g) {
  for (int k = 0; k < kWidth; ++k) g[k] = gnext[k] * (1.0 - a[k] * a[k]);
}

fl_status_t run_op(fl_instr_ctx_t*, void* ud) {
  auto* in = static_cast<Instr*>(ud);
  Run& r = *in->run;
  const Op& o = in->op;
  int idx = op_index(o, r.n, r.m);
  r.start_ns[idx] = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - r.t0).count();
  int i = o.mb, j = o.stage, n = r.n;
  if (o.phase == kF) {
    std::vector<double> input(kWidth);
    if (j == 0)
      for (int k = 0; k < kWidth; ++k) input[k] = 0.01 * (i + 1) * (k + 1);
    else
      input = r.act[i * n + j - 1];
    forward_math(input, r.act[i * n + j], j);
    do_work(r, r.opt.work_ms);
  } else {
    std::vector<double> gnext(kWidth, 1.0);  // d(loss)/d(output) = 1 at the last stage
    if (j < n - 1) gnext = r.grad[i * n + j + 1];
    backward_math(gnext, r.act[i * n + j], r.grad[i * n + j]);
    do_work(r, 2 * r.opt.work_ms);
  }
  r.end_ns[idx] = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - r.t0).count();
  return FL_OK;
}

void free_instr(void* ud) { delete static_cast<Instr*>(ud); }

// Dependencies of an op in the schedule (besides lane order): data and phony edges.
std::vector<Op> deps_of(const Op& o, const std::string& sched, int n, int m) {
  std::vector<Op> d;
  if (o.phase == kF) {
    if (o.stage > 0) d.push_back({kF, o.mb, o.stage - 1});
  } else {
    d.push_back({kF, o.mb, o.stage});
    if (o.stage < n - 1) d.push_back({kB, o.mb, o.stage + 1});
    if (sched == "gpipe" && o.mb < m - 1) d.push_back({kB, o.mb + 1, o.stage});  // phony (fork/join)
    if (sched == "1f1b" && o.mb > 0) d.push_back({kB, o.mb - 1, o.stage});       // phony
  }
  return d;
}

uint64_t calibrate() {
  auto t = Clock::now();
  uint64_t iters = 2'000'000;
  g_sink = spin_math(iters, 1.0);
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - t).count();
  return uint64_t(double(iters) / std::max(ms, 1e-3));
}

bool run_schedule(const Options& opt, const std::string& sched, uint64_t iters_per_ms, bool device) {
  const int n = opt.stages, m = opt.micro;
  Run r;
  r.opt = opt;
  r.sched = sched;
  r.device = device;
  r.iters_per_ms = iters_per_ms;
  r.n = n;
  r.m = m;
  r.act.assign(size_t(n * m), std::vector<double>(kWidth));
  r.grad.assign(size_t(n * m), std::vector<double>(kWidth));
  r.start_ns.assign(size_t(2 * n * m), -1);
  r.end_ns.assign(size_t(2 * n * m), -1);

  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = uint64_t(opt.workers > 0 ? opt.workers : n);
  d.max_lanes = uint64_t(n + 1);  // stage j runs on lane j + 1
  d.watchdog_ms = 10000;          // a hang would explain itself on stderr
  fl_engine_t* e = nullptr;
  CHECK(fl_engine_create(&d, &e));
  std::vector<fl_stream_t*> lane(n);
  for (int j = 0; j < n; ++j) CHECK(fl_stream_get(e, uint32_t(j + 1), fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST, &lane[j]));
  std::vector<fl_object_t*> act(size_t(n * m)), grad(size_t(n * m)), phony(size_t(n * m));
  for (auto* v : {&act, &grad, &phony})
    for (auto& o : *v) CHECK(fl_object_create(e, nullptr, nullptr, &o));

  std::string trace = opt.trace_prefix + "_" + sched + ".json";
  CHECK(fl_trace_start(e, trace.c_str()));

  // Submit in a topological order that follows each stage's schedule: round-robin over the
  // stages, taking a stage's next op once everything it depends on has been submitted.
  auto order = stage_orders(sched, n, m);
  std::vector<size_t> next(n, 0);
  std::vector<bool> submitted(size_t(2 * n * m), false);
  size_t remaining = size_t(2 * n * m);
  r.t0 = Clock::now();
  while (remaining > 0) {
    bool progress = false;
    for (int j = 0; j < n; ++j) {
      while (next[j] < order[j].size()) {
        const Op& o = order[j][next[j]];
        bool ready = true;
        for (const Op& dep : deps_of(o, sched, n, m)) ready = ready && submitted[size_t(op_index(dep, n, m))];
        if (!ready) break;
        int i = o.mb;
        std::vector<fl_operand_t> ops;
        std::string name;
        if (o.phase == kF) {
          // Appended piecewise: `"F" + std::to_string(i)` trips GCC 12's false -Wrestrict
          // (GCC bug 105329).
          name = "F";
          name += std::to_string(i);
          name += ',';
          name += std::to_string(j);
          if (j > 0) ops.push_back({act[size_t(i * n + j - 1)], FL_READ, 0});
          ops.push_back({act[size_t(i * n + j)], FL_WRITE, 0});
        } else {
          name = "B";
          name += std::to_string(i);
          name += ',';
          name += std::to_string(j);
          ops.push_back({act[size_t(i * n + j)], FL_READ, 0});
          if (j < n - 1) ops.push_back({grad[size_t(i * n + j + 1)], FL_READ, 0});
          ops.push_back({grad[size_t(i * n + j)], FL_WRITE, 0});
          // fork/join: the backward that must run first writes the phony, the next reads it.
          if (sched == "gpipe") {
            if (i < m - 1) ops.push_back({phony[size_t(i * n + j)], FL_READ, 0});
            if (i > 0) ops.push_back({phony[size_t((i - 1) * n + j)], FL_WRITE, 0});
          } else {
            if (i > 0) ops.push_back({phony[size_t((i - 1) * n + j)], FL_READ, 0});
            if (i < m - 1) ops.push_back({phony[size_t(i * n + j)], FL_WRITE, 0});
          }
        }
        fl_host_instr_t hi = FL_HOST_INSTR_INIT;
        hi.fn = &run_op;
        hi.user_data = new Instr{&r, o};
        hi.cleanup = &free_instr;
        hi.operands = ops.data();
        hi.num_operands = ops.size();
        hi.name = name.c_str();
        CHECK(fl_submit_host(lane[size_t(j)], &hi, nullptr));
        submitted[size_t(op_index(o, n, m))] = true;
        ++next[j];
        --remaining;
        progress = true;
      }
    }
    if (!progress) {
      std::fprintf(stderr, "internal error: the schedule has a dependency cycle\n");
      return false;
    }
  }
  CHECK(fl_engine_synchronize(e));
  CHECK(fl_trace_stop(e));
  for (auto* v : {&act, &grad, &phony})
    for (auto* o : *v) CHECK(fl_object_release(o));
  CHECK(fl_engine_destroy(e));

  // 1. Executed order against the schedule: every dependency (data, phony, and the
  //    stage's own order) finished before the op started; each stage ran its list in order.
  size_t checked = 0;
  bool ok = true;
  for (int j = 0; j < n; ++j) {
    for (size_t k = 0; k < order[j].size(); ++k) {
      const Op& o = order[j][k];
      int64_t s = r.start_ns[size_t(op_index(o, n, m))];
      std::vector<Op> deps = deps_of(o, sched, n, m);
      if (k > 0) deps.push_back(order[j][k - 1]);
      for (const Op& dep : deps) {
        ++checked;
        if (r.end_ns[size_t(op_index(dep, n, m))] > s) {
          std::printf("ORDER VIOLATION: %c%d,%d started before %c%d,%d ended\n", "FB"[o.phase], o.mb, o.stage,
                      "FB"[dep.phase], dep.mb, dep.stage);
          ok = false;
        }
      }
    }
  }
  // 2. Numbers against a sequential run.
  std::vector<std::vector<double>> sa(size_t(n * m), std::vector<double>(kWidth)), sg = sa;
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      std::vector<double> input(kWidth);
      if (j == 0)
        for (int k = 0; k < kWidth; ++k) input[k] = 0.01 * (i + 1) * (k + 1);
      else
        input = sa[size_t(i * n + j - 1)];
      forward_math(input, sa[size_t(i * n + j)], j);
    }
    for (int j = n - 1; j >= 0; --j) {
      std::vector<double> gnext(kWidth, 1.0);
      if (j < n - 1) gnext = sg[size_t(i * n + j + 1)];
      backward_math(gnext, sa[size_t(i * n + j)], sg[size_t(i * n + j)]);
    }
  }
  bool same = sa == r.act && sg == r.grad;
  ok = ok && same;

  // 3. Busy time and bubble.
  int64_t t_begin = *std::min_element(r.start_ns.begin(), r.start_ns.end());
  int64_t t_end = *std::max_element(r.end_ns.begin(), r.end_ns.end());
  double makespan = double(t_end - t_begin) / 1e6;
  double bubble_sum = 0;
  std::printf("\n== %s: %d stages x %d micro-batches, F = %.1f ms, B = %.1f ms, %s work, %d workers ==\n",
              sched == "gpipe" ? "GPipe (clock cycles)" : "1F1B (PipeDream-flush)", n, m, opt.work_ms,
              2 * opt.work_ms, device ? "device-model" : "cpu", int(d.num_workers));
  std::printf("order check: %s (%zu dependencies checked, per-stage order %s); results %s the sequential run\n",
              ok ? "OK" : "FAILED", checked, sched == "gpipe" ? "F0..F(m-1), B(m-1)..B0" : "warm-up, 1F1B, cool-down",
              same ? "match" : "DIFFER FROM");
  for (int j = 0; j < n; ++j) {
    double busy = 0;
    for (const Op& o : order[j]) {
      int idx = op_index(o, n, m);
      busy += double(r.end_ns[size_t(idx)] - r.start_ns[size_t(idx)]) / 1e6;
    }
    double bubble = 1.0 - busy / makespan;
    bubble_sum += bubble;
    std::printf("  stage %d (lane %d): busy %8.1f ms of %8.1f ms  bubble %5.1f%%\n", j, j + 1, busy, makespan,
                100 * bubble);
  }
  double formula = double(n - 1) / double(m + n - 1);
  std::printf("bubble: measured %.1f%% (mean over stages), formula (n-1)/(m+n-1) = %d/%d = %.1f%%\n",
              100 * bubble_sum / n, n - 1, m + n - 1, 100 * formula);
  std::printf("trace: %s (open in https://ui.perfetto.dev)\n", trace.c_str());
  return ok;
}

void usage() {
  std::printf(
      "usage: pipeline [--stages N] [--micro M] [--schedule gpipe|1f1b|both] [--work-ms W]\n"
      "                [--work auto|cpu|device] [--workers K] [--trace-prefix P]\n"
      "  defaults: 4 stages, 8 micro-batches, both schedules, F = 4 ms (B = 2F), auto work,\n"
      "  workers = stages, traces P_gpipe.json / P_1f1b.json with P = pipeline\n");
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int k = 1; k < argc; ++k) {
    std::string a = argv[k];
    auto val = [&]() -> std::string {
      if (k + 1 >= argc) {
        usage();
        std::exit(2);
      }
      return argv[++k];
    };
    if (a == "--stages") opt.stages = std::atoi(val().c_str());
    else if (a == "--micro") opt.micro = std::atoi(val().c_str());
    else if (a == "--schedule") opt.schedule = val();
    else if (a == "--work-ms") opt.work_ms = std::atof(val().c_str());
    else if (a == "--work") opt.work = val();
    else if (a == "--workers") opt.workers = std::atoi(val().c_str());
    else if (a == "--trace-prefix") opt.trace_prefix = val();
    else {
      usage();
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if (opt.stages < 1 || opt.stages > 64 || opt.micro < 1 || opt.micro > 4096 || opt.work_ms < 0 ||
      (opt.schedule != "gpipe" && opt.schedule != "1f1b" && opt.schedule != "both") ||
      (opt.work != "auto" && opt.work != "cpu" && opt.work != "device")) {
    usage();
    return 2;
  }
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  bool device = opt.work == "device" || (opt.work == "auto" && cores < unsigned(opt.stages));
  uint64_t ipm = calibrate();
  std::printf("flowlane %s pipeline demo: %u cores; %s\n", fl_version_string(), cores,
              device ? "device-model work (stages wait for fixed-duration 'kernels' and yield the core: "
                       "fewer cores than stages)"
                     : "cpu work (fixed arithmetic per instruction)");
  bool ok = true;
  if (opt.schedule == "gpipe" || opt.schedule == "both") ok = run_schedule(opt, "gpipe", ipm, device) && ok;
  if (opt.schedule == "1f1b" || opt.schedule == "both") ok = run_schedule(opt, "1f1b", ipm, device) && ok;
  return ok ? 0 : 1;
}
