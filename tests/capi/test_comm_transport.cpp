// Communicators over a transport (fl_comm_create_transport), against the in-process
// loopback transport (loopback_transport.hpp): collectives are asynchronous (the lane runs
// on while one is in flight), random programs give the sequential model's numbers, skips and
// mismatches fail every rank, a start or library failure breaks the communicator, the
// timeout fails the collective after the dump, destroy with collectives in flight never
// hangs, and the transport's destroy runs exactly once, after its last request.
#include <random>

#include "loopback_transport.hpp"
#include "test_diag_util.hpp"
#include "test_util.hpp"

using fldiag::coll_of;
using fldiag::contains;
using fldiag::host_of;

namespace {

constexpr uint64_t kWaitNs = 60'000'000'000ull;

// The transport's state must outlive its requests: a request flowlane was told to forget
// (a timeout, a destroy in flight) stays the transport's until it completes, as with MPI.
// A group whose requests never complete (a rank never came) is left allocated.
void retire(fltest::Loopback* g) {
  const auto until = fltest::Clock::now() + std::chrono::seconds(10);
  while (g->outstanding.load() != 0 && fltest::Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (g->outstanding.load() == 0) delete g;  // else: leaked on purpose
}

struct Ranks {
  fltest::Loopback& group;
  std::vector<fl_engine_t*> engines;
  std::vector<fl_comm_t*> comms;
  explicit Ranks(uint32_t n, uint32_t lane = 1, uint64_t workers = 2) : group(*new fltest::Loopback(n)) {
    for (uint32_t r = 0; r < n; ++r) {
      fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
      d.num_workers = workers;
      d.max_lanes = 4;
      fl_engine_t* e = nullptr;
      EXPECT_FL_OK(fl_engine_create(&d, &e));
      engines.push_back(e);
      comms.push_back(make_comm(r, lane));
    }
  }
  fl_comm_t* make_comm(uint32_t r, uint32_t lane) {
    fl_comm_desc_t cd = FL_COMM_DESC_INIT;
    cd.nranks = group.nranks;
    cd.rank = r;
    cd.lane = lane;
    fl_comm_transport_t t = group.transport(r);
    fl_comm_t* c = nullptr;
    EXPECT_FL_OK(fl_comm_create_transport(engines[r], &cd, &t, &c));
    return c;
  }
  ~Ranks() {
    for (fl_engine_t* e : engines) fl_engine_destroy(e);
    retire(&group);
  }
  fl_instr_id submit(uint32_t r, std::vector<fl_coll_part_t> parts, std::vector<fl_operand_t> ops = {},
                     const char* name = nullptr, uint32_t lane = 1) {
    fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
    in.parts = parts.data();
    in.num_parts = parts.size();
    in.operands = ops.empty() ? nullptr : ops.data();
    in.num_operands = ops.size();
    in.name = name;
    fl_instr_id id = 0;
    EXPECT_FL_OK(fl_submit_collective(coll_of(engines[r], lane), comms[r], &in, &id));
    return id;
  }
  fl_status_t wait(uint32_t r, fl_instr_id id, uint32_t lane = 1) {
    return fl_instr_wait_for(coll_of(engines[r], lane), id, kWaitNs);
  }
};

// n more two-rank loopback groups on base's two engines, group k's communicators on lane
// lane_of(k) with transport id id_base + k: comms[r][k] is rank r's of group k.
template <class LaneOf>
void more_comms(Ranks& base, uint32_t n, LaneOf lane_of, uint64_t id_base, std::vector<fltest::Loopback*>& groups,
                std::vector<std::vector<fl_comm_t*>>& comms) {
  for (uint32_t k = 0; k < n; ++k) {
    groups.push_back(new fltest::Loopback(2));
    for (uint32_t r = 0; r < 2; ++r) {
      fl_comm_desc_t cd = FL_COMM_DESC_INIT;
      cd.nranks = 2;
      cd.rank = r;
      cd.lane = lane_of(k);
      fl_comm_transport_t t = groups[k]->transport(r, id_base + k);
      fl_comm_t* c = nullptr;
      EXPECT_FL_OK(fl_comm_create_transport(base.engines[r], &cd, &t, &c));
      comms[r].push_back(c);
    }
  }
}

fl_coll_part_t allreduce(std::vector<int64_t>& b) {
  return fltest::coll_part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT64, b.data(), b.data(), b.size());
}

}  // namespace

TEST(CommTransport, AllReduceOnEveryRankAndTheLaneRunsOnMeanwhile) {
  Ranks ranks(3);
  std::vector<std::vector<int64_t>> buf(3, std::vector<int64_t>(8));
  for (uint32_t r = 0; r < 3; ++r) std::fill(buf[r].begin(), buf[r].end(), int64_t(r + 1));
  const fl_instr_id id0 = ranks.submit(0, {allreduce(buf[0])});
  // Rank 0's collective waits for its peers; its lane runs other work meanwhile.
  std::atomic<bool> ran{false};
  fltest::submit(host_of(ranks.engines[0], 1), [&] {
    ran = true;
    return FL_OK;
  });
  ASSERT_FL_OK(fl_stream_synchronize_for(host_of(ranks.engines[0], 1), kWaitNs));
  EXPECT_TRUE(ran.load());
  uint32_t state = 0;
  ASSERT_FL_OK(fl_instr_query(coll_of(ranks.engines[0], 1), id0, &state));
  EXPECT_EQ(state, FL_INSTR_PENDING);
  fl_instr_id ids[3] = {id0, ranks.submit(1, {allreduce(buf[1])}), ranks.submit(2, {allreduce(buf[2])})};
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_FL_OK(ranks.wait(r, ids[r]));
    EXPECT_EQ(buf[r], std::vector<int64_t>(8, 6));
  }
}

TEST(CommTransport, BroadcastAndAllGather) {
  Ranks ranks(2);
  std::vector<float> b[2] = {{1, 2, 3}, {0, 0, 0}};
  std::vector<int32_t> g_in[2] = {{10, 11}, {20, 21}}, g_out[2] = {std::vector<int32_t>(4), std::vector<int32_t>(4)};
  fl_instr_id ids[2];
  for (uint32_t r = 0; r < 2; ++r)
    ids[r] = ranks.submit(r, {fltest::coll_part(FL_COLL_BROADCAST, FL_DTYPE_FLOAT32, b[r].data(), b[r].data(), 3, 0, 0),
                              fltest::coll_part(FL_COLL_ALL_GATHER, FL_DTYPE_INT32, g_in[r].data(), g_out[r].data(), 2)});
  for (uint32_t r = 0; r < 2; ++r) {
    ASSERT_FL_OK(ranks.wait(r, ids[r]));
    EXPECT_EQ(b[r], (std::vector<float>{1, 2, 3}));
    EXPECT_EQ(g_out[r], (std::vector<int32_t>{10, 11, 20, 21}));
  }
}

// Random SPMD programs: compute instructions on three lanes (one of them the collective's)
// that read and write objects, and in-place all-reduces of objects, checked against the
// sequential model. Lane order no longer orders a collective's same-lane readers (it may
// still be in flight): they wait for it through edges.
TEST(CommTransport, RandomProgramsGiveTheSequentialModelsNumbers) {
  const int kRounds = int(fl_scaled(12, 3)), kSteps = int(fl_scaled(120, 40));
  for (int round = 0; round < kRounds; ++round) {
    std::mt19937 rng(uint32_t(1000 + round));
    const uint32_t n = 2 + rng() % 3;
    const size_t kObjs = 4, kLen = 6;
    Ranks ranks(n);
    // model[r][o] and the engines' buffers
    std::vector<std::vector<std::vector<int64_t>>> model(n, std::vector<std::vector<int64_t>>(kObjs)), buf = model;
    std::vector<std::vector<fl_object_t*>> objs(n);
    for (uint32_t r = 0; r < n; ++r)
      for (size_t o = 0; o < kObjs; ++o) {
        model[r][o].assign(kLen, int64_t(r * 7 + o));
        buf[r][o] = model[r][o];
        objs[r].push_back(fltest::make_obj(ranks.engines[r]));
      }
    for (int step = 0; step < kSteps; ++step) {
      const bool coll = rng() % 3 == 0;
      const size_t a = rng() % kObjs, b = rng() % kObjs, out = rng() % kObjs;
      const uint32_t lane = rng() % 3;  // lane 1 holds the collective stream too
      if (coll) {
        std::vector<int64_t> sum(kLen, 0);
        for (uint32_t r = 0; r < n; ++r)
          for (size_t i = 0; i < kLen; ++i) sum[i] += model[r][a][i];
        for (uint32_t r = 0; r < n; ++r) model[r][a] = sum;
        for (uint32_t r = 0; r < n; ++r) ranks.submit(r, {allreduce(buf[r][a])}, {fltest::RW(objs[r][a])}, "allreduce");
        continue;
      }
      for (uint32_t r = 0; r < n; ++r) {
        for (size_t i = 0; i < kLen; ++i) model[r][out][i] = model[r][a][i] * 3 + model[r][b][i] + step + r;
        auto* B = &buf[r];
        std::vector<fl_operand_t> ops{fltest::R(objs[r][a]), fltest::R(objs[r][b]), fltest::W(objs[r][out])};
        if (a == out || b == out) ops = {fltest::RW(objs[r][out]), fltest::R(objs[r][a == out ? b : a])};
        fltest::submit(host_of(ranks.engines[r], lane), [B, a, b, out, step, r] {
          std::vector<int64_t> x((*B)[a]), y((*B)[b]);
          for (size_t i = 0; i < x.size(); ++i) (*B)[out][i] = x[i] * 3 + y[i] + step + r;
          return FL_OK;
        }, ops, "compute");
      }
    }
    for (uint32_t r = 0; r < n; ++r) {
      ASSERT_FL_OK(fl_engine_synchronize_for(ranks.engines[r], kWaitNs));
      EXPECT_EQ(buf[r], model[r]) << "round " << round << " rank " << r;
      for (fl_object_t* o : objs[r]) fl_object_release(o);
    }
  }
}

// A rank whose input is poisoned still takes part: every rank's collective fails naming it,
// nobody waits forever, and the next collective works.
TEST(CommTransport, APoisonedInputOnOneRankFailsEveryRanksCollectiveAndTheNextOneWorks) {
  Ranks ranks(3);
  std::vector<std::vector<int64_t>> buf(3, std::vector<int64_t>(4, 1));
  fl_object_t* bad = fltest::make_obj(ranks.engines[1]);
  fltest::submit(host_of(ranks.engines[1], 0), [] { return FL_ERR_INSTRUCTION_FAILED; }, {fltest::W(bad)}, "bad");
  std::vector<fl_instr_id> ids;
  for (uint32_t r = 0; r < 3; ++r)
    ids.push_back(ranks.submit(r, {allreduce(buf[r])}, r == 1 ? std::vector<fl_operand_t>{fltest::R(bad)}
                                                              : std::vector<fl_operand_t>{}));
  EXPECT_FL_ERR(ranks.wait(1, ids[1]), FL_ERR_DEPENDENCY_FAILED, "skipped");
  for (uint32_t r : {0u, 2u}) EXPECT_FL_ERR(ranks.wait(r, ids[r]), FL_ERR_INSTRUCTION_FAILED, "rank 1 skipped");
  EXPECT_EQ(buf[1], std::vector<int64_t>(4, 1)) << "a skipped rank's buffers are not touched";
  ids.clear();
  for (uint32_t r = 0; r < 3; ++r) ids.push_back(ranks.submit(r, {allreduce(buf[r])}));
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_FL_OK(ranks.wait(r, ids[r]));
    EXPECT_EQ(buf[r], std::vector<int64_t>(4, 3));
  }
  fl_object_release(bad);
}

TEST(CommTransport, AMismatchFailsEveryRankNamingBothSignaturesAndBreaksTheCommunicator) {
  Ranks ranks(2);
  std::vector<std::vector<int64_t>> buf(2, std::vector<int64_t>(5, 1));
  fl_instr_id a = ranks.submit(0, {fltest::coll_part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT64, buf[0].data(), buf[0].data(), 4)});
  fl_instr_id b = ranks.submit(1, {fltest::coll_part(FL_COLL_ALL_REDUCE, FL_DTYPE_INT64, buf[1].data(), buf[1].data(), 5)});
  EXPECT_FL_ERR(ranks.wait(0, a), FL_ERR_INSTRUCTION_FAILED, "rank 1 issued all_reduce(int64, sum, count=5)");
  EXPECT_FL_ERR(ranks.wait(1, b), FL_ERR_INSTRUCTION_FAILED, "rank 0 issued all_reduce(int64, sum, count=4)");
  for (uint32_t r = 0; r < 2; ++r) {
    const fl_instr_id id = ranks.submit(r, {allreduce(buf[r])});
    EXPECT_FL_ERR(ranks.wait(r, id), FL_ERR_CANCELLED, "the communicator is broken");  // without waiting for the peer
  }
  EXPECT_EQ(ranks.group.ranks[0]->destroys.load(), 0);
}

TEST(CommTransport, AFailedStartOrLibraryErrorBreaksTheCommunicatorWithTheTransportsMessage) {
  Ranks ranks(2);
  ranks.group.ranks[0]->fail_start_at = 2;
  std::vector<std::vector<int64_t>> buf(2, std::vector<int64_t>(2, 1));
  std::vector<fl_instr_id> first, second;
  for (uint32_t r = 0; r < 2; ++r) first.push_back(ranks.submit(r, {allreduce(buf[r])}));
  for (uint32_t r = 0; r < 2; ++r) EXPECT_FL_OK(ranks.wait(r, first[r]));
  const fl_instr_id s0 = ranks.submit(0, {allreduce(buf[0])}, {}, "second");
  EXPECT_FL_ERR(ranks.wait(0, s0), FL_ERR_INTERNAL, "injected start failure at seq 2");
  const fl_instr_id t0 = ranks.submit(0, {allreduce(buf[0])}, {}, "third");
  EXPECT_FL_ERR(ranks.wait(0, t0), FL_ERR_CANCELLED, "injected start failure");

  Ranks other(2);
  other.group.ranks[1]->fail_test_at = 1;
  std::vector<fl_instr_id> ids;
  for (uint32_t r = 0; r < 2; ++r) ids.push_back(other.submit(r, {allreduce(buf[r])}));
  EXPECT_FL_OK(other.wait(0, ids[0]));
  EXPECT_FL_ERR(other.wait(1, ids[1]), FL_ERR_INSTRUCTION_FAILED, "injected library error at seq 1");
}

// The timeout: rank 1 never comes. Rank 0's collective is dumped, then fails with
// FL_ERR_TIMEOUT; the transport is told (abort) and its request stays outstanding; when
// rank 1 comes late, that request completes and, the communicator destroyed, the
// transport's destroy runs once.
TEST(CommTransport, TheTimeoutFailsTheCollectiveAndTheRequestIsTestedUntilDone) {
  auto ranks = std::make_unique<Ranks>(2);
  ASSERT_FL_OK(fl_comm_set_timeout(ranks->comms[0], 100));
  std::vector<std::vector<int64_t>> buf(2, std::vector<int64_t>(3, 1));
  const fl_instr_id a = ranks->submit(0, {allreduce(buf[0])}, {}, "lonely");
  const fl_instr_id b = ranks->submit(0, {allreduce(buf[0])}, {}, "behind");
  EXPECT_FL_ERR(ranks->wait(0, a), FL_ERR_TIMEOUT, "timed out");
  EXPECT_FL_ERR(ranks->wait(0, b), FL_ERR_CANCELLED, "its request stays outstanding");
  EXPECT_EQ(ranks->group.ranks[0]->aborts.load(), 1);
  EXPECT_EQ(ranks->group.outstanding.load(), 2) << "the requests are still the transport's";
  ASSERT_FL_OK(fl_comm_destroy(ranks->comms[0]));
  ranks->comms[0] = nullptr;
  EXPECT_EQ(ranks->group.ranks[0]->destroys.load(), 0) << "destroyed with requests outstanding";
  for (int k = 0; k < 2; ++k) ranks->submit(1, {allreduce(buf[1])});  // rank 1, late
  ASSERT_FL_OK(fl_engine_synchronize_for(ranks->engines[1], kWaitNs));
  const auto until = fltest::Clock::now() + std::chrono::seconds(60);
  while (ranks->group.ranks[0]->destroys.load() == 0 && fltest::Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(ranks->group.ranks[0]->destroys.load(), 1);
  EXPECT_EQ(ranks->group.outstanding.load(), 0);
}

// fl_comm_destroy with collectives in flight (and queued behind): they fail with
// FL_ERR_CANCELLED at once, the engine drains, nothing hangs; engine destroy likewise.
TEST(CommTransport, DestroyWithCollectivesInFlightNeverHangs) {
  Ranks ranks(2);
  std::vector<std::vector<int64_t>> buf(2, std::vector<int64_t>(3, 1));
  std::vector<fl_instr_id> ids;
  for (int k = 0; k < 5; ++k) ids.push_back(ranks.submit(0, {allreduce(buf[0])}));
  ASSERT_FL_OK(fl_comm_destroy(ranks.comms[0]));
  ranks.comms[0] = nullptr;
  for (fl_instr_id id : ids) EXPECT_FL_ERR(ranks.wait(0, id), FL_ERR_CANCELLED, "aborted");
  // Rank 1's collectives pair with rank 0's in-flight requests (which MPI cannot cancel
  // either): they complete, and so rank 0's transport is destroyed once they are done.
  for (int k = 0; k < 5; ++k) ranks.submit(1, {allreduce(buf[1])});
  fl_engine_destroy(ranks.engines[1]);  // with rank 1's last collectives maybe in flight
  ranks.engines[1] = nullptr;
  fl_engine_destroy(ranks.engines[0]);
  ranks.engines[0] = nullptr;
  ranks.engines.clear();
}

// A communicator destroyed from inside a callback of its own engine, while its collectives
// are in flight, and dumps taken from callbacks meanwhile.
TEST(CommTransport, DestroyAndDumpFromACallbackWhileCollectivesAreInFlight) {
  Ranks ranks(2);
  std::vector<std::vector<int64_t>> buf(2, std::vector<int64_t>(3, 1));
  std::vector<fl_instr_id> ids;
  for (int k = 0; k < 3; ++k) ids.push_back(ranks.submit(0, {allreduce(buf[0])}));
  fl_comm_t* c = ranks.comms[0];
  const std::string path = fltest::unique_temp_path("transport_dump.json");
  const fl_instr_id cb = fltest::submit(host_of(ranks.engines[0], 2), [c, path] {
    if (fl_comm_dump(c, path.c_str()) != FL_OK) return FL_ERR_INTERNAL;
    return fl_comm_destroy(c);
  });
  EXPECT_FL_OK(fl_instr_wait_for(host_of(ranks.engines[0], 2), cb, kWaitNs));
  ranks.comms[0] = nullptr;
  for (fl_instr_id id : ids) EXPECT_EQ(ranks.wait(0, id), FL_ERR_CANCELLED);
}

// Two communicators on one lane, submitted in opposite orders on the two ranks: with
// asynchronous collectives neither holds the lane, so both complete (the host fake and a
// blocking transport would deadlock here).
TEST(CommTransport, CrossedOrdersOnOneLaneComplete) {
  Ranks a(2);
  fltest::Loopback& bgroup = *new fltest::Loopback(2);
  fl_comm_t* bcomm[2] = {};
  for (uint32_t r = 0; r < 2; ++r) {  // a second communicator on the same engines and lane
    fl_comm_desc_t cd = FL_COMM_DESC_INIT;
    cd.nranks = 2;
    cd.rank = r;
    cd.lane = 1;
    fl_comm_transport_t t = bgroup.transport(r, 0xb);
    ASSERT_FL_OK(fl_comm_create_transport(a.engines[r], &cd, &t, &bcomm[r]));
  }
  std::vector<std::vector<int64_t>> x(2, std::vector<int64_t>(2, 1)), y(2, std::vector<int64_t>(2, 10));
  auto sub = [&](uint32_t r, fl_comm_t* c, std::vector<int64_t>& v) {
    fl_coll_part_t p = allreduce(v);
    fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
    in.parts = &p;
    in.num_parts = 1;
    ASSERT_FL_OK(fl_submit_collective(coll_of(a.engines[r], 1), c, &in, nullptr));
  };
  sub(0, a.comms[0], x[0]);
  sub(0, bcomm[0], y[0]);
  sub(1, bcomm[1], y[1]);
  sub(1, a.comms[1], x[1]);
  for (uint32_t r = 0; r < 2; ++r) {
    ASSERT_FL_OK(fl_engine_synchronize_for(a.engines[r], kWaitNs));
    EXPECT_EQ(x[r], std::vector<int64_t>(2, 2));
    EXPECT_EQ(y[r], std::vector<int64_t>(2, 20));
  }
  for (uint32_t r = 0; r < 2; ++r) EXPECT_FL_OK(fl_comm_destroy(bcomm[r]));
  retire(&bgroup);
}

// Threads of the program submit to several communicators of one engine at once (each
// communicator's submissions from one thread: ranks must agree on the order).
TEST(CommTransport, ManyThreadsSubmittingToTheirOwnCommunicators) {
  const uint32_t kComms = 3;
  const int kEach = int(fl_scaled(300, 60));
  Ranks base(2);
  std::vector<fltest::Loopback*> groups;
  std::vector<std::vector<fl_comm_t*>> comms(2);
  more_comms(base, kComms, [](uint32_t k) { return 1 + k % 2; }, 100, groups, comms);  // two share lane 1
  std::vector<std::vector<std::vector<int64_t>>> bufs(2, std::vector<std::vector<int64_t>>(kComms * kEach));
  std::vector<std::thread> ts;
  for (uint32_t r = 0; r < 2; ++r)
    for (uint32_t k = 0; k < kComms; ++k)
      ts.emplace_back([&, r, k] {
        for (int i = 0; i < kEach; ++i) {
          auto& v = bufs[r][k * kEach + i];
          v.assign(2, int64_t(i));
          fl_coll_part_t p = allreduce(v);
          fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
          in.parts = &p;
          in.num_parts = 1;
          EXPECT_FL_OK(fl_submit_collective(coll_of(base.engines[r], 1 + k % 2), comms[r][k], &in, nullptr));
        }
      });
  for (auto& t : ts) t.join();
  for (uint32_t r = 0; r < 2; ++r) {
    ASSERT_FL_OK(fl_engine_synchronize_for(base.engines[r], kWaitNs));
    for (uint32_t k = 0; k < kComms; ++k)
      for (int i = 0; i < kEach; ++i) EXPECT_EQ(bufs[r][k * kEach + i], std::vector<int64_t>(2, 2 * i));
  }
  for (auto& cs : comms)
    for (fl_comm_t* c : cs) EXPECT_FL_OK(fl_comm_destroy(c));
  for (fltest::Loopback* g : groups) retire(g);
}

// A program thread that waits for a collective drives the progress itself (a round of the
// progress thread's work, as MPI_Wait drives MPI's): the wake-up of a sleeping waiter by the
// progress thread is not on the path. Shown with a transport that completes a request only
// when tested on the waiting thread: before the waiter drove progress, this wait timed out
// (checked on the old code: FL_ERR_TIMEOUT after 5 s, no test on the waiter's thread).
TEST(CommTransport, AProgramThreadsWaitDrivesTheProgressItself) {
  Ranks ranks(1);
  ranks.group.ranks[0]->only_thread = std::this_thread::get_id();
  for (int k = 0; k < 20; ++k) {
    std::vector<int64_t> b(4, k);
    fl_coll_part_t p = allreduce(b);
    fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
    in.parts = &p;
    in.num_parts = 1;
    in.flags = FL_SUBMIT_INLINE;  // started on this thread: the request is out before the wait
    fl_instr_id id = 0;
    ASSERT_FL_OK(fl_submit_collective(coll_of(ranks.engines[0], 1), ranks.comms[0], &in, &id));
    ASSERT_FL_OK(fl_instr_wait_for(coll_of(ranks.engines[0], 1), id, 5'000'000'000ull));
    EXPECT_EQ(b, std::vector<int64_t>(4, k));
  }
  EXPECT_GE(ranks.group.ranks[0]->tests_on_only_thread.load(), 20u);
}

// A waiter that stops polling with the collective still in flight (its timed wait ends)
// hands the rounds back: the progress thread, napping while the waiter drove, completes the
// collective on its own once the peer joins, with no program thread calling in (the
// transport's count of outstanding requests is watched without any flowlane call).
TEST(CommTransport, AWaiterThatStopsHandsTheRoundsBackToTheProgressThread) {
  Ranks ranks(2);
  for (int k = 0; k < 5; ++k) {
    std::vector<int64_t> b0(4, 1), b1(4, 2);
    fl_coll_part_t p0 = allreduce(b0), p1 = allreduce(b1);
    fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
    in.num_parts = 1;
    in.flags = FL_SUBMIT_INLINE;
    in.parts = &p0;
    fl_instr_id id0 = 0, id1 = 0;
    ASSERT_FL_OK(fl_submit_collective(coll_of(ranks.engines[0], 1), ranks.comms[0], &in, &id0));
    // Rank 1 has not joined: the wait polls (driving the rounds), then gives up.
    EXPECT_EQ(fl_instr_wait_for(coll_of(ranks.engines[0], 1), id0, 3'000'000ull), FL_ERR_TIMEOUT);
    in.parts = &p1;
    ASSERT_FL_OK(fl_submit_collective(coll_of(ranks.engines[1], 1), ranks.comms[1], &in, &id1));
    const auto until = fltest::Clock::now() + std::chrono::seconds(10);
    auto landed = [&] { return ranks.group.outstanding.load() == 0; };  // both requests tested done
    while (!landed() && fltest::Clock::now() < until) std::this_thread::sleep_for(std::chrono::microseconds(200));
    EXPECT_TRUE(landed()) << "round " << k << ": nothing tested the collective after its waiter left";
    EXPECT_FL_OK(fl_instr_wait_for(coll_of(ranks.engines[0], 1), id0, kWaitNs));
    EXPECT_FL_OK(fl_instr_wait_for(coll_of(ranks.engines[1], 1), id1, kWaitNs));
    EXPECT_EQ(b0, std::vector<int64_t>(4, 3));
  }
}

// So does a program thread polling with fl_instr_query (as MPI_Test does): a poll loop
// completes the collective it polls for (on the old code it polled until the deadline).
TEST(CommTransport, AProgramThreadsQueryDrivesTheProgressItself) {
  Ranks ranks(1);
  ranks.group.ranks[0]->only_thread = std::this_thread::get_id();
  std::vector<int64_t> b(4, 3);
  fl_coll_part_t p = allreduce(b);
  fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
  in.parts = &p;
  in.num_parts = 1;
  fl_instr_id id = 0;
  ASSERT_FL_OK(fl_submit_collective(coll_of(ranks.engines[0], 1), ranks.comms[0], &in, &id));
  uint32_t state = FL_INSTR_PENDING;
  const auto until = fltest::Clock::now() + std::chrono::seconds(5);
  while (state == FL_INSTR_PENDING && fltest::Clock::now() < until)
    ASSERT_FL_OK(fl_instr_query(coll_of(ranks.engines[0], 1), id, &state));
  EXPECT_EQ(state, FL_INSTR_DONE);
  EXPECT_GE(ranks.group.ranks[0]->tests_on_only_thread.load(), 1u);
  EXPECT_FL_OK(fl_instr_wait_for(coll_of(ranks.engines[0], 1), id, kWaitNs));
}

// Waiters on several threads (one per rank and communicator) drive rounds while the
// progress thread does too: every outcome is delivered once, in order per communicator, and
// each wait sees its own collective's numbers.
TEST(CommTransport, WaitersOnManyThreadsDriveProgressTogether) {
  const uint32_t kComms = 2;
  const int kEach = int(fl_scaled(300, 60));
  Ranks base(2);
  std::vector<fltest::Loopback*> groups;
  std::vector<std::vector<fl_comm_t*>> comms(2);
  more_comms(base, kComms, [](uint32_t k) { return 2 + k; }, 200, groups, comms);
  std::vector<std::thread> ts;
  for (uint32_t r = 0; r < 2; ++r)
    for (uint32_t k = 0; k < kComms; ++k)
      ts.emplace_back([&, r, k] {
        for (int i = 0; i < kEach; ++i) {
          std::vector<int64_t> b(2, int64_t(i + k));
          fl_coll_part_t p = allreduce(b);
          fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
          in.parts = &p;
          in.num_parts = 1;
          in.flags = i % 2 == 0 ? FL_SUBMIT_INLINE : 0;
          fl_instr_id id = 0;
          ASSERT_FL_OK(fl_submit_collective(coll_of(base.engines[r], 2 + k), comms[r][k], &in, &id));
          ASSERT_FL_OK(fl_instr_wait_for(coll_of(base.engines[r], 2 + k), id, kWaitNs));
          ASSERT_EQ(b, std::vector<int64_t>(2, 2 * int64_t(i + k)));
        }
      });
  for (auto& t : ts) t.join();
  for (auto& cs : comms)
    for (fl_comm_t* c : cs) EXPECT_FL_OK(fl_comm_destroy(c));
  for (fltest::Loopback* g : groups) retire(g);
}

TEST(CommTransport, BadArgumentsAreRefusedAndTheTransportIsDestroyedOnce) {
  EngineFixture f(2, 4);
  fltest::Loopback g(1);  // no request is ever started
  fl_comm_desc_t cd = FL_COMM_DESC_INIT;
  cd.nranks = 1;
  cd.lane = 1;
  fl_comm_t* c = nullptr;
  fl_comm_transport_t t = g.transport(0);
  t.test = nullptr;
  EXPECT_FL_ERR(fl_comm_create_transport(f.engine, &cd, &t, &c), FL_ERR_INVALID_ARGUMENT, "start, test and destroy");
  EXPECT_EQ(g.ranks[0]->destroys.load(), 1);
  t = g.transport(0);
  t.flags = 4;
  EXPECT_FL_ERR(fl_comm_create_transport(f.engine, &cd, &t, &c), FL_ERR_INVALID_ARGUMENT, "flags");
  EXPECT_EQ(g.ranks[0]->destroys.load(), 2);
  t = g.transport(0);
  t.struct_size = 8;
  EXPECT_FL_ERR(fl_comm_create_transport(f.engine, &cd, &t, &c), FL_ERR_INVALID_ARGUMENT, "struct_size");
  t = g.transport(0);
  cd.lane = 99;
  EXPECT_FL_ERR(fl_comm_create_transport(f.engine, &cd, &t, &c), FL_ERR_OUT_OF_RANGE, "lane 99");
  EXPECT_EQ(g.ranks[0]->destroys.load(), 4);
  EXPECT_FL_ERR(fl_comm_create_transport(f.engine, &cd, nullptr, &c), FL_ERR_INVALID_ARGUMENT, "transport is NULL");
  cd.lane = 1;
  t = g.transport(0);
  ASSERT_FL_OK(fl_comm_create_transport(f.engine, &cd, &t, &c));
  // A collective on another stream than the lane's host collective stream.
  std::vector<int64_t> v(2);
  fl_coll_part_t p = allreduce(v);
  fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
  in.parts = &p;
  in.num_parts = 1;
  EXPECT_FL_ERR(fl_submit_collective(coll_of(f.engine, 2), c, &in, nullptr), FL_ERR_INVALID_ARGUMENT,
                "loopback communicator");
  EXPECT_FL_OK(fl_comm_destroy(c));
  EXPECT_EQ(g.ranks[0]->destroys.load(), 5);
}
