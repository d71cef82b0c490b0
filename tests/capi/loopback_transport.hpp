// A transport for fl_comm_create_transport whose ranks are communicators of one process
// (usually one engine each): the in-process stand-in for MPI that tests the seam and the
// engine's asynchronous collectives in every build. Public C API only.
//
// start() posts the rank's parts for its sequence number and returns at once; test() of any
// rank completes the round once every rank posted: it compares the fingerprints (a mismatch
// fails every rank's request naming both signatures and the ranks), propagates a skip
// (FL_ERR_DEPENDENCY_FAILED naming the rank that skipped: a skipped rank's buffers are never
// touched), and moves the data of all_reduce (sum, int32/int64/float32/float64),
// all_gather and broadcast. Like MPI, a round a rank never joins never completes, and
// nothing is cancelled: abort() only records that it was called.
//
// Failure injection, per rank: fail_start_at (start() fails at that sequence number),
// fail_test_at (test() reports an error of the "library" at that sequence number); and
// only_thread (a request is seen done only by a test() on that thread).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "flowlane/flowlane.h"

namespace fltest {

struct Loopback {
  struct Post {
    bool skipped = false;
    uint64_t fingerprint = 0;
    std::string signature;
    std::vector<fl_coll_part_t> parts;
  };
  struct Round {
    std::vector<std::unique_ptr<Post>> posts;  // per rank; null until it starts
    uint32_t posted = 0;
    bool done = false;
    std::vector<std::string> errors;  // per rank, after done: "" or the failure
    std::vector<fl_status_t> status;
    uint32_t collected = 0;           // ranks whose request finished
  };
  struct Rank;
  struct Request {
    Rank* rank;
    uint64_t seq;
  };
  struct Rank {
    Loopback* group = nullptr;
    uint32_t rank = 0;
    std::atomic<int> aborts{0};
    std::atomic<int> destroys{0};
    std::atomic<uint64_t> tests{0};
    std::string last_abort;  // under group->mu
    uint64_t fail_start_at = 0, fail_test_at = 0;
    // When set, a test() on any other thread never sees the request done (a library that
    // advances only on the thread that waits, as MPI without a progress thread of its own).
    std::thread::id only_thread{};
    std::atomic<uint64_t> tests_on_only_thread{0};
  };

  explicit Loopback(uint32_t n) : nranks(n), ranks(n) {
    for (uint32_t r = 0; r < n; ++r) {
      ranks[r] = std::make_unique<Rank>();
      ranks[r]->group = this;
      ranks[r]->rank = r;
    }
  }

  const uint32_t nranks;
  std::vector<std::unique_ptr<Rank>> ranks;
  std::mutex mu;
  std::map<uint64_t, Round> rounds;
  std::atomic<int> outstanding{0};

  fl_comm_transport_t transport(uint32_t r, uint64_t id = 0x5eed) {
    fl_comm_transport_t t{};
    t.struct_size = sizeof t;
    t.name = "loopback";
    t.id = id;
    t.state = ranks[r].get();
    t.start = &start;
    t.test = &test;
    t.abort = &abort;
    t.destroy = &destroy;
    return t;
  }

  static void copy_msg(char* msg, uint64_t size, const std::string& text) {
    if (size == 0) return;
    const size_t n = std::min<size_t>(text.size(), size_t(size - 1));
    std::memcpy(msg, text.data(), n);
    msg[n] = 0;
  }

  static fl_status_t start(void* state, const fl_comm_transport_op_t* op, void** out, char* msg, uint64_t size) {
    auto* me = static_cast<Rank*>(state);
    Loopback& g = *me->group;
    if (op->seq == me->fail_start_at) {
      copy_msg(msg, size, "injected start failure at seq " + std::to_string(op->seq));
      return FL_ERR_INTERNAL;
    }
    auto post = std::make_unique<Post>();
    post->skipped = (op->flags & FL_TRANSPORT_SKIPPED) != 0;
    post->fingerprint = op->fingerprint;
    post->signature = op->signature;
    if (!post->skipped) post->parts.assign(op->parts, op->parts + op->num_parts);
    std::lock_guard<std::mutex> lk(g.mu);
    Round& r = g.rounds[op->seq];
    if (r.posts.empty()) {
      r.posts.resize(g.nranks);
      r.errors.resize(g.nranks);
      r.status.resize(g.nranks, FL_OK);
    }
    r.posts[me->rank] = std::move(post);
    ++r.posted;
    g.outstanding.fetch_add(1);
    *out = new Request{me, op->seq};
    return FL_OK;
  }

  // Under mu, once every rank posted.
  static void run_round(Loopback& g, uint64_t seq, Round& r) {
    r.done = true;
    std::string err;
    fl_status_t st = FL_OK;
    for (uint32_t q = 0; q < g.nranks && err.empty(); ++q) {
      if (r.posts[q]->skipped) {
        err = "rank " + std::to_string(q) + " skipped collective seq " + std::to_string(seq);
        st = FL_ERR_DEPENDENCY_FAILED;
      }
    }
    for (uint32_t q = 1; q < g.nranks && err.empty(); ++q) {
      if (r.posts[q]->fingerprint != r.posts[0]->fingerprint) {
        err = "mismatch at seq " + std::to_string(seq) + ": rank 0 issued " + r.posts[0]->signature + ", rank " +
              std::to_string(q) + " issued " + r.posts[q]->signature;
        st = FL_ERR_INSTRUCTION_FAILED;
      }
    }
    for (uint32_t q = 0; q < g.nranks; ++q) {
      r.errors[q] = err;
      r.status[q] = st;
    }
    if (!err.empty()) return;
    for (size_t k = 0; k < r.posts[0]->parts.size(); ++k) move_part(g, r, k);
  }

  template <class T>
  static void sum_into(std::vector<unsigned char>& acc, const void* in, uint64_t n) {
    T* a = reinterpret_cast<T*>(acc.data());
    const T* b = static_cast<const T*>(in);
    for (uint64_t i = 0; i < n; ++i) a[i] = T(a[i] + b[i]);
  }

  static size_t dsize(uint32_t dt) {
    switch (dt) {
      case FL_DTYPE_INT32: case FL_DTYPE_FLOAT32: case FL_DTYPE_UINT32: return 4;
      case FL_DTYPE_INT64: case FL_DTYPE_FLOAT64: case FL_DTYPE_UINT64: return 8;
      case FL_DTYPE_FLOAT16: case FL_DTYPE_BFLOAT16: return 2;
      default: return 1;
    }
  }

  static void move_part(Loopback& g, Round& r, size_t k) {
    const fl_coll_part_t& p0 = r.posts[0]->parts[k];
    const size_t bytes = size_t(p0.count) * dsize(p0.dtype);
    std::vector<unsigned char> tmp;
    switch (p0.op) {
      case FL_COLL_ALL_REDUCE: {
        const auto* s0 = static_cast<const unsigned char*>(p0.sendbuf);
        tmp.assign(s0, s0 + bytes);
        for (uint32_t q = 1; q < g.nranks; ++q) {
          const void* in = r.posts[q]->parts[k].sendbuf;
          switch (p0.dtype) {
            case FL_DTYPE_INT32: sum_into<int32_t>(tmp, in, p0.count); break;
            case FL_DTYPE_INT64: sum_into<int64_t>(tmp, in, p0.count); break;
            case FL_DTYPE_FLOAT32: sum_into<float>(tmp, in, p0.count); break;
            case FL_DTYPE_FLOAT64: sum_into<double>(tmp, in, p0.count); break;
            default: break;
          }
        }
        for (uint32_t q = 0; q < g.nranks; ++q) std::memcpy(r.posts[q]->parts[k].recvbuf, tmp.data(), bytes);
        break;
      }
      case FL_COLL_ALL_GATHER:
        tmp.resize(bytes * g.nranks);
        for (uint32_t q = 0; q < g.nranks; ++q) std::memcpy(tmp.data() + q * bytes, r.posts[q]->parts[k].sendbuf, bytes);
        for (uint32_t q = 0; q < g.nranks; ++q) std::memcpy(r.posts[q]->parts[k].recvbuf, tmp.data(), tmp.size());
        break;
      case FL_COLL_BROADCAST: {
        const auto* s = static_cast<const unsigned char*>(r.posts[p0.peer]->parts[k].sendbuf);
        tmp.assign(s, s + bytes);
        for (uint32_t q = 0; q < g.nranks; ++q) std::memcpy(r.posts[q]->parts[k].recvbuf, tmp.data(), bytes);
        break;
      }
      default: break;
    }
  }

  static fl_status_t test(void* state, void* request, int32_t* done, char* msg, uint64_t size) {
    auto* me = static_cast<Rank*>(state);
    auto* req = static_cast<Request*>(request);
    Loopback& g = *me->group;
    me->tests.fetch_add(1, std::memory_order_relaxed);
    *done = 0;
    if (me->only_thread != std::thread::id{}) {
      if (std::this_thread::get_id() != me->only_thread) return FL_OK;
      me->tests_on_only_thread.fetch_add(1, std::memory_order_relaxed);
    }
    std::lock_guard<std::mutex> lk(g.mu);
    Round& r = g.rounds[req->seq];
    if (!r.done && r.posted == g.nranks) run_round(g, req->seq, r);
    if (!r.done) return FL_OK;
    fl_status_t st = r.status[me->rank];
    std::string err = r.errors[me->rank];
    if (st == FL_OK && req->seq == me->fail_test_at) {
      st = FL_ERR_INSTRUCTION_FAILED;
      err = "injected library error at seq " + std::to_string(req->seq);
    }
    *done = 1;
    if (++r.collected == g.nranks) g.rounds.erase(req->seq);
    delete req;
    g.outstanding.fetch_sub(1);
    if (st != FL_OK) copy_msg(msg, size, err);
    return st;
  }

  static void abort(void* state, const char* why) {
    auto* me = static_cast<Rank*>(state);
    std::lock_guard<std::mutex> lk(me->group->mu);
    me->last_abort = why;
    me->aborts.fetch_add(1);
  }
  static void destroy(void* state) { static_cast<Rank*>(state)->destroys.fetch_add(1); }
};

}  // namespace fltest
