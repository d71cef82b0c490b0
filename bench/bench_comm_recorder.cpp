// The cost of the communicator flight recorder (comm/recorder.hpp) on the collective path,
// against the recorder it replaced, and in proportion to a whole collective; in one binary
// so that ratios come from one run.
//
//   RecorderCollective      the writes one collective makes: queued (its parts, fingerprint,
//                           name), set_instr, issued, finished; a ring of the default size
//   DequeRecorderCollective the recorder before it (a std::deque of records holding the
//                           signature as a std::string built per collective, state words,
//                           32 records), reproduced here as the peer: what it cost per
//                           collective
//   RecorderRead            one lock-free read of a record (what a dump pays per record)
//   HostCollective2Ranks    a whole all-reduce of 4 floats between two host-fake ranks (two
//                           engines) through the public C API, submitted in batches of 256
//                           and waited for: what the recorder's cost is a fraction of
#include <benchmark/benchmark.h>

#include <deque>
#include <string>
#include <vector>

#include "comm/comm.hpp"
#include "comm/recorder.hpp"
#include "flowlane/flowlane.h"

namespace fc = flowlane::comm;

namespace {

std::vector<fl_coll_part_t> one_part() {
  fl_coll_part_t p{};
  p.op = FL_COLL_ALL_REDUCE;
  p.dtype = FL_DTYPE_FLOAT32;
  p.redop = FL_REDOP_SUM;
  p.count = 1 << 14;
  return {p};
}

void RecorderCollective(benchmark::State& st) {
  fc::FlightRecorder r(fc::FlightRecorder::kDefaultSize);
  const auto parts = one_part();
  uint64_t seq = 0;
  for (auto _ : st) {
    ++seq;
    r.queued(seq, parts, "grad.bucket3", int64_t(seq));
    r.set_instr(seq, seq);
    r.issued(seq, int64_t(seq));
    r.finished(seq, fc::CollState::kCompleted, FL_OK, int64_t(seq));
  }
  benchmark::DoNotOptimize(r.succeeded());
}
BENCHMARK(RecorderCollective);

// The recorder before this one (comm.hpp at 74a09b3), as the peer.
struct OldRecord {
  uint64_t seq = 0;
  fl_instr_id instr = 0;
  std::string signature;
  const char* state = "issued";
  int64_t t_issued_ns = 0, t_started_ns = -1, t_done_ns = -1;
};
struct OldRecorder {
  static constexpr size_t kSize = 32;
  std::deque<OldRecord> records;
  void push(uint64_t seq, std::string sig, int64_t t) {
    OldRecord r;
    r.seq = seq;
    r.signature = std::move(sig);
    r.t_issued_ns = t;
    records.push_back(std::move(r));
    if (records.size() > kSize) records.pop_front();
  }
  OldRecord* find(uint64_t seq) {
    if (records.empty() || seq < records.front().seq) return nullptr;
    size_t k = size_t(seq - records.front().seq);
    return k < records.size() ? &records[k] : nullptr;
  }
};

void DequeRecorderCollective(benchmark::State& st) {
  OldRecorder r;
  const auto parts = one_part();
  uint64_t seq = 0;
  for (auto _ : st) {
    ++seq;
    r.push(seq, fc::signature(parts), int64_t(seq));  // the signature string was built per submission
    if (auto* x = r.find(seq)) x->instr = seq;
    if (auto* x = r.find(seq)) {
      x->state = "waiting";
      x->t_started_ns = int64_t(seq);
    }
    if (auto* x = r.find(seq)) {
      x->state = "done";
      x->t_done_ns = int64_t(seq);
    }
  }
  benchmark::DoNotOptimize(r.records.size());
}
BENCHMARK(DequeRecorderCollective);

void RecorderRead(benchmark::State& st) {
  fc::FlightRecorder r(1024);
  const auto parts = one_part();
  for (uint64_t s = 1; s <= 1024; ++s) r.queued(s, parts, "grad", int64_t(s));
  fc::CollRecord rec;
  uint64_t seq = 0;
  for (auto _ : st) {
    seq = seq % 1024 + 1;
    benchmark::DoNotOptimize(r.read(seq, rec));
  }
}
BENCHMARK(RecorderRead);

void HostCollective2Ranks(benchmark::State& st) {
  constexpr int kBatch = 256;
  fl_comm_unique_id_t id;
  fl_comm_get_unique_id(FL_COMM_HOST_FAKE, &id);
  fl_engine_t* e[2];
  fl_comm_t* c[2];
  fl_stream_t* s[2];
  float buf[2][4] = {};
  for (int r = 0; r < 2; ++r) {
    fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
    d.num_workers = 1;
    d.max_lanes = 2;
    fl_engine_create(&d, &e[r]);
    fl_comm_desc_t cd = FL_COMM_DESC_INIT;
    cd.nranks = 2;
    cd.rank = uint64_t(r);
    cd.lane = 1;
    cd.backend = FL_COMM_HOST_FAKE;
    if (fl_comm_create(e[r], &cd, &id, &c[r]) != FL_OK) st.SkipWithError(fl_last_error_message());
    fl_device_t cpu{FL_DEVICE_CPU, 0};
    fl_stream_get(e[r], 1, cpu, FL_STREAM_COLLECTIVE, &s[r]);
  }
  for (auto _ : st) {
    for (int k = 0; k < kBatch; ++k)
      for (int r = 0; r < 2; ++r) {
        fl_coll_part_t p{};
        p.op = FL_COLL_ALL_REDUCE;
        p.dtype = FL_DTYPE_FLOAT32;
        p.sendbuf = buf[r];
        p.recvbuf = buf[r];
        p.count = 4;
        fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
        in.parts = &p;
        in.num_parts = 1;
        fl_submit_collective(s[r], c[r], &in, nullptr);
      }
    for (int r = 0; r < 2; ++r) fl_engine_synchronize(e[r]);
  }
  st.SetItemsProcessed(int64_t(st.iterations()) * kBatch);  // collectives
  for (int r = 0; r < 2; ++r) fl_engine_destroy(e[r]);
}
BENCHMARK(HostCollective2Ranks)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
