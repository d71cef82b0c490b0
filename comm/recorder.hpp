// The flight recorder of a communicator: its last collectives in a preallocated ring of
// fixed-size records, written by the backend on the collective path and read, without
// locks, by dumps on any thread (comm/README.md, "The flight recorder").
//
// Writers: every write (queued, set_instr, forget, issued, finished) is serialized by the
// backend (the host group's mutex, the NCCL communicator's mu). Readers take no lock: each
// slot is a seqlock over atomic words.
//
//   write (one writer at a time)          read (any thread, any time)
//   v = version (relaxed, own value)      v1 = version.load(acquire)   -- pairs with the
//   version.store(v + 1, relaxed)                                         writer's release store
//   fence(release)  -- orders the odd     words[k].load(relaxed) ...
//                      version before     fence(acquire) -- orders the word loads before
//                      the word stores                      the second version load
//   words[k].store(relaxed) ...           v2 = version.load(relaxed)
//   version.store(v + 2, release)         torn unless v1 == v2 and v1 is even: retry
//
// A reader that loads any word of a write in progress also sees (through the writer's
// release fence and its own acquire fence) that write's odd version, or a later one, in v2,
// so it never accepts a torn record; an accepted record is one whole write. The words are
// atomics, so a torn read is a retry, never a data race. Slots live as long as the
// communicator (readers hold a reference to it) and are never reallocated: a record is
// never read from freed memory. A reader retries kReadTries times, then reports the record
// as unreadable (a writer rewriting that very slot again and again).
//
// Cost on the collective path: no allocation; queued() rewrites the slot (the record's
// kWords words, relaxed), the other writes only the one to three words they change, each
// between two version stores; plus a counter store or two (bench/bench_comm_recorder.cpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "flowlane/flowlane.h"

namespace flowlane::comm {

// The state of one collective. Issued: this rank handed it to the backend (host: it reached
// the rendezvous; NCCL: its kernels are enqueued), so it waits for its peers.
enum class CollState : uint8_t { kEmpty = 0, kQueued, kIssued, kCompleted, kFailed, kSkipped };
const char* coll_state_name(CollState s);  // "queued", "issued", "completed", "failed", "skipped"

// One part, as recorded (what the ranks compare).
struct CollPart {
  uint8_t op = 0, dtype = 0, redop = 0, unused = 0;
  uint32_t peer = 0;  // root (broadcast) or peer (send/recv)
  uint64_t count = 0;
};

// One collective (plain data, copied whole in and out of a slot).
struct CollRecord {
  static constexpr size_t kPartsKept = 4;   // parts recorded; the fingerprint covers them all
  static constexpr size_t kNameBytes = 48;  // of the instruction's name, NUL included
  uint64_t seq = 0;
  uint64_t instr = 0;        // fl_instr_id, 0 until known
  uint64_t fingerprint = 0;  // of every part except send/recv (ranks must agree on it)
  int64_t t_queued_ns = -1, t_issued_ns = -1, t_done_ns = -1;  // since the communicator's creation; -1: not yet
  uint32_t num_parts = 0;    // all parts (only kPartsKept are in `parts`)
  uint32_t unused0 = 0;
  CollState state = CollState::kEmpty;  // one word with `status`: updated together
  uint8_t unused1[3] = {};
  int32_t status = 0;        // fl_status_t of a failure
  CollPart parts[kPartsKept];
  char name[kNameBytes] = {};
};

// The fingerprint of a collective's parts: a 64-bit hash of what every rank must agree on
// (op, dtype, reduction, root, count of each part but send/recv, in order).
uint64_t fingerprint(const std::vector<fl_coll_part_t>& parts);
// "all_reduce(float32, sum, count=4)", "group[...; ...]", "group[...; +3 more parts]".
std::string record_signature(const CollRecord& r);

class FlightRecorder {
 public:
  static constexpr size_t kDefaultSize = 1024;     // FLOWLANE_COMM_TRACE_SIZE unset
  static constexpr size_t kMaxSize = size_t(1) << 16;  // 11.5 MB of slots
  static constexpr size_t kTextRecords = 32;       // records the text dump shows
  static constexpr int kReadTries = 64;
  // The most bytes record_json() writes for one record (a name of control characters, a
  // group of the largest parts: FlightRecorder.ARecordsJsonStaysUnderItsBound).
  static constexpr size_t kMaxRecordJsonBytes = 1536;

  explicit FlightRecorder(size_t capacity);
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // ---- writer side (serialized by the backend) ----
  // Collective `seq` (the next one) was submitted.
  void queued(uint64_t seq, const std::vector<fl_coll_part_t>& parts, const char* name, int64_t t_ns);
  void set_instr(uint64_t seq, uint64_t instr);
  // Its submission failed: the sequence number is given back.
  void forget(uint64_t seq);
  void issued(uint64_t seq, int64_t t_ns);
  // kCompleted, kFailed (with `status`) or kSkipped.
  void finished(uint64_t seq, CollState st, fl_status_t status, int64_t t_ns);

  // ---- readers (any thread, no lock) ----
  // Collective `seq` if the ring still holds it (false: overwritten, never written, or
  // unreadable after kReadTries).
  bool read(uint64_t seq, CollRecord& out) const;
  size_t capacity() const { return capacity_; }
  // Relaxed: each is a recent value; what a reader builds on them it checks in the records.
  uint64_t queued_seq() const { return queued_.load(std::memory_order_relaxed); }      // last submitted
  uint64_t issued_seq() const { return issued_.load(std::memory_order_relaxed); }      // last issued
  uint64_t finished_seq() const { return finished_.load(std::memory_order_relaxed); }  // last finished (any outcome)
  uint64_t succeeded() const { return succeeded_.load(std::memory_order_relaxed); }    // completed without error
  // The last issued collective and when it was issued (the dump monitor's fallback when the
  // ring no longer holds its record): the time is that collective's or a later one's.
  uint64_t last_issued(int64_t* t_ns) const {
    const uint64_t seq = issued_.load(std::memory_order_acquire);  // pairs with the release store in issued()
    *t_ns = issued_t_ns_.load(std::memory_order_relaxed);
    return seq;
  }

  // The text dump's lines: the last kTextRecords records.
  void dump_text(std::string& out) const;
  // `"records":[...]` (oldest first) and `"records_dropped":n` (older ones the ring lost).
  void dump_json(std::string& out) const;

 private:
  static constexpr size_t kWords = sizeof(CollRecord) / 8;
  static_assert(sizeof(CollRecord) % 8 == 0, "a record is a whole number of words");
  struct Slot {
    std::atomic<uint64_t> version{0};  // odd while a write is in progress
    std::atomic<uint64_t> words[kWords];
  };
  Slot& slot(uint64_t seq) const { return slots_[seq % capacity_]; }
  void store(const CollRecord& r);  // writer: seqlock write of a whole record
  // Writer: seqlock write of words of collective seq's slot, given as (byte offset of the
  // field, the word's new value), the rest unchanged, if the slot still holds that collective.
  struct Word {
    size_t offset;
    uint64_t value;
  };
  void patch(uint64_t seq, std::initializer_list<Word> words);

  size_t capacity_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<uint64_t> queued_{0}, issued_{0}, finished_{0}, succeeded_{0};
  std::atomic<int64_t> issued_t_ns_{-1};
};

// Appends the JSON of one record: {"seq":..,"instr":..,"name":..,"fingerprint":..,
// "signature":..,"num_parts":..,"parts":[..],"state":..,"status":..,"t_queued_ns":..,...}.
void record_json(std::string& out, const CollRecord& r);

}  // namespace flowlane::comm
