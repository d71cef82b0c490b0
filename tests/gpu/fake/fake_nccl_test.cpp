// FL_COMM_NCCL against the fake NCCL (fake_nccl.cpp) and the fake CUDA runtime
// (fake_cudart.cpp), on a machine without a GPU: every rank is an engine of this process
// with a communicator made from one unique id. Built and run by tests/gpu/fake/run.sh.
// Passing here says flowlane drives NCCL correctly — values, sequence numbers, the
// engine-wide collective order, what a skipped collective does, abort on destroy and on
// asynchronous errors — against a model of NCCL; it says nothing about NCCL itself.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "flowlane/flowlane.h"
#include "test_util.hpp"

extern "C" {
void fake_nccl_set_thread_gpu(int gpu);
long fake_nccl_counter(const char* name);
size_t fake_nccl_report(char* buf, size_t size);
void fake_nccl_reset();
}

namespace {

using fltest::R;
using fltest::W;

constexpr fl_device_t kGpu{FL_DEVICE_CUDA, 0};
constexpr fl_device_t kCpu{FL_DEVICE_CPU, 0};

std::string report() {
  std::string s(fake_nccl_report(nullptr, 0) + 1, '\0');
  fake_nccl_report(s.data(), s.size());
  s.resize(s.size() - 1);
  return s;
}

// Waits for a condition another thread makes true; gives up after 60 s so a broken
// engine fails the test instead of hanging it (not a timing assertion).
template <class F>
bool eventually(F f) {
  auto deadline = fltest::Clock::now() + std::chrono::seconds(60);
  while (!f()) {
    if (fltest::Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

fl_engine_t* make_engine(uint64_t workers = 2) {
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = workers;
  fl_engine_t* e = nullptr;
  EXPECT_EQ(fl_engine_create(&d, &e), FL_OK) << fl_last_error_message();
  return e;
}

fl_stream_t* stream(fl_engine_t* e, uint32_t lane, fl_device_t dev, fl_stream_kind_t kind) {
  fl_stream_t* s = nullptr;
  EXPECT_EQ(fl_stream_get(e, lane, dev, kind, &s), FL_OK) << fl_last_error_message();
  return s;
}

fl_comm_unique_id_t nccl_id() {
  fl_comm_unique_id_t id;
  EXPECT_EQ(fl_comm_get_unique_id(FL_COMM_NCCL, &id), FL_OK) << fl_last_error_message();
  return id;
}

fl_comm_desc_t desc(uint64_t nranks, uint64_t rank, uint64_t lane, uint64_t flags = 0) {
  fl_comm_desc_t d = FL_COMM_DESC_INIT;
  d.flags = flags;
  d.nranks = nranks;
  d.rank = rank;
  d.lane = lane;
  d.device = 0;
  d.backend = FL_COMM_NCCL;
  return d;
}

// Rank r's communicator on engines[r], every rank on its own thread (fl_comm_create
// returns once every rank joined, as NCCL's init does).
std::vector<fl_comm_t*> make_comms(const std::vector<fl_engine_t*>& engines, uint32_t lane, uint64_t flags = 0) {
  const fl_comm_unique_id_t id = nccl_id();
  const size_t n = engines.size();
  std::vector<fl_comm_t*> comms(n, nullptr);
  std::vector<fl_status_t> st(n, FL_OK);
  std::vector<std::string> msg(n);
  std::vector<std::thread> th;
  for (size_t r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      fl_comm_desc_t d = desc(n, r, lane, flags);
      st[r] = fl_comm_create(engines[r], &d, &id, &comms[r]);
      msg[r] = fl_last_error_message();
    });
  for (auto& t : th) t.join();
  for (size_t r = 0; r < n; ++r) EXPECT_EQ(st[r], FL_OK) << "rank " << r << ": " << msg[r];
  return comms;
}

fl_coll_part_t part(uint32_t op, uint32_t dtype, const void* send, void* recv, uint64_t count, uint32_t peer = 0,
                    uint32_t redop = FL_REDOP_SUM) {
  return fltest::coll_part(op, dtype, send, recv, count, redop, peer);
}

fl_status_t coll(fl_engine_t* e, uint32_t lane, fl_comm_t* c, std::vector<fl_coll_part_t> parts,
                 std::vector<fl_operand_t> ops = {}, const char* name = "coll") {
  fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
  in.parts = parts.data();
  in.num_parts = parts.size();
  in.operands = ops.empty() ? nullptr : ops.data();
  in.num_operands = ops.size();
  in.name = name;
  return fl_submit_collective(stream(e, lane, kGpu, FL_STREAM_COLLECTIVE), c, &in, nullptr);
}

// N ranks: one engine each and a communicator on `lane`; torn down at scope exit.
struct Ranks {
  std::vector<fl_engine_t*> e;
  std::vector<fl_comm_t*> c;
  Ranks(size_t n, uint32_t lane, uint64_t workers = 2) {
    for (size_t r = 0; r < n; ++r) e.push_back(make_engine(workers));
    c = make_comms(e, lane);
  }
  ~Ranks() {
    for (fl_comm_t* x : c) {
      if (x) {
        EXPECT_EQ(fl_comm_destroy(x), FL_OK) << fl_last_error_message();
      }
    }
    for (fl_engine_t* x : e)
      if (x) fl_engine_destroy(x);
  }
  size_t size() const { return e.size(); }
};

class FakeNccl : public ::testing::Test {
 protected:
  long live_before = 0;
  void SetUp() override {
    fake_nccl_reset();
    live_before = fake_nccl_counter("live_comms");
  }
  void TearDown() override {
    EXPECT_EQ(fake_nccl_counter("misuses"), 0) << report();
    EXPECT_EQ(fake_nccl_counter("live_comms"), live_before) << "NCCL communicators leaked\n" << report();
    EXPECT_EQ(fake_nccl_counter("waiting"), 0) << "NCCL kernels left waiting\n" << report();
  }
};

class FakeNcclRanks : public FakeNccl, public ::testing::WithParamInterface<int> {};

// ---------------------------------------------------------------------------------------

TEST_P(FakeNcclRanks, EveryCollectiveGivesTheRightValues) {
  const int n = GetParam();
  Ranks rk(size_t(n), 1);
  constexpr int kC = 5;
  struct Bufs {
    std::vector<float> ar_s, ar_r, rs_s, rs_r, ip;
    std::vector<int32_t> mx_s, mx_r, ag_s, ag_r, ring_s, ring_r;
    std::vector<int64_t> pr_s, pr_r, bc;
    std::vector<double> mn_s, mn_r;
    std::vector<uint16_t> h_s, h_r, b_s, b_r;
  };
  std::vector<Bufs> b(static_cast<size_t>(n));
  std::vector<fl_object_t*> outs;
  for (int r = 0; r < n; ++r) {
    Bufs& x = b[size_t(r)];
    for (int k = 0; k < kC; ++k) {
      x.ar_s.push_back(float(r + 1 + k));
      x.mx_s.push_back(r * 10 - k);
      x.pr_s.push_back(r + 2);
      x.mn_s.push_back(double(r) - 0.5 * k);
      x.ip.push_back(float(r));
    }
    for (int k = 0; k < 2 * n; ++k) x.rs_s.push_back(float(r * 100 + k));
    x.ag_s = {r, r + 1, r + 2};
    x.bc.assign(4, r == n - 1 ? 77 + r : -1);
    x.ring_s = {1000 + r, 2000 + r};
    // float16 1.0 * (r + 1) and bfloat16 likewise (small integers are exact in both)
    const float v = float(r + 1);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    x.b_s.assign(kC, uint16_t(bits >> 16));
    int e = 0;
    float m = std::frexp(v, &e);  // v = m * 2^e, m in [0.5, 1)
    x.h_s.assign(kC, uint16_t(((e - 1 + 15) << 10) | (uint32_t((m * 2 - 1) * 1024) & 0x3ff)));
    x.ar_r.assign(kC, 0);
    x.mx_r.assign(kC, 0);
    x.pr_r.assign(kC, 0);
    x.mn_r.assign(kC, 0);
    x.rs_r.assign(2, 0);
    x.ag_r.assign(size_t(3 * n), 0);
    x.ring_r.assign(2, 0);
    x.h_r.assign(kC, 0);
    x.b_r.assign(kC, 0);
  }
  for (int r = 0; r < n; ++r) {
    Bufs& x = b[size_t(r)];
    fl_engine_t* e = rk.e[size_t(r)];
    fl_comm_t* c = rk.c[size_t(r)];
    fl_object_t* o = fltest::make_obj(e);
    outs.push_back(o);
    const uint32_t next = uint32_t((r + 1) % n), prev = uint32_t((r + n - 1) % n);
    ASSERT_FL_OK(coll(e, 1, c, {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, x.ar_s.data(), x.ar_r.data(), kC)}, {W(o)}));
    ASSERT_FL_OK(coll(e, 1, c,
                      {part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT32, x.mx_s.data(), x.mx_r.data(), kC, 0, FL_REDOP_MAX)}));
    ASSERT_FL_OK(coll(e, 1, c,
                      {part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT64, x.pr_s.data(), x.pr_r.data(), kC, 0, FL_REDOP_PROD)}));
    ASSERT_FL_OK(coll(e, 1, c,
                      {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT64, x.mn_s.data(), x.mn_r.data(), kC, 0, FL_REDOP_MIN)}));
    ASSERT_FL_OK(coll(e, 1, c, {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT16, x.h_s.data(), x.h_r.data(), kC)}));
    ASSERT_FL_OK(coll(e, 1, c, {part(FL_COLL_ALL_REDUCE, FL_DTYPE_BFLOAT16, x.b_s.data(), x.b_r.data(), kC)}));
    ASSERT_FL_OK(coll(e, 1, c, {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, x.ip.data(), x.ip.data(), kC)}));  // in place
    ASSERT_FL_OK(coll(e, 1, c, {part(FL_COLL_ALL_GATHER, FL_DTYPE_INT32, x.ag_s.data(), x.ag_r.data(), 3)}));
    ASSERT_FL_OK(coll(e, 1, c, {part(FL_COLL_REDUCE_SCATTER, FL_DTYPE_FLOAT32, x.rs_s.data(), x.rs_r.data(), 2)}));
    ASSERT_FL_OK(coll(e, 1, c, {part(FL_COLL_BROADCAST, FL_DTYPE_INT64, x.bc.data(), x.bc.data(), 4, uint32_t(n - 1))}));
    // A ring exchange: send and recv grouped in one instruction (one NCCL group).
    ASSERT_FL_OK(coll(e, 1, c,
                      {part(FL_COLL_SEND, FL_DTYPE_INT32, x.ring_s.data(), nullptr, 2, next),
                       part(FL_COLL_RECV, FL_DTYPE_INT32, nullptr, x.ring_r.data(), 2, prev)}));
  }
  for (int r = 0; r < n; ++r) ASSERT_FL_OK(fl_engine_synchronize(rk.e[size_t(r)]));
  for (int r = 0; r < n; ++r) {
    const Bufs& x = b[size_t(r)];
    for (int k = 0; k < kC; ++k) {
      float sum = 0, ip = 0;
      int32_t mx = INT32_MIN;
      int64_t pr = 1;
      double mn = 1e300;
      for (int q = 0; q < n; ++q) {
        sum += float(q + 1 + k);
        ip += float(q);
        mx = std::max<int32_t>(mx, q * 10 - k);
        pr *= q + 2;
        mn = std::min(mn, double(q) - 0.5 * k);
      }
      EXPECT_EQ(x.ar_r[size_t(k)], sum) << "rank " << r << " all_reduce sum at " << k;
      EXPECT_EQ(x.mx_r[size_t(k)], mx) << "rank " << r << " all_reduce max at " << k;
      EXPECT_EQ(x.pr_r[size_t(k)], pr) << "rank " << r << " all_reduce prod at " << k;
      EXPECT_EQ(x.mn_r[size_t(k)], mn) << "rank " << r << " all_reduce min at " << k;
      EXPECT_EQ(x.ip[size_t(k)], ip) << "rank " << r << " in-place all_reduce at " << k;
      const float tri = float(n * (n + 1) / 2);
      uint32_t bb = uint32_t(x.b_r[size_t(k)]) << 16;
      float bf;
      std::memcpy(&bf, &bb, 4);
      EXPECT_EQ(bf, tri) << "rank " << r << " bfloat16 sum";
      const uint16_t h = x.h_r[size_t(k)];
      float hf = std::ldexp(1.0f + float(h & 0x3ff) / 1024.0f, int((h >> 10) & 0x1f) - 15);
      EXPECT_EQ(hf, tri) << "rank " << r << " float16 sum";
    }
    for (int q = 0; q < n; ++q)
      for (int k = 0; k < 3; ++k) EXPECT_EQ(x.ag_r[size_t(q * 3 + k)], q + k) << "rank " << r << " all_gather";
    for (int k = 0; k < 2; ++k) {
      float s = 0;
      for (int q = 0; q < n; ++q) s += float(q * 100 + r * 2 + k);
      EXPECT_EQ(x.rs_r[size_t(k)], s) << "rank " << r << " reduce_scatter at " << k;
    }
    for (int k = 0; k < 4; ++k) EXPECT_EQ(x.bc[size_t(k)], 77 + n - 1) << "rank " << r << " broadcast";
    const int prev = (r + n - 1) % n;
    EXPECT_EQ(x.ring_r[0], 1000 + prev) << "rank " << r << " recv";
    EXPECT_EQ(x.ring_r[1], 2000 + prev) << "rank " << r << " recv";
  }
  EXPECT_EQ(fake_nccl_counter("mismatches"), 0) << report();
  for (fl_object_t* o : outs) fl_object_release(o);
}

TEST_P(FakeNcclRanks, ManyCollectivesInARowStayInStep) {
  const int n = GetParam();
  const int kCount = int(fl_scaled(300, 60));
  Ranks rk(size_t(n), 2);
  // Collective i: all_reduce of count 1 + i % 5 (even i) or all_gather of 2 (odd i); a
  // rank that fell out of step would pair different signatures (a fake-NCCL mismatch) or
  // wrong values.
  std::vector<std::vector<std::vector<int32_t>>> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    send[size_t(r)].resize(size_t(kCount));
    recv[size_t(r)].resize(size_t(kCount));
    for (int i = 0; i < kCount; ++i) {
      size_t c = i % 2 == 0 ? size_t(1 + i % 5) : 2;
      for (size_t k = 0; k < c; ++k) send[size_t(r)][size_t(i)].push_back(r * 1000 + i + int(k));
      recv[size_t(r)][size_t(i)].assign(i % 2 == 0 ? c : c * size_t(n), -1);
    }
  }
  const long ops_before = fake_nccl_counter("ops");
  for (int i = 0; i < kCount; ++i)
    for (int r = 0; r < n; ++r) {
      auto& s = send[size_t(r)][size_t(i)];
      auto& d = recv[size_t(r)][size_t(i)];
      uint32_t op = i % 2 == 0 ? FL_COLL_ALL_REDUCE : FL_COLL_ALL_GATHER;
      ASSERT_FL_OK(coll(rk.e[size_t(r)], 2, rk.c[size_t(r)], {part(op, FL_DTYPE_INT32, s.data(), d.data(), s.size())}));
    }
  for (int r = 0; r < n; ++r) ASSERT_FL_OK(fl_engine_synchronize(rk.e[size_t(r)]));
  EXPECT_EQ(fake_nccl_counter("mismatches"), 0) << report();
  EXPECT_EQ(fake_nccl_counter("ops") - ops_before, kCount);
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < kCount; ++i) {
      const auto& d = recv[size_t(r)][size_t(i)];
      if (i % 2 == 0) {
        for (size_t k = 0; k < d.size(); ++k) {
          int32_t want = 0;
          for (int q = 0; q < n; ++q) want += q * 1000 + i + int(k);
          ASSERT_EQ(d[k], want) << "rank " << r << " collective " << i;
        }
      } else {
        for (int q = 0; q < n; ++q)
          for (size_t k = 0; k < 2; ++k) ASSERT_EQ(d[size_t(q) * 2 + k], q * 1000 + i + int(k)) << "rank " << r;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Ranks, FakeNcclRanks, ::testing::Values(2, 4));

// The 3-D parallel scenario (comm/README.md, "One order"): every rank has two communicators, X on
// lane 1 and Y on lane 2, and submits X's collective before Y's. Their inputs come from
// host producers that finish at different times on different ranks: on rank 0 Y's input
// is ready first, on rank 1 X's. Issued in readiness order, rank 0 would start Y and rank 1
// X; with one NCCL kernel per GPU at a time each waits for the other forever (the fake
// reports it as a deadlock). The engine-wide collective order makes every rank issue X
// first.
TEST_F(FakeNccl, TwoCommunicatorsOnTwoLanesIssueInSubmissionOrder) {
  std::vector<fl_engine_t*> e{make_engine(4), make_engine(4)};
  std::vector<fl_comm_t*> cx = make_comms(e, 1);
  std::vector<fl_comm_t*> cy = make_comms(e, 2);
  fltest::Gate gate_x[2], gate_y[2];
  std::vector<std::vector<float>> xs(2), xr(2), ys(2), yr(2);
  std::vector<fl_object_t*> objs;
  for (int r = 0; r < 2; ++r) {
    xs[size_t(r)].assign(4, 0);
    ys[size_t(r)].assign(4, 0);
    xr[size_t(r)].assign(4, -1);
    yr[size_t(r)].assign(4, -1);
    fl_object_t* ix = fltest::make_obj(e[size_t(r)]);
    fl_object_t* iy = fltest::make_obj(e[size_t(r)]);
    objs.insert(objs.end(), {ix, iy});
    float* px = xs[size_t(r)].data();
    float* py = ys[size_t(r)].data();
    fltest::Gate* gx = &gate_x[r];
    fltest::Gate* gy = &gate_y[r];
    fltest::submit(stream(e[size_t(r)], 3, kCpu, FL_STREAM_HOST), [gx, px, r] {
      if (!gx->wait()) return FL_ERR_TIMEOUT;
      for (int k = 0; k < 4; ++k) px[k] = float(r + 1);
      return FL_OK;
    }, {W(ix)}, "produce x");
    ASSERT_FL_OK(coll(e[size_t(r)], 1, cx[size_t(r)], {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, px, xr[size_t(r)].data(), 4)},
                      {R(ix)}, "X"));
    fltest::submit(stream(e[size_t(r)], 4, kCpu, FL_STREAM_HOST), [gy, py, r] {
      if (!gy->wait()) return FL_ERR_TIMEOUT;
      for (int k = 0; k < 4; ++k) py[k] = float(10 * (r + 1));
      return FL_OK;
    }, {W(iy)}, "produce y");
    ASSERT_FL_OK(coll(e[size_t(r)], 2, cy[size_t(r)], {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, py, yr[size_t(r)].data(), 4)},
                      {R(iy)}, "Y"));
  }
  gate_y[0].open = true;  // rank 0: Y's input first
  gate_x[1].open = true;  // rank 1: X's input first
  // Rank 1's X is on its GPU, waiting for rank 0's X (in either order of issue).
  ASSERT_TRUE(eventually([] { return fake_nccl_counter("waiting") >= 1; }));
  gate_x[0].open = true;
  gate_y[1].open = true;
  for (fl_engine_t* x : e) EXPECT_EQ(fl_engine_synchronize(x), FL_OK) << fl_last_error_message() << "\n" << report();
  EXPECT_EQ(fake_nccl_counter("deadlocks"), 0) << report();
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(xr[size_t(r)][size_t(k)], 3.0f) << "rank " << r;
      EXPECT_EQ(yr[size_t(r)][size_t(k)], 30.0f) << "rank " << r;
    }
  for (fl_object_t* o : objs) fl_object_release(o);
  for (int r = 0; r < 2; ++r) {
    EXPECT_FL_OK(fl_comm_destroy(cx[size_t(r)]));
    EXPECT_FL_OK(fl_comm_destroy(cy[size_t(r)]));
    fl_engine_destroy(e[size_t(r)]);
  }
}

// The harness can see the failure the order prevents: the same cross order issued to NCCL
// directly (no flowlane) is reported as a deadlock, and aborting frees the kernels.
TEST_F(FakeNccl, FakeReportsCrossOrderedCollectivesAsADeadlock) {
  ncclUniqueId idx, idy;
  ASSERT_EQ(ncclGetUniqueId(&idx), ncclSuccess);
  ASSERT_EQ(ncclGetUniqueId(&idy), ncclSuccess);
  ncclComm_t x[2], y[2];
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(ncclCommInitRankConfig(&x[r], 2, idx, r, &cfg), ncclInProgress);
    ASSERT_EQ(ncclCommInitRankConfig(&y[r], 2, idy, r, &cfg), ncclInProgress);
  }
  auto ready = [](ncclComm_t c) {
    ncclResult_t s = ncclInProgress;
    return eventually([&] { return ncclCommGetAsyncError(c, &s) == ncclSuccess && s != ncclInProgress; }) && s == ncclSuccess;
  };
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(ready(x[r]) && ready(y[r]));
  cudaStream_t s[4];
  for (auto& st : s) ASSERT_EQ(cudaStreamCreateWithPriority(&st, cudaStreamNonBlocking, 0), cudaSuccess);
  float buf[8] = {};
  auto issue = [&](ncclComm_t c, cudaStream_t st, long waiting) {
    EXPECT_EQ(ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, c, st), ncclInProgress);
    if (waiting < 4) {  // the last one may already see the deadlock's error
      EXPECT_TRUE(ready(c));
    }
    EXPECT_TRUE(eventually([&] { return fake_nccl_counter("waiting") >= waiting; }));
  };
  issue(y[0], s[0], 1);  // rank 0 starts Y: holds GPU 0
  issue(x[1], s[1], 2);  // rank 1 starts X: holds GPU 1
  issue(x[0], s[2], 3);  // rank 0's X waits for GPU 0
  issue(y[1], s[3], 4);  // rank 1's Y waits for GPU 1: a cycle
  EXPECT_TRUE(eventually([] { return fake_nccl_counter("deadlocks") == 1; })) << report();
  ncclResult_t async = ncclSuccess;
  EXPECT_EQ(ncclCommGetAsyncError(x[0], &async), ncclSuccess);
  EXPECT_EQ(async, ncclInternalError);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ncclCommAbort(x[r]), ncclSuccess);
    EXPECT_EQ(ncclCommAbort(y[r]), ncclSuccess);
  }
  for (auto& st : s) EXPECT_EQ(cudaStreamDestroy(st), cudaSuccess);  // joins: every kernel returned
  // Every kernel returned. X's two are always cut (x[0] never got its GPU, so x[1]'s peer
  // never posts). Y's two may complete instead: an abort only flags the communicator, and
  // once x[1] is cut and frees GPU 1, y[1] can start before its own abort and meet a y[0]
  // whose kernel has not yet seen its flag (seen under TSan, 1 run in ~35).
  const long cut = fake_nccl_counter("aborted_kernels");
  EXPECT_GE(cut, 2);
  EXPECT_EQ(cut + fake_nccl_counter("launches"), 4);
  fake_nccl_reset();
}

TEST_F(FakeNccl, MismatchedCollectivesFailOnEveryRankInsteadOfHanging) {
  Ranks rk(2, 1);
  std::vector<float> a(8, 1), b(8, 1), ra(8), rb(8);
  fl_object_t* oa = fltest::make_obj(rk.e[0]);
  fl_object_t* ob = fltest::make_obj(rk.e[1]);
  ASSERT_FL_OK(coll(rk.e[0], 1, rk.c[0], {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, a.data(), ra.data(), 4)}, {W(oa)}));
  ASSERT_FL_OK(coll(rk.e[1], 1, rk.c[1], {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, b.data(), rb.data(), 8)}, {W(ob)}));
  EXPECT_FL_ERR(fl_object_wait(oa, FL_READ), FL_ERR_NCCL, "seq 1");
  EXPECT_FL_ERR(fl_object_wait(ob, FL_READ), FL_ERR_NCCL, "NCCL communicator");
  EXPECT_EQ(fake_nccl_counter("mismatches"), 1) << report();
  // Both communicators were aborted: later collectives are refused at launch.
  ASSERT_FL_OK(coll(rk.e[0], 1, rk.c[0], {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, a.data(), ra.data(), 4)}, {W(oa)}));
  EXPECT_FL_ERR(fl_object_wait(oa, FL_READ), FL_ERR_NCCL, "was not issued");
  fl_object_release(oa);
  fl_object_release(ob);
  (void)fl_engine_synchronize(rk.e[0]);
  (void)fl_engine_synchronize(rk.e[1]);
}

// A collective skipped for a poisoned input never reaches NCCL. Its peers must not wait
// for it forever, and this rank's next collective must not pair with the peers' skipped one.
TEST_F(FakeNccl, SkippedCollectiveBreaksItsCommunicatorAndPeersFail) {
  Ranks rk(2, 1, 3);
  std::vector<float> s0(4, 1), s1(4, 1), r0(4), r1(4);
  fl_object_t* in0 = fltest::make_obj(rk.e[0]);
  fl_object_t* out0 = fltest::make_obj(rk.e[0]);
  fl_object_t* out1 = fltest::make_obj(rk.e[1]);
  fltest::submit(stream(rk.e[0], 2, kCpu, FL_STREAM_HOST), [](fl_instr_ctx_t* ctx) {
    fl_instr_set_error(ctx, "producer failed on purpose");
    return FL_ERR_INSTRUCTION_FAILED;
  }, {W(in0)}, "producer");
  ASSERT_FL_OK(coll(rk.e[0], 1, rk.c[0], {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, s0.data(), r0.data(), 4)},
                    {R(in0), W(out0)}, "skipped"));
  ASSERT_FL_OK(coll(rk.e[1], 1, rk.c[1], {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, s1.data(), r1.data(), 4)}, {W(out1)},
                    "peer"));
  EXPECT_FL_ERR(fl_object_wait(out0, FL_READ), FL_ERR_DEPENDENCY_FAILED, "producer failed on purpose");
  EXPECT_FL_ERR(fl_object_wait(out1, FL_READ), FL_ERR_NCCL, "seq 1");
  // Rank 0's next collective is not issued (it would pair with rank 1's seq 1).
  ASSERT_FL_OK(coll(rk.e[0], 1, rk.c[0], {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, s0.data(), r0.data(), 4)}, {W(out0)},
                    "after"));
  EXPECT_FL_ERR(fl_object_wait(out0, FL_READ), FL_ERR_CANCELLED, "seq 1");
  EXPECT_EQ(fake_nccl_counter("mismatches"), 0) << report();
  for (fl_object_t* o : {in0, out0, out1}) fl_object_release(o);
  (void)fl_engine_synchronize(rk.e[0]);
  (void)fl_engine_synchronize(rk.e[1]);
}

// fl_comm_destroy with a collective stuck on the GPU (its peer never issues it): the
// communicator is aborted, the collective fails naming its sequence number.
TEST_F(FakeNccl, DestroyingACommunicatorWithAStuckCollectiveCancelsIt) {
  Ranks rk(2, 1);
  std::vector<float> s(4, 1), r(4);
  fl_object_t* o = fltest::make_obj(rk.e[0]);
  for (int i = 0; i < 3; ++i) {  // seq 1..3 complete with the peer
    ASSERT_FL_OK(coll(rk.e[0], 1, rk.c[0], {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, s.data(), r.data(), 4)}, {W(o)}));
    ASSERT_FL_OK(coll(rk.e[1], 1, rk.c[1], {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, s.data(), r.data(), 4)}));
  }
  ASSERT_FL_OK(fl_engine_synchronize(rk.e[0]));
  ASSERT_FL_OK(fl_engine_synchronize(rk.e[1]));
  ASSERT_FL_OK(coll(rk.e[0], 1, rk.c[0], {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, s.data(), r.data(), 4)}, {W(o)}));
  ASSERT_TRUE(eventually([] { return fake_nccl_counter("waiting") == 1; }));  // on the GPU, waiting for rank 1
  ASSERT_FL_OK(fl_comm_destroy(rk.c[0]));
  EXPECT_FL_ERR(fl_object_wait(o, FL_READ), FL_ERR_CANCELLED, "seq 4");
  EXPECT_NE(std::string(fl_last_error_message()).find("fl_comm_destroy"), std::string::npos) << fl_last_error_message();
  EXPECT_EQ(fake_nccl_counter("aborted_kernels"), 1);
  EXPECT_FL_ERR(coll(rk.e[0], 1, rk.c[0], {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, s.data(), r.data(), 4)}),
                FL_ERR_INVALID_HANDLE, "stale");
  EXPECT_FL_ERR(fl_comm_destroy(rk.c[0]), FL_ERR_INVALID_HANDLE, "stale");
  rk.c[0] = nullptr;
  fl_object_release(o);
  (void)fl_engine_synchronize(rk.e[0]);
}

// Engine destroy while a collective waits on the GPU for a peer that never issues it:
// the drain finishes (the communicator is aborted), and the peer's later collective fails
// instead of waiting for the rank that left.
TEST_F(FakeNccl, EngineDestroyDoesNotHangWhenAPeerNeverComes) {
  std::vector<fl_engine_t*> e{make_engine(), make_engine()};
  std::vector<fl_comm_t*> c = make_comms(e, 1);
  std::vector<float> s(4, 1), r(4);
  ASSERT_FL_OK(coll(e[0], 1, c[0], {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, s.data(), r.data(), 4)}));
  ASSERT_TRUE(eventually([] { return fake_nccl_counter("waiting") == 1; }));
  ASSERT_FL_OK(fl_engine_destroy(e[0]));  // returns: that is the test
  EXPECT_EQ(fake_nccl_counter("aborted_kernels"), 1);
  fl_object_t* o = fltest::make_obj(e[1]);
  ASSERT_FL_OK(coll(e[1], 1, c[1], {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, s.data(), r.data(), 4)}, {W(o)}));
  EXPECT_FL_ERR(fl_object_wait(o, FL_READ), FL_ERR_NCCL, "seq 1");
  fl_object_release(o);
  // Rank 0's handle: stale once the engine aborts its communicators (the engine hook), or
  // still destroyable (without it); either way nothing leaks (TearDown).
  fl_status_t st = fl_comm_destroy(c[0]);
  EXPECT_TRUE(st == FL_OK || st == FL_ERR_INVALID_HANDLE) << fl_status_name(st) << ": " << fl_last_error_message();
  EXPECT_FL_OK(fl_comm_destroy(c[1]));
  fl_engine_destroy(e[1]);
}

// Both ranks destroy their engines while collectives are still queued or running: whatever
// completed, nothing hangs and NCCL is never misused.
TEST_F(FakeNccl, DestroyingEnginesWithCollectivesInFlightNeverHangs) {
  std::vector<fl_engine_t*> e{make_engine(), make_engine()};
  std::vector<fl_comm_t*> c = make_comms(e, 1);
  std::vector<std::vector<float>> buf(2, std::vector<float>(64, 1));
  for (int i = 0; i < 20; ++i)
    for (int r = 0; r < 2; ++r)
      ASSERT_FL_OK(coll(e[size_t(r)], 1, c[size_t(r)],
                        {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, buf[size_t(r)].data(), buf[size_t(r)].data(), 64)}));
  std::thread t([&] { EXPECT_EQ(fl_engine_destroy(e[1]), FL_OK); });
  EXPECT_EQ(fl_engine_destroy(e[0]), FL_OK);
  t.join();
  for (fl_comm_t* x : c) {
    fl_status_t st = fl_comm_destroy(x);
    EXPECT_TRUE(st == FL_OK || st == FL_ERR_INVALID_HANDLE) << fl_status_name(st) << ": " << fl_last_error_message();
  }
}

// ---- issue 33: the per-collective timeout (fl_comm_set_timeout / FLOWLANE_COMM_TIMEOUT_MS)

// Rank 1 never issues seq 2: rank 0's collective, waiting on the GPU, fails with
// FL_ERR_TIMEOUT after the timeout (its communicator aborted, the kernel returned), and
// the one queued behind it fails too; nothing leaks, nothing waits. Before issue 33 the
// timeout only wrote a dump and the collective waited until a destroy.
TEST_F(FakeNccl, TheCommTimeoutAbortsTheCommunicatorAndFailsTheCollective) {
  Ranks rk(2, 1);
  ASSERT_FL_OK(fl_comm_set_timeout(rk.c[0], 100));
  std::vector<float> s(4, 1), r(4);
  fl_object_t* a = fltest::make_obj(rk.e[0]);
  fl_object_t* b = fltest::make_obj(rk.e[0]);
  ASSERT_FL_OK(coll(rk.e[0], 1, rk.c[0], {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, s.data(), r.data(), 4)}));
  ASSERT_FL_OK(coll(rk.e[1], 1, rk.c[1], {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, s.data(), r.data(), 4)}));
  ASSERT_FL_OK(fl_engine_synchronize(rk.e[0]));
  ASSERT_FL_OK(coll(rk.e[0], 1, rk.c[0], {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, s.data(), r.data(), 4)}, {W(a)}));
  ASSERT_FL_OK(coll(rk.e[0], 1, rk.c[0], {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, s.data(), r.data(), 4)}, {W(b)}));
  // Bounded: on the old code this wait itself timed out (its message names no sequence number).
  EXPECT_FL_ERR(fl_object_wait_for(a, FL_READ, 30'000'000'000ull), FL_ERR_TIMEOUT, "seq 2");
  EXPECT_NE(std::string(fl_last_error_message()).find("timed out"), std::string::npos) << fl_last_error_message();
  const fl_status_t behind = fl_object_wait_for(b, FL_READ, 30'000'000'000ull);
  EXPECT_TRUE(behind == FL_ERR_TIMEOUT || behind == FL_ERR_CANCELLED) << fl_status_name(behind);
  EXPECT_EQ(fake_nccl_counter("waiting"), 0) << report();
  fl_object_release(a);
  fl_object_release(b);
  (void)fl_engine_synchronize(rk.e[0]);
  (void)fl_engine_synchronize(rk.e[0]);
  (void)fl_engine_synchronize(rk.e[1]);
}
// ---- end of issue 33's block

TEST_F(FakeNccl, InitTimesOutWhenAPeerNeverJoins) {
  fl_engine_t* e = make_engine();
  fl_comm_unique_id_t id = nccl_id();
  fl_comm_desc_t d = desc(2, 0, 1);
  fl_comm_t* c = nullptr;
  setenv("FLOWLANE_NCCL_INIT_TIMEOUT_MS", "50", 1);
  EXPECT_FL_ERR(fl_comm_create(e, &d, &id, &c), FL_ERR_TIMEOUT, "not every rank joined");
  unsetenv("FLOWLANE_NCCL_INIT_TIMEOUT_MS");
  EXPECT_EQ(c, nullptr);
  fl_engine_destroy(e);
}

TEST_F(FakeNccl, ErrorPathsGetSpecificStatuses) {
  Ranks rk(2, 1);
  fl_engine_t* e = rk.e[0];
  fl_comm_t* c = rk.c[0];
  fl_comm_unique_id_t id = nccl_id();
  fl_comm_t* out = nullptr;
  // fl_comm_get_unique_id / fl_comm_create
  EXPECT_FL_ERR(fl_comm_get_unique_id(FL_COMM_NCCL, nullptr), FL_ERR_INVALID_ARGUMENT, "out_id");
  fl_comm_desc_t d = desc(2, 0, 1);
  EXPECT_FL_ERR(fl_comm_create(nullptr, &d, &id, &out), FL_ERR_INVALID_HANDLE, "engine");
  EXPECT_FL_ERR(fl_comm_create(e, nullptr, &id, &out), FL_ERR_INVALID_ARGUMENT, "descriptor");
  EXPECT_FL_ERR(fl_comm_create(e, &d, nullptr, &out), FL_ERR_INVALID_ARGUMENT, "id is NULL");
  EXPECT_FL_ERR(fl_comm_create(e, &d, &id, nullptr), FL_ERR_INVALID_ARGUMENT, "out_comm");
  d = desc(0, 0, 1);
  EXPECT_FL_ERR(fl_comm_create(e, &d, &id, &out), FL_ERR_OUT_OF_RANGE, "nranks");
  d = desc(2, 2, 1);
  EXPECT_FL_ERR(fl_comm_create(e, &d, &id, &out), FL_ERR_OUT_OF_RANGE, "rank 2");
  d = desc(2, 0, 1000);
  EXPECT_FL_ERR(fl_comm_create(e, &d, &id, &out), FL_ERR_OUT_OF_RANGE, "lane 1000");
  d = desc(2, 0, 1);
  d.device = 1;
  EXPECT_FL_ERR(fl_comm_create(e, &d, &id, &out), FL_ERR_NO_DEVICE, "CUDA device 1");
  d = desc(2, 0, 1);
  d.flags = 4;
  EXPECT_FL_ERR(fl_comm_create(e, &d, &id, &out), FL_ERR_INVALID_ARGUMENT, "flags");
  d = desc(2, 0, 1);
  fl_comm_unique_id_t fake_id;
  ASSERT_FL_OK(fl_comm_get_unique_id(FL_COMM_HOST_FAKE, &fake_id));
  EXPECT_FL_ERR(fl_comm_create(e, &d, &fake_id, &out), FL_ERR_INVALID_ARGUMENT, "FL_COMM_HOST_FAKE");
  fl_comm_unique_id_t zero{};
  EXPECT_FL_ERR(fl_comm_create(e, &d, &zero, &out), FL_ERR_INVALID_ARGUMENT, "all zero");
  EXPECT_EQ(out, nullptr);
  // submit: every refused submission queues nothing and uses no sequence number.
  std::vector<float> s(4, 1), r(4);
  fl_stream_t* cs = stream(e, 1, kGpu, FL_STREAM_COLLECTIVE);
  auto submit = [&](fl_stream_t* st, fl_comm_t* cm, std::vector<fl_coll_part_t> parts, uint64_t flags = 0) {
    fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
    in.parts = parts.empty() ? nullptr : parts.data();
    in.num_parts = parts.size();
    in.flags = flags;
    return fl_submit_collective(st, cm, &in, nullptr);
  };
  const fl_coll_part_t good = part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, s.data(), r.data(), 4);
  EXPECT_FL_ERR(submit(nullptr, c, {good}), FL_ERR_INVALID_HANDLE, "stream");
  EXPECT_FL_ERR(submit(stream(e, 1, kGpu, FL_STREAM_COMPUTE), c, {good}), FL_ERR_INVALID_ARGUMENT, "COLLECTIVE stream");
  EXPECT_FL_ERR(submit(stream(e, 2, kGpu, FL_STREAM_COLLECTIVE), c, {good}), FL_ERR_INVALID_ARGUMENT, "lane 1");
  EXPECT_FL_ERR(submit(stream(rk.e[1], 1, kGpu, FL_STREAM_COLLECTIVE), c, {good}), FL_ERR_INVALID_ARGUMENT,
                "another engine");
  EXPECT_FL_ERR(submit(cs, c, {}), FL_ERR_INVALID_ARGUMENT, "num_parts is 0");
  EXPECT_FL_ERR(submit(cs, c, {good}, 8), FL_ERR_INVALID_ARGUMENT, "flags");
  EXPECT_FL_ERR(submit(cs, c, std::vector<fl_coll_part_t>(1025, good)), FL_ERR_OUT_OF_RANGE, "1025");
  EXPECT_FL_ERR(submit(cs, c, {part(0, FL_DTYPE_FLOAT32, s.data(), r.data(), 4)}), FL_ERR_INVALID_ARGUMENT, "op 0");
  EXPECT_FL_ERR(submit(cs, c, {part(7, FL_DTYPE_FLOAT32, s.data(), r.data(), 4)}), FL_ERR_INVALID_ARGUMENT, "op 7");
  EXPECT_FL_ERR(submit(cs, c, {part(FL_COLL_ALL_REDUCE, 10, s.data(), r.data(), 4)}), FL_ERR_INVALID_ARGUMENT, "dtype 10");
  EXPECT_FL_ERR(submit(cs, c, {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, s.data(), r.data(), 4, 0, 9)}),
                FL_ERR_INVALID_ARGUMENT, "redop 9");
  EXPECT_FL_ERR(submit(cs, c, {part(FL_COLL_SEND, FL_DTYPE_FLOAT32, s.data(), nullptr, 4, 2)}), FL_ERR_OUT_OF_RANGE,
                "peer 2");
  EXPECT_FL_ERR(submit(cs, c, {part(FL_COLL_BROADCAST, FL_DTYPE_FLOAT32, s.data(), r.data(), 4, 5)}), FL_ERR_OUT_OF_RANGE,
                "root 5");
  EXPECT_FL_ERR(submit(cs, c, {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, nullptr, r.data(), 4)}),
                FL_ERR_INVALID_ARGUMENT, "sendbuf");
  EXPECT_FL_ERR(submit(cs, c, {part(FL_COLL_ALL_GATHER, FL_DTYPE_FLOAT32, s.data(), nullptr, 4)}),
                FL_ERR_INVALID_ARGUMENT, "recvbuf");
  EXPECT_FL_ERR(submit(cs, c, {part(FL_COLL_RECV, FL_DTYPE_FLOAT32, nullptr, nullptr, 4, 1)}), FL_ERR_INVALID_ARGUMENT,
                "recvbuf");
  EXPECT_FL_ERR(submit(cs, c, {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, s.data(), r.data(), uint64_t(1) << 41)}),
                FL_ERR_OUT_OF_RANGE, "count");
  // A broadcast's non-root ranks need no sendbuf; count 0 needs no buffers at all.
  EXPECT_EQ(fake_nccl_counter("ops"), 0);
  // Nothing above took a sequence number: the first collective that runs is seq 1 on both
  // ranks, and a stuck one after it is named seq 2 when the communicator is destroyed.
  ASSERT_FL_OK(submit(cs, c, {part(FL_COLL_BROADCAST, FL_DTYPE_FLOAT32, nullptr, r.data(), 4, 1)}));
  ASSERT_FL_OK(submit(stream(rk.e[1], 1, kGpu, FL_STREAM_COLLECTIVE), rk.c[1],
                      {part(FL_COLL_BROADCAST, FL_DTYPE_FLOAT32, s.data(), r.data(), 4, 1)}));
  ASSERT_FL_OK(fl_engine_synchronize(e));
  ASSERT_FL_OK(fl_engine_synchronize(rk.e[1]));
  fl_object_t* o = fltest::make_obj(e);
  fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
  in.parts = &good;
  in.num_parts = 1;
  fl_operand_t ow = W(o);
  in.operands = &ow;
  in.num_operands = 1;
  ASSERT_FL_OK(fl_submit_collective(cs, c, &in, nullptr));
  ASSERT_TRUE(eventually([] { return fake_nccl_counter("waiting") == 1; }));
  ASSERT_FL_OK(fl_comm_destroy(c));
  rk.c[0] = nullptr;
  EXPECT_FL_ERR(fl_object_wait(o, FL_READ), FL_ERR_CANCELLED, "seq 2");
  fl_object_release(o);
  // destroy
  EXPECT_FL_OK(fl_comm_destroy(nullptr));
  EXPECT_FL_ERR(fl_comm_destroy(c), FL_ERR_INVALID_HANDLE, "stale");
  EXPECT_FL_ERR(submit(cs, c, {good}), FL_ERR_INVALID_HANDLE, "stale");
}

// FL_COMM_UNORDERED: B's collective (unordered) runs while A's (ordered, submitted first)
// waits for its input; in the order, B would wait for A's launch.
TEST_F(FakeNccl, UnorderedCommunicatorIsNotHeldBackByTheOrder) {
  std::vector<fl_engine_t*> e{make_engine(4), make_engine(4)};
  std::vector<fl_comm_t*> ca = make_comms(e, 1);
  std::vector<fl_comm_t*> cb = make_comms(e, 2, FL_COMM_UNORDERED);
  fltest::Gate gate;  // holds A's input on both ranks
  std::vector<std::vector<float>> sa(2, std::vector<float>(4)), ra(2, std::vector<float>(4, -1)),
      sb(2, std::vector<float>(4)), rb(2, std::vector<float>(4, -1));
  std::vector<fl_object_t*> objs;
  for (int r = 0; r < 2; ++r) {
    fl_engine_t* x = e[size_t(r)];
    fl_object_t* ia = fltest::make_obj(x);
    objs.push_back(ia);
    float* pa = sa[size_t(r)].data();
    fltest::submit(stream(x, 3, kCpu, FL_STREAM_HOST), [&gate, pa, r] {
      if (!gate.wait()) return FL_ERR_TIMEOUT;
      for (int k = 0; k < 4; ++k) pa[k] = float(r + 1);
      return FL_OK;
    }, {W(ia)}, "produce a");
    ASSERT_FL_OK(coll(x, 1, ca[size_t(r)], {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, pa, ra[size_t(r)].data(), 4)},
                      {R(ia)}, "A"));
    for (int k = 0; k < 4; ++k) sb[size_t(r)][size_t(k)] = float(10 * (r + 1));
    ASSERT_FL_OK(coll(x, 2, cb[size_t(r)], {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, sb[size_t(r)].data(),
                                                  rb[size_t(r)].data(), 4)}, {}, "B"));
  }
  for (fl_engine_t* x : e) {  // B completes on both ranks while A's input is held
    EXPECT_TRUE(eventually([x] {
      fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
      return fl_engine_stats(x, &st) == FL_OK && st.completed >= 1;
    })) << "the unordered collective waited for the ordered one\n" << report();
  }
  gate.open = true;
  for (fl_engine_t* x : e) EXPECT_FL_OK(fl_engine_synchronize(x));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ra[size_t(r)][3], 3.0f);
    EXPECT_EQ(rb[size_t(r)][3], 30.0f);
  }
  for (fl_object_t* o : objs) fl_object_release(o);
  for (int r = 0; r < 2; ++r) {
    EXPECT_FL_OK(fl_comm_destroy(ca[size_t(r)]));
    EXPECT_FL_OK(fl_comm_destroy(cb[size_t(r)]));
    fl_engine_destroy(e[size_t(r)]);
  }
}

TEST_F(FakeNccl, TwoRanksOfOneCommunicatorOnOneEngineAreRefused) {
  std::vector<fl_engine_t*> e{make_engine(), make_engine()};
  const fl_comm_unique_id_t id = nccl_id();
  fl_comm_t* c[2] = {nullptr, nullptr};
  std::thread t([&] {
    fl_comm_desc_t d = desc(2, 1, 1);
    EXPECT_EQ(fl_comm_create(e[1], &d, &id, &c[1]), FL_OK) << fl_last_error_message();
  });
  fl_comm_desc_t d = desc(2, 0, 1);
  ASSERT_FL_OK(fl_comm_create(e[0], &d, &id, &c[0]));
  t.join();
  fl_comm_t* again = nullptr;
  d = desc(2, 1, 2);
  EXPECT_FL_ERR(fl_comm_create(e[0], &d, &id, &again), FL_ERR_INVALID_ARGUMENT, "already lives on this engine");
  EXPECT_FL_OK(fl_comm_destroy(c[0]));
  EXPECT_FL_OK(fl_comm_destroy(c[1]));
  for (fl_engine_t* x : e) fl_engine_destroy(x);
}

TEST_F(FakeNccl, IdleCommunicatorIsFinalizedAndDestroyed) {
  Ranks rk(2, 1);
  std::vector<float> s(4, 2), r(4);
  for (int q = 0; q < 2; ++q)
    ASSERT_FL_OK(coll(rk.e[size_t(q)], 1, rk.c[size_t(q)], {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, s.data(), r.data(), 4)}));
  for (int q = 0; q < 2; ++q) ASSERT_FL_OK(fl_engine_synchronize(rk.e[size_t(q)]));
  const long live = fake_nccl_counter("live_comms");
  ASSERT_FL_OK(fl_comm_destroy(rk.c[0]));
  rk.c[0] = nullptr;
  EXPECT_EQ(fake_nccl_counter("live_comms"), live - 1);
  EXPECT_EQ(fake_nccl_counter("aborted_kernels"), 0);
}

}  // namespace
