// One process's rank of an NCCL communicator on the fake NCCL in cross-process mode: the
// collectives every multi-process test runs and checks (fake_nccl_procs.cpp without MPI,
// tests/mpi/mpi_nccl.cpp under mpirun). The values are those of fake_nccl_test.cpp's
// FakeNcclRanks.EveryCollectiveGivesTheRightValues (integer-valued, exact in every dtype),
// so a rank here must get the bits a rank of the in-process mode gets. Built against a real
// GPU too (flowlane_nccl_procs, scripts/dev/gpu-dist-check.sh): device_memory() then stages
// every buffer in device memory.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "flowlane/flowlane.h"

namespace fake_procs {

constexpr uint64_t kWaitNs = 60'000'000'000ull;  // every wait bounded: a hang fails, never sticks
constexpr fl_device_t kGpu{FL_DEVICE_CUDA, 0};

inline int& failures() {
  static int n = 0;
  return n;
}
inline int& my_rank() {
  static int r = 0;
  return r;
}

// Where the buffers live: by default in host memory, which is the fake runtime's device
// memory; with a real GPU, run_ops copies each buffer into device memory (to_device) before
// the collectives and back (to_host, which frees it) after.
struct DeviceMemory {
  void* (*to_device)(const void* host, size_t bytes) = nullptr;
  void (*to_host)(void* host, void* device, size_t bytes) = nullptr;
};
inline DeviceMemory& device_memory() {
  static DeviceMemory m;
  return m;
}

inline void check(bool ok, const std::string& what) {
  if (ok) return;
  ++failures();
  std::fprintf(stderr, "rank %d: FAILED: %s (last error: %s)\n", my_rank(), what.c_str(), fl_last_error_message());
}
inline void check_ok(fl_status_t st, const std::string& what) { check(st == FL_OK, what + " returned " + fl_status_name(st)); }

// `st` is `want` and the message has `fragment` in it.
inline void check_err(fl_status_t st, fl_status_t want, const std::string& fragment, const std::string& what) {
  const std::string msg = fl_last_error_message();
  check(st == want && msg.find(fragment) != std::string::npos,
        what + ": got " + fl_status_name(st) + " \"" + msg + "\", want " + fl_status_name(want) + " with \"" + fragment + "\"");
  std::fprintf(stderr, "rank %d: %s: %s: %s\n", my_rank(), what.c_str(), fl_status_name(st), msg.c_str());
}

inline fl_engine_t* make_engine() {
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = 2;
  fl_engine_t* e = nullptr;
  check_ok(fl_engine_create(&d, &e), "fl_engine_create");
  return e;
}

inline fl_comm_desc_t nccl_desc(uint64_t nranks, uint64_t rank, uint64_t lane = 1) {
  fl_comm_desc_t d = FL_COMM_DESC_INIT;
  d.nranks = nranks;
  d.rank = rank;
  d.lane = lane;
  d.device = 0;
  d.backend = FL_COMM_NCCL;
  return d;
}

inline fl_coll_part_t part(uint32_t op, uint32_t dtype, const void* send, void* recv, uint64_t count, uint32_t peer = 0,
                           uint32_t redop = FL_REDOP_SUM) {
  fl_coll_part_t p{};
  p.op = op;
  p.dtype = dtype;
  p.redop = redop;
  p.peer = peer;
  p.sendbuf = send;
  p.recvbuf = recv;
  p.count = count;
  return p;
}

// Submits one collective instruction on lane 1's device COLLECTIVE stream, writing `out`
// (may be null).
inline fl_status_t coll(fl_engine_t* e, fl_comm_t* c, std::vector<fl_coll_part_t> parts, fl_object_t* out = nullptr) {
  fl_stream_t* s = nullptr;
  if (fl_status_t st = fl_stream_get(e, 1, kGpu, FL_STREAM_COLLECTIVE, &s); st != FL_OK) return st;
  fl_operand_t w{out, FL_WRITE, 0};
  fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
  in.parts = parts.data();
  in.num_parts = parts.size();
  in.operands = out != nullptr ? &w : nullptr;
  in.num_operands = out != nullptr ? 1 : 0;
  in.name = "fake_procs";
  return fl_submit_collective(s, c, &in, nullptr);
}

inline uint16_t to_half(float v) {  // small positive integers only
  int e = 0;
  const float m = std::frexp(v, &e);
  return uint16_t(((e - 1 + 15) << 10) | (uint32_t((m * 2 - 1) * 1024) & 0x3ff));
}
inline float from_half(uint16_t h) { return std::ldexp(1.0f + float(h & 0x3ff) / 1024.0f, int((h >> 10) & 0x1f) - 15); }
inline uint16_t to_bf16(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return uint16_t(b >> 16);
}
inline float from_bf16(uint16_t v) {
  const uint32_t b = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Every op (all-reduce with each reduction, all-gather, reduce-scatter, broadcast, a
// send/recv ring) in several dtypes, in place and not, then `rounds` all-reduces in a row;
// checks every value. Rank r of n; every rank must call it.
inline void run_ops(fl_engine_t* e, fl_comm_t* c, int r, int n, int rounds = 20) {
  constexpr int kC = 5;
  std::vector<float> ar_s, ar_r(kC), rs_s, rs_r(2), ip;
  std::vector<int32_t> mx_s, mx_r(kC), ag_s{r, r + 1, r + 2}, ag_r(size_t(3 * n)), ring_s{1000 + r, 2000 + r}, ring_r(2);
  std::vector<int64_t> pr_s, pr_r(kC), bc(4, r == n - 1 ? 77 + r : -1);
  std::vector<double> mn_s, mn_r(kC);
  std::vector<uint8_t> u8_s, u8_r(kC);
  std::vector<uint16_t> h_s(kC, to_half(float(r + 1))), h_r(kC), b_s(kC, to_bf16(float(r + 1))), b_r(kC);
  for (int k = 0; k < kC; ++k) {
    ar_s.push_back(float(r + 1 + k));
    mx_s.push_back(r * 10 - k);
    pr_s.push_back(r + 2);
    mn_s.push_back(double(r) - 0.5 * k);
    ip.push_back(float(r));
    u8_s.push_back(uint8_t(r + k));
  }
  for (int k = 0; k < 2 * n; ++k) rs_s.push_back(float(r * 100 + k));
  const uint32_t next = uint32_t((r + 1) % n), prev = uint32_t((r + n - 1) % n);
  std::vector<std::tuple<void*, void*, size_t>> staged;  // (host, device, bytes)
  auto dev = [&](auto& v) {
    using T = typename std::remove_reference_t<decltype(v)>::value_type;
    if (device_memory().to_device == nullptr) return v.data();
    void* d = device_memory().to_device(v.data(), v.size() * sizeof(T));
    staged.emplace_back(v.data(), d, v.size() * sizeof(T));
    return static_cast<T*>(d);
  };
  float* ipd = dev(ip);
  int64_t* bcd = dev(bc);
  fl_object_t* o = nullptr;
  check_ok(fl_object_create(e, nullptr, nullptr, &o), "fl_object_create");
  check_ok(coll(e, c, {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, dev(ar_s), dev(ar_r), kC)}, o), "all_reduce f32");
  check_ok(coll(e, c, {part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT32, dev(mx_s), dev(mx_r), kC, 0, FL_REDOP_MAX)}), "max i32");
  check_ok(coll(e, c, {part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT64, dev(pr_s), dev(pr_r), kC, 0, FL_REDOP_PROD)}), "prod i64");
  check_ok(coll(e, c, {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT64, dev(mn_s), dev(mn_r), kC, 0, FL_REDOP_MIN)}), "min f64");
  check_ok(coll(e, c, {part(FL_COLL_ALL_REDUCE, FL_DTYPE_UINT8, dev(u8_s), dev(u8_r), kC)}), "sum u8");
  check_ok(coll(e, c, {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT16, dev(h_s), dev(h_r), kC)}), "sum f16");
  check_ok(coll(e, c, {part(FL_COLL_ALL_REDUCE, FL_DTYPE_BFLOAT16, dev(b_s), dev(b_r), kC)}), "sum bf16");
  check_ok(coll(e, c, {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, ipd, ipd, kC)}), "in-place all_reduce");
  check_ok(coll(e, c, {part(FL_COLL_ALL_GATHER, FL_DTYPE_INT32, dev(ag_s), dev(ag_r), 3)}), "all_gather");
  check_ok(coll(e, c, {part(FL_COLL_REDUCE_SCATTER, FL_DTYPE_FLOAT32, dev(rs_s), dev(rs_r), 2)}), "reduce_scatter");
  check_ok(coll(e, c, {part(FL_COLL_BROADCAST, FL_DTYPE_INT64, bcd, bcd, 4, uint32_t(n - 1))}), "broadcast");
  check_ok(coll(e, c, {part(FL_COLL_SEND, FL_DTYPE_INT32, dev(ring_s), nullptr, 2, next),
                       part(FL_COLL_RECV, FL_DTYPE_INT32, nullptr, dev(ring_r), 2, prev)}),
           "send/recv ring");
  std::vector<std::vector<int32_t>> many(size_t(rounds), std::vector<int32_t>(3));
  std::vector<int32_t> mine{r, 2 * r, 1};
  const int32_t* mined = dev(mine);
  for (auto& m : many) check_ok(coll(e, c, {part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT32, mined, dev(m), 3)}), "many");
  check_ok(fl_object_wait_for(o, FL_READ, kWaitNs), "the first all_reduce's output");
  check_ok(fl_engine_synchronize(e), "fl_engine_synchronize");
  fl_object_release(o);
  for (auto& [host, device, bytes] : staged) device_memory().to_host(host, device, bytes);

  const std::string at = " (rank " + std::to_string(r) + " of " + std::to_string(n) + ")";
  const float tri = float(n * (n + 1) / 2);
  for (int k = 0; k < kC; ++k) {
    float sum = 0, ips = 0;
    int32_t mx = INT32_MIN;
    int64_t pr = 1;
    double mn = 1e300;
    unsigned u8 = 0;
    for (int q = 0; q < n; ++q) {
      sum += float(q + 1 + k);
      ips += float(q);
      mx = std::max<int32_t>(mx, q * 10 - k);
      pr *= q + 2;
      mn = std::min(mn, double(q) - 0.5 * k);
      u8 += unsigned(q + k);
    }
    check(ar_r[size_t(k)] == sum, "all_reduce sum" + at);
    check(mx_r[size_t(k)] == mx, "all_reduce max" + at);
    check(pr_r[size_t(k)] == pr, "all_reduce prod" + at);
    check(mn_r[size_t(k)] == mn, "all_reduce min" + at);
    check(u8_r[size_t(k)] == uint8_t(u8), "all_reduce uint8" + at);
    check(ip[size_t(k)] == ips, "in-place all_reduce" + at);
    check(from_half(h_r[size_t(k)]) == tri, "float16 sum" + at);
    check(from_bf16(b_r[size_t(k)]) == tri, "bfloat16 sum" + at);
  }
  for (int q = 0; q < n; ++q)
    for (int k = 0; k < 3; ++k) check(ag_r[size_t(q * 3 + k)] == q + k, "all_gather" + at);
  for (int k = 0; k < 2; ++k) {
    float s = 0;
    for (int q = 0; q < n; ++q) s += float(q * 100 + r * 2 + k);
    check(rs_r[size_t(k)] == s, "reduce_scatter" + at);
  }
  for (int k = 0; k < 4; ++k) check(bc[size_t(k)] == 77 + n - 1, "broadcast" + at);
  check(ring_r[0] == 1000 + int(prev) && ring_r[1] == 2000 + int(prev), "send/recv ring" + at);
  for (auto& m : many) check(m[0] == n * (n - 1) / 2 && m[1] == n * (n - 1) && m[2] == n, "many all_reduces" + at);
}

}  // namespace fake_procs
