// Host-memory communicators (FL_COMM_HOST_FAKE): the collective API in a CPU-only build,
// real data movement, ordering by one COLLECTIVE stream per communicator (docs/design.md,
// guarantee 8), signature checks, and the collective-ordering deadlock explained by the watchdog.
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "test_diag_util.hpp"

using namespace fldiag;

namespace {

fl_comm_unique_id_t new_id() {
  fl_comm_unique_id_t id;
  EXPECT_EQ(fl_comm_get_unique_id(FL_COMM_HOST_FAKE, &id), FL_OK) << fl_last_error_message();
  return id;
}

fl_comm_t* make_comm(fl_engine_t* e, const fl_comm_unique_id_t& id, uint64_t nranks, uint64_t rank, uint64_t lane) {
  fl_comm_desc_t d = FL_COMM_DESC_INIT;
  d.nranks = nranks;
  d.rank = rank;
  d.lane = lane;
  d.backend = FL_COMM_HOST_FAKE;
  fl_comm_t* c = nullptr;
  EXPECT_EQ(fl_comm_create(e, &d, &id, &c), FL_OK) << fl_last_error_message();
  return c;
}

fl_instr_id submit_coll(fl_stream_t* s, fl_comm_t* c, std::vector<fl_coll_part_t> parts, const char* name,
                        std::vector<fl_operand_t> ops = {}, fl_status_t expect = FL_OK) {
  fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
  in.parts = parts.data();
  in.num_parts = parts.size();
  in.operands = ops.empty() ? nullptr : ops.data();
  in.num_operands = ops.size();
  in.name = name;
  fl_instr_id id = 0;
  fl_status_t st = fl_submit_collective(s, c, &in, &id);
  EXPECT_EQ(st, expect) << fl_last_error_message();
  return id;
}

fl_coll_part_t part(uint32_t op, uint32_t dtype, const void* send, void* recv, uint64_t count, uint32_t redop = 0,
                    uint32_t peer = 0) {
  return fltest::coll_part(op, dtype, send, recv, count, redop, peer);
}

template <class T>
T reduce(T a, T b, uint32_t op) {
  switch (op) {
    case FL_REDOP_SUM: return T(a + b);
    case FL_REDOP_PROD: return T(a * b);
    case FL_REDOP_MAX: return std::max(a, b);
    default: return std::min(a, b);
  }
}

}  // namespace

TEST(Comm, UniqueIdAndCreateErrors) {
  fl_comm_unique_id_t id;
  // NCCL needs a CUDA build and a visible device; elsewhere it is unsupported, saying so.
  int32_t devices = 0;
  const bool have_gpu = fl_cuda_device_count(&devices) == FL_OK && devices > 0;
  if (have_gpu) {
    EXPECT_FL_OK(fl_comm_get_unique_id(FL_COMM_NCCL, &id));
  } else {
    EXPECT_FL_ERR(fl_comm_get_unique_id(FL_COMM_NCCL, &id), FL_ERR_UNSUPPORTED, "NCCL backend is not available");
  }
  EXPECT_FL_ERR(fl_comm_get_unique_id(static_cast<fl_comm_backend_t>(7), &id), FL_ERR_INVALID_ARGUMENT, "backend 7 is unknown");
  EXPECT_FL_ERR(fl_comm_get_unique_id(FL_COMM_HOST_FAKE, nullptr), FL_ERR_INVALID_ARGUMENT, "out_id is NULL");
  fl_comm_unique_id_t a = new_id(), b = new_id();
  EXPECT_NE(std::memcmp(a.internal, b.internal, sizeof a.internal), 0) << "ids are unique";

  EngineFixture f(2, 4);
  fl_comm_desc_t d = FL_COMM_DESC_INIT;
  d.nranks = 2;
  d.backend = FL_COMM_HOST_FAKE;
  fl_comm_t* c = nullptr;
  EXPECT_FL_ERR(fl_comm_create(nullptr, &d, &a, &c), FL_ERR_INVALID_HANDLE, "engine is NULL");
  EXPECT_FL_ERR(fl_comm_create(f.engine, nullptr, &a, &c), FL_ERR_INVALID_ARGUMENT, "descriptor is NULL");
  EXPECT_FL_ERR(fl_comm_create(f.engine, &d, nullptr, &c), FL_ERR_INVALID_ARGUMENT, "id is NULL");
  EXPECT_FL_ERR(fl_comm_create(f.engine, &d, &a, nullptr), FL_ERR_INVALID_ARGUMENT, "out_comm is NULL");
  fl_comm_desc_t bad = d;
  bad.rank = 2;
  EXPECT_FL_ERR(fl_comm_create(f.engine, &bad, &a, &c), FL_ERR_OUT_OF_RANGE, "rank 2 is out of range");
  bad = d;
  bad.nranks = 0;
  EXPECT_FL_ERR(fl_comm_create(f.engine, &bad, &a, &c), FL_ERR_OUT_OF_RANGE, "nranks 0");
  bad = d;
  bad.lane = 4;
  EXPECT_FL_ERR(fl_comm_create(f.engine, &bad, &a, &c), FL_ERR_OUT_OF_RANGE, "lane 4 is out of range");
  if (!have_gpu) {  // with a GPU, NCCL creation is covered by tests/gpu
    bad = d;
    bad.backend = FL_COMM_NCCL;
    EXPECT_FL_ERR(fl_comm_create(f.engine, &bad, &a, &c), FL_ERR_UNSUPPORTED, "NCCL");
  }
  bad = d;
  bad.flags = 2;
  EXPECT_FL_ERR(fl_comm_create(f.engine, &bad, &a, &c), FL_ERR_INVALID_ARGUMENT, "flags 2 are unknown");
  bad = d;
  bad.device = 1;
  EXPECT_FL_ERR(fl_comm_create(f.engine, &bad, &a, &c), FL_ERR_INVALID_ARGUMENT, "device must be 0");
  fl_comm_unique_id_t junk;
  std::memset(&junk, 7, sizeof junk);
  EXPECT_FL_ERR(fl_comm_create(f.engine, &d, &junk, &c), FL_ERR_INVALID_ARGUMENT, "unique id was not made");
  fl_comm_t* r0 = make_comm(f.engine, a, 2, 0, 1);
  EXPECT_FL_ERR(fl_comm_create(f.engine, &d, &a, &c), FL_ERR_INVALID_ARGUMENT, "rank 0 of this unique id has already joined");
  bad = d;
  bad.nranks = 3;
  bad.rank = 1;
  EXPECT_FL_ERR(fl_comm_create(f.engine, &bad, &a, &c), FL_ERR_INVALID_ARGUMENT, "nranks 3 disagrees with the 2");
  {  // 3 ranks on 3 lanes of a 2-worker engine would starve: refused up front
    fl_comm_unique_id_t id3 = new_id();
    fl_comm_t* x0 = make_comm(f.engine, id3, 3, 0, 1);
    fl_comm_t* x1 = make_comm(f.engine, id3, 3, 1, 2);
    fl_comm_desc_t d3 = d;
    d3.nranks = 3;
    d3.rank = 2;
    d3.lane = 3;
    EXPECT_FL_ERR(fl_comm_create(f.engine, &d3, &id3, &c), FL_ERR_INVALID_ARGUMENT,
                  "would host ranks of one communicator on 3 lanes but has only 2 workers");
    ASSERT_FL_OK(fl_comm_destroy(x0));
    ASSERT_FL_OK(fl_comm_destroy(x1));
  }
  ASSERT_FL_OK(fl_comm_destroy(r0));
  EXPECT_FL_ERR(fl_comm_destroy(r0), FL_ERR_INVALID_HANDLE, "stale");
  EXPECT_FL_OK(fl_comm_destroy(nullptr));
}

TEST(Comm, SubmitMustUseTheCommsLaneCollectiveStream) {
  EngineFixture f(2, 4);
  fl_comm_unique_id_t id = new_id();
  fl_comm_t* c0 = make_comm(f.engine, id, 1, 0, 1);
  float x[4] = {1, 2, 3, 4}, y[4];
  auto p = part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, x, y, 4, FL_REDOP_SUM);
  fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
  in.parts = &p;
  in.num_parts = 1;
  EXPECT_FL_ERR(fl_submit_collective(coll_of(f.engine, 2), c0, &in, nullptr), FL_ERR_INVALID_ARGUMENT,
                "issues its collectives on lane 1's host collective stream");
  EXPECT_FL_ERR(fl_submit_collective(coll_of(f.engine, 2), c0, &in, nullptr), FL_ERR_INVALID_ARGUMENT,
                "the stream given is lane 2's collective stream");
  EXPECT_FL_ERR(fl_submit_collective(host_of(f.engine, 1), c0, &in, nullptr), FL_ERR_INVALID_ARGUMENT,
                "the stream given is lane 1's host stream");
  EXPECT_FL_ERR(fl_submit_collective(coll_of(f.engine, 1), nullptr, &in, nullptr), FL_ERR_INVALID_HANDLE, "comm is NULL");
  EXPECT_FL_ERR(fl_submit_collective(coll_of(f.engine, 1), c0, nullptr, nullptr), FL_ERR_INVALID_ARGUMENT, "descriptor is NULL");
  fl_collective_instr_t empty = FL_COLLECTIVE_INSTR_INIT;
  EXPECT_FL_ERR(fl_submit_collective(coll_of(f.engine, 1), c0, &empty, nullptr), FL_ERR_INVALID_ARGUMENT, "num_parts is 0");
  auto h = part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT16, x, y, 4, FL_REDOP_SUM);
  in.parts = &h;
  EXPECT_FL_ERR(fl_submit_collective(coll_of(f.engine, 1), c0, &in, nullptr), FL_ERR_UNSUPPORTED,
                "all_reduce over float16 is not supported by the host-fake backend");
  auto badop = part(9, FL_DTYPE_FLOAT32, x, y, 4);
  in.parts = &badop;
  EXPECT_FL_ERR(fl_submit_collective(coll_of(f.engine, 1), c0, &in, nullptr), FL_ERR_INVALID_ARGUMENT, "op 9 is unknown");
  auto root = part(FL_COLL_BROADCAST, FL_DTYPE_FLOAT32, x, y, 4, 0, 3);
  in.parts = &root;
  EXPECT_FL_ERR(fl_submit_collective(coll_of(f.engine, 1), c0, &in, nullptr), FL_ERR_OUT_OF_RANGE, "root 3 is out of range");
  auto nobuf = part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, nullptr, y, 4);
  in.parts = &nobuf;
  EXPECT_FL_ERR(fl_submit_collective(coll_of(f.engine, 1), c0, &in, nullptr), FL_ERR_INVALID_ARGUMENT, "needs a sendbuf");
  // A 1-rank all-reduce is a copy; then the handle goes stale.
  submit_coll(coll_of(f.engine, 1), c0, {p}, "solo");
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  EXPECT_EQ(y[3], 4.0f);
  ASSERT_FL_OK(fl_comm_destroy(c0));
  in.parts = &p;
  EXPECT_FL_ERR(fl_submit_collective(coll_of(f.engine, 1), c0, &in, nullptr), FL_ERR_INVALID_HANDLE, "stale");
}

// Every collective, the four main dtypes and every redop, over three ranks on three lanes.
template <class T>
void check_collectives(uint32_t dtype) {
  const uint32_t n = 3;
  const uint64_t count = 5;
  EngineFixture f(n, 4);  // a rank blocks its worker while it waits for its peers
  for (uint32_t redop = FL_REDOP_SUM; redop <= FL_REDOP_MIN; ++redop) {
    fl_comm_unique_id_t id = new_id();
    std::vector<fl_comm_t*> comms;
    for (uint32_t r = 0; r < n; ++r) comms.push_back(make_comm(f.engine, id, n, r, 1 + r));
    std::vector<std::vector<T>> in(n), ar(n, std::vector<T>(count)), ag(n, std::vector<T>(count * n)),
        rs_in(n), rs(n, std::vector<T>(count)), bc(n, std::vector<T>(count)), inplace(n);
    for (uint32_t r = 0; r < n; ++r) {
      for (uint64_t k = 0; k < count; ++k) in[r].push_back(T(int(r + 1) * 2 + int(k) % 3));
      for (uint64_t k = 0; k < count * n; ++k) rs_in[r].push_back(T(int(r) + int(k % 4)));
      inplace[r] = in[r];
    }
    for (uint32_t r = 0; r < n; ++r) {
      fl_stream_t* s = coll_of(f.engine, 1 + r);
      submit_coll(s, comms[r], {part(FL_COLL_ALL_REDUCE, dtype, in[r].data(), ar[r].data(), count, redop)}, "ar");
      submit_coll(s, comms[r], {part(FL_COLL_ALL_GATHER, dtype, in[r].data(), ag[r].data(), count)}, "ag");
      submit_coll(s, comms[r], {part(FL_COLL_REDUCE_SCATTER, dtype, rs_in[r].data(), rs[r].data(), count, redop)}, "rs");
      submit_coll(s, comms[r], {part(FL_COLL_BROADCAST, dtype, in[r].data(), bc[r].data(), count, 0, 2)}, "bc");
      submit_coll(s, comms[r], {part(FL_COLL_ALL_REDUCE, dtype, inplace[r].data(), inplace[r].data(), count, redop)}, "ar.inplace");
    }
    ASSERT_FL_OK(fl_engine_synchronize(f.engine));
    for (uint32_t r = 0; r < n; ++r) {
      for (uint64_t k = 0; k < count; ++k) {
        T want = in[0][k];
        for (uint32_t q = 1; q < n; ++q) want = reduce(want, in[q][k], redop);
        EXPECT_EQ(ar[r][k], want) << "all_reduce rank " << r << " redop " << redop;
        EXPECT_EQ(inplace[r][k], want) << "in-place all_reduce";
        T want_rs = rs_in[0][r * count + k];
        for (uint32_t q = 1; q < n; ++q) want_rs = reduce(want_rs, rs_in[q][r * count + k], redop);
        EXPECT_EQ(rs[r][k], want_rs) << "reduce_scatter rank " << r;
        EXPECT_EQ(bc[r][k], in[2][k]) << "broadcast from root 2";
      }
      for (uint32_t q = 0; q < n; ++q)
        for (uint64_t k = 0; k < count; ++k) EXPECT_EQ(ag[r][q * count + k], in[q][k]) << "all_gather";
    }
    std::string dump = dump_now(f.engine);
    EXPECT_TRUE(contains(dump, "sequence numbers: queued 5, issued 5, completed 5")) << dump;
    EXPECT_TRUE(contains(dump, "reduce_scatter(")) << dump;
    for (auto* c : comms) ASSERT_FL_OK(fl_comm_destroy(c));
  }
}

// FL_COMM_UNORDERED is accepted by the host-fake backend (whose collectives are never in
// the NCCL order) and changes nothing there.
TEST(Comm, HostFakeAcceptsUnordered) {
  EngineFixture f(2, 4);
  fl_comm_unique_id_t id = new_id();
  std::vector<fl_comm_t*> comms;
  for (uint64_t r = 0; r < 2; ++r) {
    fl_comm_desc_t d = FL_COMM_DESC_INIT;
    d.nranks = 2;
    d.rank = r;
    d.lane = 1 + r;
    d.backend = FL_COMM_HOST_FAKE;
    d.flags = FL_COMM_UNORDERED;
    fl_comm_t* c = nullptr;
    ASSERT_FL_OK(fl_comm_create(f.engine, &d, &id, &c));
    comms.push_back(c);
  }
  float in[2][3] = {{1, 2, 3}, {10, 20, 30}}, out[2][3] = {};
  for (uint32_t r = 0; r < 2; ++r)
    submit_coll(coll_of(f.engine, 1 + r), comms[r], {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, in[r], out[r], 3)}, "ar");
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  for (uint32_t r = 0; r < 2; ++r) EXPECT_EQ(out[r][2], 33.0f);
  for (auto* c : comms) ASSERT_FL_OK(fl_comm_destroy(c));
}

TEST(Comm, CollectivesInt32) { check_collectives<int32_t>(FL_DTYPE_INT32); }
TEST(Comm, CollectivesInt64) { check_collectives<int64_t>(FL_DTYPE_INT64); }
TEST(Comm, CollectivesFloat32) { check_collectives<float>(FL_DTYPE_FLOAT32); }
TEST(Comm, CollectivesFloat64) { check_collectives<double>(FL_DTYPE_FLOAT64); }

// Grouped send/recv: a ring exchange, each rank sending to the next and receiving from the
// previous in one instruction; ranks on two engines.
TEST(Comm, GroupedSendRecvRingAcrossEngines) {
  EngineFixture f0(2, 4), f1(1, 4);
  fl_comm_unique_id_t id = new_id();
  const uint32_t n = 3;
  fl_comm_t* c[3] = {make_comm(f0.engine, id, n, 0, 1), make_comm(f0.engine, id, n, 1, 2), make_comm(f1.engine, id, n, 2, 1)};
  fl_engine_t* eng[3] = {f0.engine, f0.engine, f1.engine};
  uint32_t lane[3] = {1, 2, 1};
  int64_t send[3][4], recv[3][4];
  for (uint32_t r = 0; r < n; ++r)
    for (int k = 0; k < 4; ++k) send[r][k] = 100 * r + k;
  for (uint32_t r = 0; r < n; ++r)
    submit_coll(coll_of(eng[r], lane[r]), c[r],
                {part(FL_COLL_SEND, FL_DTYPE_INT64, send[r], nullptr, 4, 0, (r + 1) % n),
                 part(FL_COLL_RECV, FL_DTYPE_INT64, nullptr, recv[r], 4, 0, (r + n - 1) % n)},
                "ring");
  ASSERT_FL_OK(fl_engine_synchronize(f0.engine));
  ASSERT_FL_OK(fl_engine_synchronize(f1.engine));
  for (uint32_t r = 0; r < n; ++r)
    for (int k = 0; k < 4; ++k) EXPECT_EQ(recv[r][k], send[(r + n - 1) % n][k]);
  for (auto* x : c) ASSERT_FL_OK(fl_comm_destroy(x));
}

// Ranks disagreeing on the operation at one sequence number: every rank fails with a
// message naming both signatures (no hang).
TEST(Comm, SignatureMismatchFailsNamingBothSignatures) {
  EngineFixture f(2, 4);
  fl_comm_unique_id_t id = new_id();
  fl_comm_t* c0 = make_comm(f.engine, id, 2, 0, 1);
  fl_comm_t* c1 = make_comm(f.engine, id, 2, 1, 2);
  float a[8] = {}, b[8] = {};
  submit_coll(coll_of(f.engine, 1), c0, {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, a, a, 4, FL_REDOP_SUM)}, "r0.ar");
  submit_coll(coll_of(f.engine, 2), c1, {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, b, b, 8, FL_REDOP_SUM)}, "r1.ar");
  fl_status_t st = fl_stream_synchronize(coll_of(f.engine, 1));
  std::string msg = fl_last_error_message();
  EXPECT_EQ(st, FL_ERR_INSTRUCTION_FAILED);
  EXPECT_TRUE(contains(msg, "signature mismatch at seq 1")) << msg;
  EXPECT_TRUE(contains(msg, "rank 0 issued all_reduce(float32, sum, count=4) but rank 1 issued all_reduce(float32, sum, count=8)")) << msg;
  EXPECT_EQ(fl_stream_synchronize(coll_of(f.engine, 2)), FL_ERR_INSTRUCTION_FAILED);
  std::string dump = dump_now(f.engine);
  EXPECT_TRUE(contains(dump, "failed    all_reduce(float32, sum, count=4)")) << dump;
  ASSERT_FL_OK(fl_comm_destroy(c0));
  ASSERT_FL_OK(fl_comm_destroy(c1));
}

// A rank whose collective is skipped (poisoned input) still takes its turn: the peer fails
// instead of waiting forever.
TEST(Comm, SkippedCollectiveFailsPeersInsteadOfHanging) {
  EngineFixture f(2, 4);
  fl_comm_unique_id_t id = new_id();
  fl_comm_t* c0 = make_comm(f.engine, id, 2, 0, 1);
  fl_comm_t* c1 = make_comm(f.engine, id, 2, 1, 2);
  fl_object_t* bad = make_obj(f.engine);
  submit(host_of(f.engine, 1), [](fl_instr_ctx_t*) { return FL_ERR_INSTRUCTION_FAILED; }, {W(bad)}, "produce.bad");
  int32_t a = 1, b = 2, ra = 0, rb = 0;
  submit_coll(coll_of(f.engine, 1), c0, {part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT32, &a, &ra, 1)}, "r0", {R(bad)});
  submit_coll(coll_of(f.engine, 2), c1, {part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT32, &b, &rb, 1)}, "r1");
  EXPECT_EQ(fl_stream_synchronize(coll_of(f.engine, 2)), FL_ERR_INSTRUCTION_FAILED);
  EXPECT_TRUE(contains(fl_last_error_message(), "rank 0 skipped its collective")) << fl_last_error_message();
  fl_engine_synchronize(f.engine);
  fl_object_release(bad);
  ASSERT_FL_OK(fl_comm_destroy(c0));
  ASSERT_FL_OK(fl_comm_destroy(c1));
}

// (c) Two ranks issue collectives on two communicators in different orders: rank 0 does
// all_reduce on A then all_gather on B; rank 1 does all_gather on B then all_reduce on A.
// Each blocks in its first collective waiting for the other: the NCCL deadlock of the
// 3-D-parallel seed. The watchdog dump shows the per-communicator sequence numbers, the
// signatures each rank is blocked in, and the cycle. Destroying communicator A unsticks it.
TEST(Comm, CollectivesInDifferentOrdersDeadlockIsExplained) {
  EngineFixture f(2, 4);
  DumpCatcher dc;
  dc.install(f.engine, 200);
  fl_comm_unique_id_t ida = new_id(), idb = new_id();
  fl_comm_t* a0 = make_comm(f.engine, ida, 2, 0, 1);
  fl_comm_t* b0 = make_comm(f.engine, idb, 2, 0, 1);
  fl_comm_t* a1 = make_comm(f.engine, ida, 2, 1, 2);
  fl_comm_t* b1 = make_comm(f.engine, idb, 2, 1, 2);
  float x0[4] = {1, 2, 3, 4}, x1[4] = {10, 20, 30, 40}, y0[4], y1[4];
  float g0[2] = {5, 6}, g1[2] = {7, 8}, h0[4] = {}, h1[4] = {};
  fl_instr_id ra = submit_coll(coll_of(f.engine, 1), a0, {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, x0, y0, 4, FL_REDOP_SUM)}, "rank0.A.all_reduce");
  submit_coll(coll_of(f.engine, 1), b0, {part(FL_COLL_ALL_GATHER, FL_DTYPE_FLOAT32, g0, h0, 2)}, "rank0.B.all_gather");
  fl_instr_id rb = submit_coll(coll_of(f.engine, 2), b1, {part(FL_COLL_ALL_GATHER, FL_DTYPE_FLOAT32, g1, h1, 2)}, "rank1.B.all_gather");
  submit_coll(coll_of(f.engine, 2), a1, {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, x1, y1, 4, FL_REDOP_SUM)}, "rank1.A.all_reduce");

  std::string dump = dc.wait_for(1);
  ASSERT_FALSE(dump.empty());
  std::printf("%s", dump.c_str());
  char ha[32], hb[32];
  std::snprintf(ha, sizeof ha, "0x%016llx", (unsigned long long)(uintptr_t)a0);
  std::snprintf(hb, sizeof hb, "0x%016llx", (unsigned long long)(uintptr_t)b1);
  EXPECT_TRUE(contains(dump, std::string("communicator ") + ha + " (rank 0 of 2)")) << dump;
  EXPECT_TRUE(contains(dump, "sequence numbers: queued 1, issued 1, completed 0")) << dump;
  EXPECT_TRUE(contains(dump, "'rank0.A.all_reduce' (#" + std::to_string(ra) + ", lane 1, collective) RUNNING")) << dump;
  EXPECT_TRUE(contains(dump, "collective seq 1 all_reduce(float32, sum, count=4) of communicator " + std::string(ha) +
                                 " (rank 0 of 2) waits for rank 1 (lane 2)")) << dump;
  EXPECT_TRUE(contains(dump, "'rank1.B.all_gather' (#" + std::to_string(rb) + ", lane 2, collective) RUNNING")) << dump;
  EXPECT_TRUE(contains(dump, "collective seq 1 all_gather(float32, count=2) of communicator " + std::string(hb) +
                                 " (rank 1 of 2) waits for rank 0 (lane 1)")) << dump;
  EXPECT_TRUE(contains(dump, "rank 1 at seq 1: all_reduce(float32, sum, count=4) (queued); not issued: its lane 2 is busy")) << dump;
  EXPECT_TRUE(contains(dump, "DEADLOCK: cycle of waits lane 1 -> lane 2 -> lane 1")) << dump;
  EXPECT_TRUE(contains(dump, "flight recorder")) << dump;

  // Unstick: destroying rank 0's communicator A aborts A; rank 0 moves on to B, which
  // rank 1 is waiting in, so B completes; rank 1's A then fails as cancelled.
  ASSERT_FL_OK(fl_comm_destroy(a0));
  EXPECT_EQ(fl_stream_synchronize(coll_of(f.engine, 1)), FL_ERR_CANCELLED);
  EXPECT_TRUE(contains(fl_last_error_message(), "rank 0 destroyed its communicator")) << fl_last_error_message();
  fl_status_t st = fl_stream_synchronize(coll_of(f.engine, 2));
  EXPECT_EQ(st, FL_ERR_CANCELLED) << fl_last_error_message();
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(h0[k], g0[k]);
    EXPECT_EQ(h0[2 + k], g1[k]);
    EXPECT_EQ(h1[2 + k], g1[k]);
  }
  for (auto* c : {b0, a1, b1}) ASSERT_FL_OK(fl_comm_destroy(c));
}

// Engine destroy must not hang on a rank stuck in a collective forever: its communicators
// are aborted, the stuck collective fails with FL_ERR_CANCELLED, and the handles go stale.
TEST(Comm, EngineDestroyCancelsAStuckCollectiveAndStalesHandles) {
  fl_engine_t* e = nullptr;
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = 2;
  ASSERT_FL_OK(fl_engine_create(&d, &e));
  fl_comm_unique_id_t id = new_id();
  fl_comm_t* c0 = make_comm(e, id, 2, 0, 1);  // rank 1 never joins
  int32_t v = 3, out = 0;
  submit_coll(coll_of(e, 1), c0, {part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT32, &v, &out, 1)}, "lonely");
  std::string dump;
  for (int k = 0; k < 3000 && !contains(dump, "waits for rank 1 (not joined, or gone)"); ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    dump = dump_now(e);
  }
  EXPECT_TRUE(contains(dump, "rank 1: not joined (or gone)")) << dump;
  ASSERT_FL_OK(fl_engine_destroy(e));
  EXPECT_FL_ERR(fl_comm_destroy(c0), FL_ERR_INVALID_HANDLE, "stale");
  // The id's group is gone once every rank left: the id can be used afresh.
  EngineFixture f(1, 4);
  fl_comm_t* again = make_comm(f.engine, new_id(), 1, 0, 1);
  ASSERT_FL_OK(fl_comm_destroy(again));
}
