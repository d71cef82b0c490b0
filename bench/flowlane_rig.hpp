// The flowlane side of the engine benchmarks (bench_engine, bench_openmp), through the
// public C API only: an engine with 8 host lanes, the workload shapes as batch functions
// (one body each, shared by every benchmark that submits that shape), and the batch
// driver that checks the engine ran every instruction.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench_common.hpp"
#include "flowlane/flowlane.h"

namespace flbench {

// Aborts with flowlane's message when a call failed: a benchmark never times errors.
inline void check(fl_status_t st, const char* what) {
  if (st == FL_OK) return;
  std::fprintf(stderr, "%s failed: %s: %s\n", what, fl_status_name(st), fl_last_error_message());
  std::abort();
}

inline fl_status_t noop(fl_instr_ctx_t*, void*) { return FL_OK; }

inline void submit(fl_stream_t* s, const fl_operand_t* ops, uint64_t n, uint64_t flags = 0) {
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = noop;
  in.operands = ops;
  in.num_operands = n;
  in.flags = flags;
  check(fl_submit_host(s, &in, nullptr), "fl_submit_host");
}

// An engine with `workers` host workers and lanes 0..7 (host streams, CPU); `window` is the
// in-flight limit (0: the default, 4096). Objects made by object() are released before
// the engine is destroyed. `submit_flags` go with every submission of the shapes below
// (FL_SUBMIT_INLINE for the inline variants).
struct FlEngine {
  fl_engine_t* e = nullptr;
  uint64_t submit_flags = 0;
  std::vector<fl_stream_t*> lanes;
  std::vector<fl_object_t*> objects;

  explicit FlEngine(int workers, uint64_t window = 0) {
    fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
    d.num_workers = uint64_t(workers);
    d.max_lanes = 8;
    d.inflight_limit = window;
    check(fl_engine_create(&d, &e), "fl_engine_create");
    for (uint32_t l = 0; l < 8; ++l) {
      fl_stream_t* s;
      check(fl_stream_get(e, l, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST, &s), "fl_stream_get");
      lanes.push_back(s);
    }
  }
  FlEngine(const FlEngine&) = delete;
  FlEngine& operator=(const FlEngine&) = delete;
  ~FlEngine() {
    check(fl_engine_synchronize(e), "fl_engine_synchronize");
    for (fl_object_t* o : objects) check(fl_object_release(o), "fl_object_release");
    check(fl_engine_destroy(e), "fl_engine_destroy");
  }
  fl_object_t* object() {
    fl_object_t* o;
    check(fl_object_create(e, nullptr, nullptr, &o), "fl_object_create");
    objects.push_back(o);
    return o;
  }
  // The i-th object of the shapes below, the same one on every call.
  fl_object_t* shape_object(size_t i) {
    while (objects.size() <= i) object();
    return objects[i];
  }
  fl_engine_stats_t stats() const {
    fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
    check(fl_engine_stats(e, &st), "fl_engine_stats");
    return st;
  }
};

// --- workload shapes: each submits about n instructions and returns how many exactly ---

// No operands: nothing orders the instructions but their lane; round robin over `lanes`.
inline int independent(FlEngine& f, int n, int lanes) {
  for (int k = 0; k < n; ++k) submit(f.lanes[size_t(k % lanes)], nullptr, 0, f.submit_flags);
  return n;
}

// Every instruction read-writes one object, on lanes 0, 1, 0, ...: each depends on the
// previous one, which ran on the other lane.
inline int chain_two_lanes(FlEngine& f, int n) {
  fl_operand_t op{f.shape_object(0), FL_READ_WRITE, 0};
  for (int k = 0; k < n; ++k) submit(f.lanes[size_t(k & 1)], &op, 1, f.submit_flags);
  return n;
}

// Rounds of: one producer writes X (lane 0); kFan instructions on 8 lanes each read X and
// write their Y_i; one join reads every Y_i (lane 0). kFan + 2 instructions per round.
inline int fan_out_in(FlEngine& f, int n) {
  fl_object_t* x = f.shape_object(0);
  fl_operand_t join[kFan];
  for (int i = 0; i < kFan; ++i) join[i] = fl_operand_t{f.shape_object(size_t(1 + i)), FL_READ, 0};
  const int rounds = n / (kFan + 2);
  for (int r = 0; r < rounds; ++r) {
    fl_operand_t wx{x, FL_WRITE, 0};
    submit(f.lanes[0], &wx, 1, f.submit_flags);
    for (int i = 0; i < kFan; ++i) {
      fl_operand_t ops[2] = {{x, FL_READ, 0}, {join[i].object, FL_WRITE, 0}};
      submit(f.lanes[size_t(i & 7)], ops, 2, f.submit_flags);
    }
    submit(f.lanes[0], join, kFan, f.submit_flags);
  }
  return rounds * (kFan + 2);
}

// Occupies `workers` workers (at most 8) until gate.release(): one gate instruction each,
// without operands, on lanes 0..workers-1 (so what those lanes get next queues behind
// them); returns once every one of them runs.
inline void hold_workers(FlEngine& f, Gate& gate, int workers) {
  if (workers < 1 || workers > int(f.lanes.size())) std::abort();
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = [](fl_instr_ctx_t*, void* g) {
    static_cast<Gate*>(g)->hold();
    return FL_OK;
  };
  in.user_data = &gate;
  in.name = "gate";
  for (int w = 0; w < workers; ++w) check(fl_submit_host(f.lanes[size_t(w)], &in, nullptr), "fl_submit_host (gate)");
  gate.wait_held(workers);
}

// Submits one batch (`batch()` returns its size) per iteration and waits for the engine;
// afterwards checks that every instruction submitted completed, none failed.
template <class Batch>
void run_batches(benchmark::State& state, FlEngine& f, Batch batch) {
  const fl_engine_stats_t before = f.stats();
  int per_iter = 0;
  for (auto _ : state) {
    per_iter = batch();
    check(fl_engine_synchronize(f.e), "fl_engine_synchronize");
  }
  const fl_engine_stats_t after = f.stats();
  const uint64_t expected = uint64_t(state.iterations()) * uint64_t(per_iter);
  if (after.submitted - before.submitted != expected || after.completed - before.completed != expected ||
      after.failed != before.failed) {
    std::fprintf(stderr, "flowlane ran %llu of %llu instructions (%llu failed)\n",
                 (unsigned long long)(after.completed - before.completed), (unsigned long long)expected,
                 (unsigned long long)(after.failed - before.failed));
    std::abort();
  }
  finish(state, per_iter);
}

}  // namespace flbench
