// Multi-process tests of libflowlane_mpi.so, run under mpirun by ctest (tests/mpi/CMakeLists.txt):
//
//   flowlane_mpi_scenarios SCENARIO [ARG]
//
//   ops           every fl_coll_op_t and fl_dtype_t against MPI's own result (float16 and
//                 bfloat16 against the same reduction done here), in place and not, many
//                 collectives in flight at once (FLOWLANE_MPI_CHUNK small: the chunked paths)
//   skip          rank 1's input to seq 4 is poisoned: every rank's seq 4 fails naming rank 1,
//                 seq 5 works
//   mismatch      the last rank all-reduces 5 elements at seq 3, the others 4: every rank fails
//                 naming both signatures and the rank; the communicator is broken after
//                 (6 rounds: nothing writes a buffer of theirs after its collective ended)
//   mismatch_late rank 0 submits seq 2 only after seq 1's mismatch failed, the others at once
//                 (their seq 2 check is on `ctl` before the signature exchange, rank 0's never
//                 is): the explanations still match up, and nothing corrupts MPI
//   timeout       rank 1 is late for seq 2: rank 0's fails with FL_ERR_TIMEOUT, rank 1's late
//                 one pairs with rank 0's request, still outstanding, and completes
//   two_comms     three communicators on one engine, two sharing a lane, submitted in crossed
//                 orders on odd ranks: all complete
//   destroy       collectives in flight when every rank destroys its communicator (ARG
//                 "engine": destroys its engine instead): they fail with FL_ERR_CANCELLED or
//                 complete, nothing hangs, MPI finalizes
//   threads ARG   MPI initialized with ARG (single, funneled, serialized, serialized_flag,
//                 multiple): refused with a message saying what to pass, or accepted
//   hang ARG      a hang for the communicator dumps and flowlane-comm-analyze
//                 (tests/mpi/run_mpi_hang.py): mismatch, stuck, dead, crossed
//
// Each rank prints what failed; the exit status is non-zero if anything did (mpirun then
// fails too). Every wait is bounded.
#include <mpi.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "flowlane/flowlane.h"
#include "flowlane/flowlane_mpi.h"

namespace {

constexpr uint64_t kWaitNs = 60'000'000'000ull;
int g_rank = 0, g_size = 1, g_failures = 0;

void check(bool ok, const std::string& what) {
  if (ok) return;
  ++g_failures;
  std::fprintf(stderr, "rank %d: FAILED: %s (last error: %s)\n", g_rank, what.c_str(), fl_last_error_message());
}
void check_ok(fl_status_t st, const std::string& what) {
  check(st == FL_OK, what + " returned " + fl_status_name(st));
}
void check_err(fl_status_t st, fl_status_t want, const std::string& fragment, const std::string& what) {
  const std::string msg = fl_last_error_message();
  check(st == want && msg.find(fragment) != std::string::npos,
        what + ": wanted " + fl_status_name(want) + " saying '" + fragment + "', got " + fl_status_name(st) + ": " + msg);
}

struct Rank {
  fl_engine_t* engine = nullptr;
  fl_comm_t* comm = nullptr;
  fl_stream_t* coll = nullptr;
  explicit Rank(uint32_t lane = 1, bool make_comm = true) {
    fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
    d.num_workers = 2;
    d.max_lanes = 4;
    check_ok(fl_engine_create(&d, &engine), "fl_engine_create");
    coll = stream(lane, FL_STREAM_COLLECTIVE);
    if (make_comm) comm = create(lane);
  }
  fl_comm_t* create(uint32_t lane, uint64_t flags = 0) {
    fl_comm_desc_t cd = FL_COMM_DESC_INIT;
    cd.lane = lane;
    cd.flags = flags;
    fl_comm_t* c = nullptr;
    MPI_Comm world = MPI_COMM_WORLD;
    check_ok(fl_mpi_comm_create(engine, &cd, &world, &c), "fl_mpi_comm_create");
    return c;
  }
  fl_stream_t* stream(uint32_t lane, fl_stream_kind_t kind) {
    fl_stream_t* s = nullptr;
    check_ok(fl_stream_get(engine, lane, fl_device_t{FL_DEVICE_CPU, 0}, kind, &s), "fl_stream_get");
    return s;
  }
  fl_instr_id submit(std::vector<fl_coll_part_t> parts, std::vector<fl_operand_t> ops = {}, fl_comm_t* c = nullptr,
                     fl_stream_t* s = nullptr, const char* name = nullptr) {
    fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
    in.parts = parts.data();
    in.num_parts = parts.size();
    in.operands = ops.empty() ? nullptr : ops.data();
    in.num_operands = ops.size();
    in.name = name;
    fl_instr_id id = 0;
    check_ok(fl_submit_collective(s ? s : coll, c ? c : comm, &in, &id), "fl_submit_collective");
    return id;
  }
  fl_status_t wait(fl_instr_id id, fl_stream_t* s = nullptr) { return fl_instr_wait_for(s ? s : coll, id, kWaitNs); }
  ~Rank() {
    if (comm != nullptr) check_ok(fl_comm_destroy(comm), "fl_comm_destroy");
    if (engine != nullptr) fl_engine_destroy(engine);
  }
};

fl_coll_part_t part(uint32_t op, uint32_t dtype, const void* s, void* r, uint64_t n, uint32_t redop = 0, uint32_t peer = 0) {
  fl_coll_part_t p{};
  p.op = op;
  p.dtype = dtype;
  p.redop = redop;
  p.peer = peer;
  p.sendbuf = s;
  p.recvbuf = r;
  p.count = n;
  return p;
}

// ---- ops ---------------------------------------------------------------------------------------

const uint32_t kDtypes[] = {FL_DTYPE_INT8,    FL_DTYPE_UINT8,   FL_DTYPE_INT32,   FL_DTYPE_UINT32,  FL_DTYPE_INT64,
                            FL_DTYPE_UINT64,  FL_DTYPE_FLOAT16, FL_DTYPE_FLOAT32, FL_DTYPE_FLOAT64, FL_DTYPE_BFLOAT16};
const char* kDtypeNames[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64", "bfloat16"};
size_t esize(uint32_t t) {
  switch (t) {
    case FL_DTYPE_INT8: case FL_DTYPE_UINT8: return 1;
    case FL_DTYPE_FLOAT16: case FL_DTYPE_BFLOAT16: return 2;
    case FL_DTYPE_INT32: case FL_DTYPE_UINT32: case FL_DTYPE_FLOAT32: return 4;
    default: return 8;
  }
}
MPI_Datatype mpi_type(uint32_t t) {
  switch (t) {
    case FL_DTYPE_INT8: return MPI_INT8_T;
    case FL_DTYPE_UINT8: return MPI_UINT8_T;
    case FL_DTYPE_INT32: return MPI_INT32_T;
    case FL_DTYPE_UINT32: return MPI_UINT32_T;
    case FL_DTYPE_INT64: return MPI_INT64_T;
    case FL_DTYPE_UINT64: return MPI_UINT64_T;
    case FL_DTYPE_FLOAT32: return MPI_FLOAT;
    case FL_DTYPE_FLOAT64: return MPI_DOUBLE;
    default: return MPI_UINT16_T;
  }
}
const MPI_Op kOps[] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};

// Small whole numbers, exact in every type (float16 and bfloat16 included) and in their sums
// and products over four ranks, so that the reduction order cannot matter.
double value(int rank, size_t i, uint32_t redop) {
  if (redop == FL_REDOP_PROD) return double(1 + (rank + int(i)) % 2);
  if (redop == FL_REDOP_SUM) return double((rank + 1) * int(i % 5 + 1));
  return double((rank * 7 + int(i)) % 11);
}
uint16_t to16(double v, bool bf16) {
  const float f = float(v);
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if (bf16) return uint16_t(x >> 16);  // exact for these small integers
  const uint32_t exp = (x >> 23) & 0xff, man = x & 0x7fffff;
  if (v == 0) return 0;
  return uint16_t(((exp - 112) << 10) | (man >> 13));
}
void put(unsigned char* p, uint32_t t, double v) {
  switch (t) {
    case FL_DTYPE_INT8: { int8_t x = int8_t(v); std::memcpy(p, &x, 1); break; }
    case FL_DTYPE_UINT8: { uint8_t x = uint8_t(v); std::memcpy(p, &x, 1); break; }
    case FL_DTYPE_INT32: { int32_t x = int32_t(v); std::memcpy(p, &x, 4); break; }
    case FL_DTYPE_UINT32: { uint32_t x = uint32_t(v); std::memcpy(p, &x, 4); break; }
    case FL_DTYPE_INT64: { int64_t x = int64_t(v); std::memcpy(p, &x, 8); break; }
    case FL_DTYPE_UINT64: { uint64_t x = uint64_t(v); std::memcpy(p, &x, 8); break; }
    case FL_DTYPE_FLOAT32: { float x = float(v); std::memcpy(p, &x, 4); break; }
    case FL_DTYPE_FLOAT64: std::memcpy(p, &v, 8); break;
    default: { uint16_t x = to16(v, t == FL_DTYPE_BFLOAT16); std::memcpy(p, &x, 2); break; }
  }
}
std::vector<unsigned char> fill(int rank, size_t n, uint32_t t, uint32_t redop) {
  std::vector<unsigned char> b(n * esize(t));
  for (size_t i = 0; i < n; ++i) put(b.data() + i * esize(t), t, value(rank, i, redop));
  return b;
}
// The reduction of every rank's `fill` (what MPI_Allreduce gives; computed here for the
// 16-bit floats, which MPI 3.1 cannot reduce).
std::vector<unsigned char> reference(size_t n, uint32_t t, uint32_t redop) {
  if (t != FL_DTYPE_FLOAT16 && t != FL_DTYPE_BFLOAT16) {
    std::vector<unsigned char> in = fill(g_rank, n, t, redop), out(in.size());
    MPI_Allreduce(in.data(), out.data(), int(n), mpi_type(t), kOps[redop], MPI_COMM_WORLD);
    return out;
  }
  std::vector<unsigned char> out(n * 2);
  for (size_t i = 0; i < n; ++i) {
    double acc = value(0, i, redop);
    for (int r = 1; r < g_size; ++r) {
      const double v = value(r, i, redop);
      acc = redop == 0 ? acc + v : redop == 1 ? acc * v : redop == 2 ? std::max(acc, v) : std::min(acc, v);
    }
    put(out.data() + i * 2, t, acc);
  }
  return out;
}

void ops() {
  Rank k;
  const size_t n = 13;
  struct Pending {
    std::string what;
    std::vector<unsigned char> got, want;
  };
  std::vector<Pending> checks;
  checks.reserve(512);  // buffers handed to flowlane must not move
  std::vector<std::vector<unsigned char>> keep;
  keep.reserve(512);
  for (uint32_t t : kDtypes) {
    const std::string tn = kDtypeNames[t];
    for (uint32_t redop = 0; redop < 4; ++redop) {
      const std::string rn = std::string(" redop ") + std::to_string(redop);
      // all_reduce, out of place and in place
      keep.push_back(fill(g_rank, n, t, redop));
      checks.push_back({"all_reduce " + tn + rn, std::vector<unsigned char>(n * esize(t)), reference(n, t, redop)});
      k.submit({part(FL_COLL_ALL_REDUCE, t, keep.back().data(), checks.back().got.data(), n, redop)});
      checks.push_back({"all_reduce in place " + tn + rn, fill(g_rank, n, t, redop), reference(n, t, redop)});
      k.submit({part(FL_COLL_ALL_REDUCE, t, checks.back().got.data(), checks.back().got.data(), n, redop)});
      // reduce_scatter: rank r gets block r of the reduction of every rank's n * size elements
      keep.push_back(fill(g_rank, n * size_t(g_size), t, redop));
      std::vector<unsigned char> full = reference(n * size_t(g_size), t, redop);
      checks.push_back({"reduce_scatter " + tn + rn, std::vector<unsigned char>(n * esize(t)),
                        std::vector<unsigned char>(full.begin() + long(size_t(g_rank) * n * esize(t)),
                                                   full.begin() + long(size_t(g_rank + 1) * n * esize(t)))});
      k.submit({part(FL_COLL_REDUCE_SCATTER, t, keep.back().data(), checks.back().got.data(), n, redop)});
    }
    // all_gather; broadcast from each root; a ring of send/recv in one group with a broadcast
    keep.push_back(fill(g_rank, n, t, 0));
    std::vector<unsigned char> all;
    for (int r = 0; r < g_size; ++r) {
      auto b = fill(r, n, t, 0);
      all.insert(all.end(), b.begin(), b.end());
    }
    checks.push_back({"all_gather " + tn, std::vector<unsigned char>(all.size()), all});
    k.submit({part(FL_COLL_ALL_GATHER, t, keep.back().data(), checks.back().got.data(), n)});
    for (int root = 0; root < g_size; ++root) {
      keep.push_back(fill(root, n, t, 2));
      checks.push_back({"broadcast " + tn + " root " + std::to_string(root), std::vector<unsigned char>(n * esize(t)),
                        fill(root, n, t, 2)});
      k.submit({part(FL_COLL_BROADCAST, t, keep.back().data(), checks.back().got.data(), n, 0, uint32_t(root))});
    }
    const int to = (g_rank + 1) % g_size, from = (g_rank + g_size - 1) % g_size;
    keep.push_back(fill(g_rank, n, t, 1));
    checks.push_back({"send/recv ring " + tn, std::vector<unsigned char>(n * esize(t)), fill(from, n, t, 1)});
    k.submit({part(FL_COLL_SEND, t, keep.back().data(), nullptr, n, 0, uint32_t(to)),
              part(FL_COLL_RECV, t, nullptr, checks.back().got.data(), n, 0, uint32_t(from))});
  }
  check_ok(fl_engine_synchronize_for(k.engine, kWaitNs), "fl_engine_synchronize_for");
  for (const Pending& p : checks) check(p.got == p.want, p.what + ": wrong result");
}

// ---- skip, mismatch, timeout ---------------------------------------------------------------------

void skip() {
  Rank k;
  fl_object_t* bad = nullptr;
  check_ok(fl_object_create(k.engine, nullptr, nullptr, &bad), "fl_object_create");
  std::vector<std::vector<int32_t>> b(5, std::vector<int32_t>(4, 1));
  for (int s = 0; s < 3; ++s) k.submit({part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT32, b[s].data(), b[s].data(), 4)});
  if (g_rank == 1) {
    fl_host_instr_t h = FL_HOST_INSTR_INIT;
    h.fn = [](fl_instr_ctx_t*, void*) { return FL_ERR_INSTRUCTION_FAILED; };
    fl_operand_t w{bad, FL_WRITE, 0};
    h.operands = &w;
    h.num_operands = 1;
    check_ok(fl_submit_host(k.stream(0, FL_STREAM_HOST), &h, nullptr), "fl_submit_host");
  }
  fl_operand_t r{bad, FL_READ, 0};
  const fl_instr_id s4 = k.submit({part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT32, b[3].data(), b[3].data(), 4)},
                                  g_rank == 1 ? std::vector<fl_operand_t>{r} : std::vector<fl_operand_t>{});
  const fl_instr_id s5 = k.submit({part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT32, b[4].data(), b[4].data(), 4)});
  if (g_rank == 1)
    check_err(k.wait(s4), FL_ERR_DEPENDENCY_FAILED, "skipped", "seq 4 on the skipping rank");
  else
    check_err(k.wait(s4), FL_ERR_INSTRUCTION_FAILED, "rank 1 skipped it", "seq 4 on a peer");
  check_ok(k.wait(s5), "seq 5");
  check(b[4] == std::vector<int32_t>(4, g_size), "seq 5's result");
  (void)fl_engine_synchronize_for(k.engine, kWaitNs);  // the failures are returned once each
  fl_object_release(bad);
}

void mismatch_round(int round) {
  Rank k;
  std::vector<std::vector<int32_t>> b(5, std::vector<int32_t>(5, 1));
  const bool odd = g_rank == g_size - 1;
  const std::string in = " (round " + std::to_string(round) + ")";
  fl_instr_id ids[4];
  for (int s = 0; s < 4; ++s)
    ids[s] = k.submit({part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT32, b[s].data(), b[s].data(), s == 2 && odd ? 5 : 4)});
  check_ok(k.wait(ids[1]), "seq 2" + in);
  const std::string last = "rank " + std::to_string(g_size - 1) + " issued all_reduce(int32, sum, count=5)";
  check_err(k.wait(ids[2]), FL_ERR_INSTRUCTION_FAILED, last, "seq 3 mismatched" + in);
  check_err(k.wait(ids[2]), FL_ERR_INSTRUCTION_FAILED, "issued all_reduce(int32, sum, count=4)", "seq 3 mismatched" + in);
  // Seq 4 was started with seq 3: it fails with it, or completed before (strict: it agreed).
  const fl_status_t s4 = k.wait(ids[3]);
  check(s4 == FL_ERR_CANCELLED || s4 == FL_OK, std::string("seq 4 in flight at the mismatch: ") + fl_status_name(s4) + in);
  const fl_instr_id s5 = k.submit({part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT32, b[4].data(), b[4].data(), 4)});
  check_err(k.wait(s5), FL_ERR_CANCELLED, "the communicator is broken", "seq 5 after the mismatch" + in);
  (void)fl_engine_synchronize_for(k.engine, kWaitNs);
  // A failed collective's buffers are the caller's again: nothing may write them any more,
  // whatever MPI still has pending (MPI drives every pending operation in any call).
  const std::vector<int32_t> sentinel(5, -7);
  for (int s = 2; s < 5; ++s) b[size_t(s)] = sentinel;
  for (int i = 0; i < 20; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (int s = 2; s < 5; ++s)
    check(b[size_t(s)] == sentinel, "seq " + std::to_string(s + 1) + "'s buffer written after it ended" + in);
}

// Rounds of it, each on a fresh engine and communicator (the buffers are freed between
// them): a write after a failure corrupts the heap, caught by a later allocation or by MPI.
void mismatch() {
  for (int round = 0; round < 6; ++round) mismatch_round(round);
}

// The signature exchange of a mismatch, issued on whichever thread tests, against the next
// collective's check issued by the lane runner: in a different order on rank 0 than on the
// others. When the exchange was an MPI_Iallgather on `ctl`, rank 0's exchange was matched
// with the others' next check (collectives match by issue order).
void mismatch_late() {
  Rank k;
  std::vector<std::vector<int32_t>> b(2, std::vector<int32_t>(5, 1));
  const bool odd = g_rank == g_size - 1;
  const fl_instr_id first = k.submit({part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT32, b[0].data(), b[0].data(), odd ? 5 : 4)});
  fl_instr_id second = 0;
  if (g_rank != 0) second = k.submit({part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT32, b[1].data(), b[1].data(), 4)});
  const std::string last = "rank " + std::to_string(g_size - 1) + " issued all_reduce(int32, sum, count=5)";
  check_err(k.wait(first), FL_ERR_INSTRUCTION_FAILED, last, "seq 1 mismatched");
  check_err(k.wait(first), FL_ERR_INSTRUCTION_FAILED, "issued all_reduce(int32, sum, count=4)", "seq 1 mismatched");
  if (g_rank == 0) second = k.submit({part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT32, b[1].data(), b[1].data(), 4)});
  check_err(k.wait(second), FL_ERR_CANCELLED, "", "seq 2 after the mismatch");
  (void)fl_engine_synchronize_for(k.engine, kWaitNs);
}

void timeout() {
  Rank k;
  check_ok(fl_comm_set_timeout(k.comm, 500), "fl_comm_set_timeout");
  std::vector<std::vector<int32_t>> b(3, std::vector<int32_t>(2, 1));
  check_ok(k.wait(k.submit({part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT32, b[0].data(), b[0].data(), 2)})), "seq 1");
  if (g_rank == 1) {  // late: until every other rank's seq 2 timed out
    MPI_Barrier(MPI_COMM_WORLD);
    check_ok(k.wait(k.submit({part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT32, b[1].data(), b[1].data(), 2)})),
             "rank 1's late seq 2 pairs with the peers' requests, still outstanding");
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    const fl_instr_id id = k.submit({part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT32, b[1].data(), b[1].data(), 2)});
    check_err(k.wait(id), FL_ERR_TIMEOUT, "timed out", "seq 2 without rank 1");
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("rank %d: seq 2 failed with FL_ERR_TIMEOUT after %.0f ms (timeout 500 ms)\n", g_rank, ms);
    const fl_instr_id after = k.submit({part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT32, b[2].data(), b[2].data(), 2)});
    check_err(k.wait(after), FL_ERR_CANCELLED, "broke", "seq 3 after the timeout");
    MPI_Barrier(MPI_COMM_WORLD);
  }
  // The peers' timed-out requests complete once rank 1 came: nothing is left outstanding.
  MPI_Barrier(MPI_COMM_WORLD);
}

// ---- several communicators, destroy -----------------------------------------------------------

void two_comms() {
  Rank k(1, false);
  fl_comm_t* a = k.create(1);
  fl_comm_t* b = k.create(1);  // the same lane
  fl_comm_t* c = k.create(2);
  fl_stream_t* s2 = k.stream(2, FL_STREAM_COLLECTIVE);
  std::vector<std::vector<int64_t>> v(30, std::vector<int64_t>(3, g_rank + 1));
  const int64_t want = int64_t(g_size) * (g_size + 1) / 2;
  for (int i = 0; i < 10; ++i) {
    auto pa = part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT64, v[3 * i].data(), v[3 * i].data(), 3);
    auto pb = part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT64, v[3 * i + 1].data(), v[3 * i + 1].data(), 3);
    auto pc = part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT64, v[3 * i + 2].data(), v[3 * i + 2].data(), 3);
    if (g_rank % 2 == 0) {
      k.submit({pa}, {}, a);
      k.submit({pb}, {}, b);
      k.submit({pc}, {}, c, s2);
    } else {  // crossed: nothing holds a lane while a collective is in flight
      k.submit({pc}, {}, c, s2);
      k.submit({pb}, {}, b);
      k.submit({pa}, {}, a);
    }
  }
  check_ok(fl_engine_synchronize_for(k.engine, kWaitNs), "fl_engine_synchronize_for");
  for (auto& x : v) check(x == std::vector<int64_t>(3, want), "a result of three communicators");
  for (fl_comm_t* x : {a, b, c}) check_ok(fl_comm_destroy(x), "fl_comm_destroy");
}

// Waits (bounded) until this rank's communicator has started `n` collectives (its dump says
// so), so that every rank's requests exist before anyone destroys anything.
void wait_started(fl_comm_t* c, int n) {
  const std::string path = "/tmp/flowlane_mpi_started_" + std::to_string(getpid()) + ".json";
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    check_ok(fl_comm_dump(c, path.c_str()), "fl_comm_dump");
    FILE* f = std::fopen(path.c_str(), "r");
    std::string text;
    char buf[4096];
    for (size_t got; f != nullptr && (got = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, got);
    if (f != nullptr) std::fclose(f);
    if (text.find("\"issued\":" + std::to_string(n)) != std::string::npos) break;
    if (std::chrono::steady_clock::now() > until) {
      check(false, "the collectives never started");
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::remove(path.c_str());
}

void destroy(const std::string& how) {
  auto k = std::make_unique<Rank>();
  std::vector<std::vector<float>> v(20, std::vector<float>(1 << 14, 1.0f));
  std::vector<fl_instr_id> ids;
  for (auto& x : v) ids.push_back(k->submit({part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, x.data(), x.data(), x.size())}));
  wait_started(k->comm, int(v.size()));
  if (how == "engine") {
    fl_engine_destroy(k->engine);  // aborts its communicators first
    k->engine = nullptr;
    k->comm = nullptr;
  } else {
    check_ok(fl_comm_destroy(k->comm), "fl_comm_destroy with collectives in flight");
    k->comm = nullptr;
    for (fl_instr_id id : ids) {
      const fl_status_t st = k->wait(id);
      check(st == FL_OK || st == FL_ERR_CANCELLED, std::string("a collective destroyed in flight: ") + fl_status_name(st));
    }
  }
  k.reset();
  // Every rank started every collective, so the requests MPI still holds complete: the
  // buffers may only go once they did (flowlane.h, fl_comm_create_transport).
  MPI_Barrier(MPI_COMM_WORLD);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
}

// ---- thread levels ----------------------------------------------------------------------------

int threads(const std::string& level, int argc, char** argv) {
  const int want = level == "single" ? MPI_THREAD_SINGLE
                   : level == "funneled" ? MPI_THREAD_FUNNELED
                   : level.rfind("serialized", 0) == 0 ? MPI_THREAD_SERIALIZED
                                                       : MPI_THREAD_MULTIPLE;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, want, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  {
    Rank k(1, false);
    fl_comm_desc_t cd = FL_COMM_DESC_INIT;
    cd.lane = 1;
    cd.flags = level == "serialized_flag" ? FL_MPI_SERIALIZED : 0;
    fl_comm_t* c = nullptr;
    MPI_Comm world = MPI_COMM_WORLD;
    const fl_status_t st = fl_mpi_comm_create(k.engine, &cd, &world, &c);
    const bool accepted = provided == MPI_THREAD_MULTIPLE || level == "serialized_flag";
    if (!accepted) {
      check_err(st, FL_ERR_INVALID_ARGUMENT, "MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided)",
                "MPI initialized with " + level);
      if (provided == MPI_THREAD_SERIALIZED) check_err(st, FL_ERR_INVALID_ARGUMENT, "FL_MPI_SERIALIZED", "serialized");
      std::printf("rank %d: %s refused: %s\n", g_rank, level.c_str(), fl_last_error_message());
    } else {
      check_ok(st, "MPI initialized with " + level);
      std::vector<int32_t> x(3, 1);
      k.comm = c;
      check_ok(k.wait(k.submit({part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT32, x.data(), x.data(), 3)})), "a collective");
      check(x == std::vector<int32_t>(3, g_size), "its result");
    }
  }
  MPI_Finalize();
  return g_failures == 0 ? 0 : 1;
}

}  // namespace

void hang(const std::string& kind);  // mpi_hangs.cpp

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s ops|skip|mismatch|mismatch_late|timeout|two_comms|destroy [engine]|threads LEVEL|hang KIND\n",
                 argv[0]);
    return 2;
  }
  const std::string scenario = argv[1], arg = argc > 2 ? argv[2] : "";
  if (scenario == "threads") return threads(arg, argc, argv);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  if (scenario == "ops") ops();
  else if (scenario == "skip") skip();
  else if (scenario == "mismatch") mismatch();
  else if (scenario == "mismatch_late") mismatch_late();
  else if (scenario == "timeout") timeout();
  else if (scenario == "two_comms") two_comms();
  else if (scenario == "destroy") destroy(arg);
  else if (scenario == "hang") hang(arg);
  else check(false, "unknown scenario " + scenario);
  int all = 0;
  MPI_Allreduce(&g_failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) std::printf("%s %s: %s (%d ranks)\n", scenario.c_str(), arg.c_str(), all == 0 ? "OK" : "FAILED", g_size);
  MPI_Finalize();
  return g_failures == 0 ? 0 : 1;
}
