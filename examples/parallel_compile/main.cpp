// parallel_compile: compiles a synthetic LSTM op graph (~90k ops at --seq-len 300) as a
// flowlane task graph, one task per op, and reports wall time and speed-up for 1 .. N
// threads. Every thread count must produce the same compiled result (digest); a mismatch
// exits with status 1.
//
//   parallel_compile [--seq-len N] [--threads-max N] [--repeat K]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "flowlane/flowlane.h"
#include "parallel_compile/lstm_graph.hpp"

namespace {

int arg_int(int argc, char** argv, const char* flag, int fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return std::atoi(argv[i + 1]);
  return fallback;
}

int check(fl_status_t s, const char* what) {
  if (s == FL_OK) return 0;
  std::fprintf(stderr, "parallel_compile: %s failed: %s: %s\n", what, fl_status_name(s), fl_last_error_message());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("usage: %s [--seq-len N] [--threads-max N] [--repeat K]\n", argv[0]);
      return 0;
    }
  const int seq_len = std::max(1, arg_int(argc, argv, "--seq-len", 300));
  int threads_max = arg_int(argc, argv, "--threads-max", int(std::max(1u, std::thread::hardware_concurrency())));
  threads_max = std::max(1, threads_max);
  const int repeat = std::max(1, arg_int(argc, argv, "--repeat", 3));

  auto t0 = std::chrono::steady_clock::now();
  lstm::Graph graph = lstm::build(seq_len);
  double build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  fl_engine_desc_t desc = FL_ENGINE_DESC_INIT;
  desc.num_workers = uint64_t(threads_max);
  fl_engine_t* engine = nullptr;
  if (int rc = check(fl_engine_create(&desc, &engine), "fl_engine_create")) return rc;

  std::vector<lstm::TaskCtx> ctx;
  fl_taskgraph_t* tg = nullptr;
  t0 = std::chrono::steady_clock::now();
  if (int rc = check(lstm::make_taskgraph(engine, graph, ctx, &tg), "building the task graph")) return rc;
  double tg_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  std::printf("parallel_compile: LSTM %d layers x %d steps: %zu ops, %zu edges (graph %.1f ms, task graph %.1f ms)\n",
              lstm::kLayers, seq_len, graph.ops.size(), graph.edges, build_ms, tg_ms);
  std::printf("%8s %12s %12s %10s %18s\n", "threads", "median ms", "min ms", "speed-up", "digest");

  uint64_t reference = 0;
  double base_ms = 0;
  bool mismatch = false;
  for (int n = 1; n <= threads_max; ++n) {
    std::vector<double> ms;
    uint64_t d = 0;
    for (int r = 0; r < repeat; ++r) {
      lstm::reset(graph);
      auto s = std::chrono::steady_clock::now();
      if (int rc = check(fl_taskgraph_run(tg, n), "fl_taskgraph_run")) return rc;
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count());
      uint64_t dr = lstm::digest(graph);
      if (r == 0) d = dr;
      if (dr != d) mismatch = true;
    }
    std::sort(ms.begin(), ms.end());
    double median = ms[ms.size() / 2];
    if (n == 1) {
      reference = d;
      base_ms = median;
    }
    if (d != reference) mismatch = true;
    std::printf("%8d %12.2f %12.2f %9.2fx %18llx%s\n", n, median, ms.front(), base_ms / median,
                static_cast<unsigned long long>(d), d != reference ? "  MISMATCH" : "");
  }
  fl_taskgraph_destroy(tg);
  fl_engine_destroy(engine);
  if (mismatch) {
    std::fprintf(stderr, "parallel_compile: compiled results differ between thread counts\n");
    return 1;
  }
  std::printf("all thread counts produced the same result\n");
  return 0;
}
