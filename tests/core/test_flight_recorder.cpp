// White-box tests of the flight recorder (comm/recorder.hpp): what a record keeps, the ring,
// the fingerprint, the size of a record's JSON, and readers that never accept a torn record
// while a writer rewrites the slots they read.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "comm/recorder.hpp"
#include "test_util.hpp"

using flowlane::comm::CollRecord;
using flowlane::comm::CollState;
using flowlane::comm::FlightRecorder;
using flowlane::comm::fingerprint;
using flowlane::comm::record_json;
using flowlane::comm::record_signature;

namespace {

fl_coll_part_t part(uint32_t op, uint64_t count, uint32_t dtype = FL_DTYPE_FLOAT32, uint32_t peer = 0) {
  return fltest::coll_part(op, dtype, nullptr, nullptr, count, FL_REDOP_SUM, peer);
}

}  // namespace

TEST(FlightRecorder, KeepsEachCollectivesSignatureStateAndTimes) {
  FlightRecorder r(16);
  r.queued(1, {part(FL_COLL_ALL_REDUCE, 4)}, "grad", 10);
  r.set_instr(1, 77);
  CollRecord c;
  ASSERT_TRUE(r.read(1, c));
  EXPECT_EQ(c.state, CollState::kQueued);
  EXPECT_EQ(c.instr, 77u);
  EXPECT_STREQ(c.name, "grad");
  EXPECT_EQ(record_signature(c), "all_reduce(float32, sum, count=4)");
  EXPECT_EQ(c.t_queued_ns, 10);
  EXPECT_EQ(c.t_issued_ns, -1);
  r.issued(1, 20);
  r.finished(1, CollState::kCompleted, FL_OK, 30);
  ASSERT_TRUE(r.read(1, c));
  EXPECT_EQ(c.state, CollState::kCompleted);
  EXPECT_EQ(c.t_issued_ns, 20);
  EXPECT_EQ(c.t_done_ns, 30);
  EXPECT_EQ(r.queued_seq(), 1u);
  EXPECT_EQ(r.issued_seq(), 1u);
  EXPECT_EQ(r.finished_seq(), 1u);
  EXPECT_EQ(r.succeeded(), 1u);
  r.queued(2, {part(FL_COLL_ALL_REDUCE, 4)}, nullptr, 40);
  r.issued(2, 50);
  r.finished(2, CollState::kFailed, FL_ERR_CANCELLED, 60);
  ASSERT_TRUE(r.read(2, c));
  EXPECT_EQ(c.status, FL_ERR_CANCELLED);
  EXPECT_EQ(r.succeeded(), 1u) << "a failure is not a success";
  r.queued(3, {part(FL_COLL_ALL_REDUCE, 4)}, nullptr, 70);
  r.forget(3);  // its submission failed
  EXPECT_FALSE(r.read(3, c));
  EXPECT_EQ(r.queued_seq(), 2u);
}

TEST(FlightRecorder, TheRingKeepsTheLastCapacityRecords) {
  FlightRecorder r(8);
  for (uint64_t s = 1; s <= 20; ++s) r.queued(s, {part(FL_COLL_ALL_GATHER, s)}, "x", int64_t(s));
  CollRecord c;
  for (uint64_t s = 1; s <= 12; ++s) EXPECT_FALSE(r.read(s, c)) << s;
  for (uint64_t s = 13; s <= 20; ++s) {
    ASSERT_TRUE(r.read(s, c)) << s;
    EXPECT_EQ(c.parts[0].count, s);
  }
  EXPECT_FALSE(r.read(21, c));
  std::string json;
  r.dump_json(json);
  EXPECT_NE(json.find("\"records_dropped\":12"), std::string::npos) << json;
  // The last issued collective stays known after its record is overwritten (the dump
  // monitor's comm timeout goes by it).
  r.issued(13, 99);
  for (uint64_t s = 21; s <= 30; ++s) r.queued(s, {part(FL_COLL_ALL_GATHER, s)}, "x", int64_t(s));
  int64_t t = 0;
  EXPECT_FALSE(r.read(13, c));
  EXPECT_EQ(r.last_issued(&t), 13u);
  EXPECT_EQ(t, 99);
}

TEST(FlightRecorder, FingerprintCoversWhatRanksMustAgreeOnAndNotSendRecv) {
  const uint64_t a = fingerprint({part(FL_COLL_ALL_REDUCE, 4)});
  EXPECT_EQ(a, fingerprint({part(FL_COLL_ALL_REDUCE, 4)}));
  EXPECT_NE(a, fingerprint({part(FL_COLL_ALL_REDUCE, 5)}));
  EXPECT_NE(a, fingerprint({part(FL_COLL_ALL_REDUCE, 4, FL_DTYPE_INT32)}));
  EXPECT_NE(a, fingerprint({part(FL_COLL_ALL_GATHER, 4)}));
  fl_coll_part_t max = part(FL_COLL_ALL_REDUCE, 4);
  max.redop = FL_REDOP_MAX;
  EXPECT_NE(a, fingerprint({max}));
  EXPECT_NE(fingerprint({part(FL_COLL_BROADCAST, 4, FL_DTYPE_FLOAT32, 0)}),
            fingerprint({part(FL_COLL_BROADCAST, 4, FL_DTYPE_FLOAT32, 1)}))
      << "the root";
  fl_coll_part_t gather = part(FL_COLL_ALL_GATHER, 4);
  gather.redop = FL_REDOP_MAX;  // no reduction: ignored
  EXPECT_EQ(fingerprint({gather}), fingerprint({part(FL_COLL_ALL_GATHER, 4)}));
  // Rank 0 sends to 1 while rank 1 receives from 0: same fingerprint.
  EXPECT_EQ(fingerprint({part(FL_COLL_SEND, 4, FL_DTYPE_FLOAT32, 1)}),
            fingerprint({part(FL_COLL_RECV, 4, FL_DTYPE_FLOAT32, 0)}));
}

TEST(FlightRecorder, GroupsKeepTheirFirstPartsAndTheFingerprintOfAll) {
  FlightRecorder r(4);
  std::vector<fl_coll_part_t> six(6, part(FL_COLL_ALL_REDUCE, 1));
  r.queued(1, six, "g", 0);
  six[5].count = 2;  // beyond the parts kept
  r.queued(2, six, "g", 0);
  CollRecord a, b;
  ASSERT_TRUE(r.read(1, a));
  ASSERT_TRUE(r.read(2, b));
  EXPECT_EQ(a.num_parts, 6u);
  EXPECT_NE(a.fingerprint, b.fingerprint);
  EXPECT_EQ(record_signature(a), "group[all_reduce(float32, sum, count=1); all_reduce(float32, sum, count=1); "
                                 "all_reduce(float32, sum, count=1); all_reduce(float32, sum, count=1); +2 more parts]");
}

// The bound comm/README.md ("Size") states for one record's JSON, on the worst record: a
// name of control characters (6 bytes each escaped), a group of the largest parts.
TEST(FlightRecorder, ARecordsJsonStaysUnderItsBound) {
  FlightRecorder r(4);
  std::vector<fl_coll_part_t> parts(1024, part(FL_COLL_REDUCE_SCATTER, uint64_t(1) << 40, FL_DTYPE_BFLOAT16));
  for (auto& p : parts) p.redop = FL_REDOP_PROD;
  parts[1] = part(FL_COLL_BROADCAST, uint64_t(1) << 40, FL_DTYPE_BFLOAT16, 4095);
  std::string name(CollRecord::kNameBytes, '\x01');
  r.queued(UINT64_MAX / 2, parts, name.c_str(), INT64_MAX / 2);
  r.set_instr(UINT64_MAX / 2, UINT64_MAX);
  r.issued(UINT64_MAX / 2, INT64_MAX / 2);
  r.finished(UINT64_MAX / 2, CollState::kSkipped, FL_ERR_DEPENDENCY_FAILED, INT64_MAX / 2);
  CollRecord c;
  ASSERT_TRUE(r.read(UINT64_MAX / 2, c));
  std::string json;
  record_json(json, c);
  EXPECT_LE(json.size(), FlightRecorder::kMaxRecordJsonBytes) << json;
  std::printf("worst record: %zu bytes of JSON (bound %zu)\n", json.size(), FlightRecorder::kMaxRecordJsonBytes);
}

// One writer rewrites the slots of a small ring as fast as it can (each write's fields all
// derived from one number); readers check every record they accept is one whole write.
TEST(FlightRecorder, ReadersNeverAcceptATornRecord) {
  FlightRecorder r(4);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> accepted{0}, torn{0};
  const uint64_t kWrites = uint64_t(fl_scaled(400000, 20000));
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t)
    readers.emplace_back([&] {
      CollRecord c;
      uint64_t seq = 1;
      while (!stop.load(std::memory_order_relaxed)) {
        if (r.read(seq, c)) {
          accepted.fetch_add(1, std::memory_order_relaxed);
          const uint64_t k = c.parts[0].count;
          if (c.seq != seq || c.t_queued_ns != int64_t(k) || c.parts[1].count != k || c.parts[3].count != k ||
              (c.instr != k && c.instr != 0))  // 0: the queued write, before set_instr's
            torn.fetch_add(1, std::memory_order_relaxed);
        }
        seq = r.queued_seq() - (seq & 3);  // one of the last four
        if (seq == 0 || seq > r.queued_seq()) seq = 1;
      }
    });
  std::vector<fl_coll_part_t> parts(4, part(FL_COLL_ALL_REDUCE, 0));
  for (uint64_t k = 1; k <= kWrites; ++k) {
    for (auto& p : parts) p.count = k;
    r.queued(k, parts, "w", int64_t(k));  // writes the whole slot
    r.set_instr(k, k);                    // rewrites it
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(torn.load(), 0u);
  EXPECT_GT(accepted.load(), 0u);
  std::printf("accepted %llu records while %llu were written\n", static_cast<unsigned long long>(accepted.load()),
              static_cast<unsigned long long>(kWrites));
}
