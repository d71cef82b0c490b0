// The flight recorder (comm/recorder.hpp): the seqlock ring, fingerprints, and the text and
// JSON forms of records.
#include "comm/recorder.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "base/json.hpp"
#include "comm/comm.hpp"

namespace flowlane::comm {

static_assert(std::is_trivially_copyable_v<CollRecord>, "records are copied word by word");

const char* coll_state_name(CollState s) {
  switch (s) {
    case CollState::kEmpty: return "empty";
    case CollState::kQueued: return "queued";
    case CollState::kIssued: return "issued";
    case CollState::kCompleted: return "completed";
    case CollState::kFailed: return "failed";
    case CollState::kSkipped: return "skipped";
  }
  return "?";
}

uint64_t fingerprint(const std::vector<fl_coll_part_t>& parts) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](uint64_t v) {  // a multiply-xorshift step per 64-bit word
    h = (h ^ v) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  };
  for (const fl_coll_part_t& p : parts) {
    if (is_p2p(p.op)) continue;  // paired per (sender, receiver), not equal on every rank
    mix(uint64_t(p.op) | uint64_t(p.dtype) << 8 | uint64_t(is_reduction(p.op) ? p.redop : 0) << 16);
    mix(p.op == FL_COLL_BROADCAST ? p.peer : 0);
    mix(p.count);
  }
  return h;
}

namespace {

fl_coll_part_t as_part(const CollPart& p) {
  fl_coll_part_t q{};
  q.op = p.op;
  q.dtype = p.dtype;
  q.redop = p.redop;
  q.peer = p.peer;
  q.count = p.count;
  return q;
}

}  // namespace

std::string record_signature(const CollRecord& r) {
  const size_t kept = std::min<size_t>(r.num_parts, CollRecord::kPartsKept);
  if (r.num_parts == 1) return part_signature(as_part(r.parts[0]));
  std::string s = "group[";
  for (size_t k = 0; k < kept; ++k) s += (k ? "; " : "") + part_signature(as_part(r.parts[k]));
  if (r.num_parts > kept) s += "; +" + std::to_string(r.num_parts - kept) + " more parts";
  return s + "]";
}

// ---- the ring ------------------------------------------------------------------------------

FlightRecorder::FlightRecorder(size_t capacity) : capacity_(capacity), slots_(new Slot[capacity]) {}

void FlightRecorder::store(const CollRecord& r) {
  uint64_t w[kWords];
  std::memcpy(w, &r, sizeof r);
  Slot& s = slot(r.seq);
  const uint64_t v = s.version.load(std::memory_order_relaxed);  // writers are serialized: our own value
  s.version.store(v + 1, std::memory_order_relaxed);
  // Orders the odd version before the word stores: pairs with the acquire fence in read().
  std::atomic_thread_fence(std::memory_order_release);
  for (size_t k = 0; k < kWords; ++k) s.words[k].store(w[k], std::memory_order_relaxed);
  s.version.store(v + 2, std::memory_order_release);  // pairs with the acquire load in read()
}

void FlightRecorder::patch(uint64_t seq, std::initializer_list<Word> words) {
  Slot& s = slot(seq);
  // Relaxed: writers are serialized by the backend's lock, which orders their stores: the
  // slot holds what the last writer left.
  if (s.words[offsetof(CollRecord, seq) / 8].load(std::memory_order_relaxed) != seq) return;  // overwritten
  const uint64_t v = s.version.load(std::memory_order_relaxed);
  s.version.store(v + 1, std::memory_order_relaxed);
  // Orders the odd version before the word stores: pairs with the acquire fence in read().
  std::atomic_thread_fence(std::memory_order_release);
  for (const Word& w : words) s.words[w.offset / 8].store(w.value, std::memory_order_relaxed);
  s.version.store(v + 2, std::memory_order_release);  // pairs with the acquire load in read()
}

bool FlightRecorder::read(uint64_t seq, CollRecord& out) const {
  if (seq == 0) return false;
  const Slot& s = slot(seq);
  uint64_t w[kWords];
  for (int tries = 0; tries < kReadTries; ++tries) {
    const uint64_t v1 = s.version.load(std::memory_order_acquire);  // pairs with the release store in store()
    if (v1 & 1) continue;  // a write is in progress
    for (size_t k = 0; k < kWords; ++k) w[k] = s.words[k].load(std::memory_order_relaxed);
    // Orders the word loads before the second version load: pairs with the release fence in store().
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.version.load(std::memory_order_relaxed) != v1) continue;  // torn: retry
    std::memcpy(&out, w, sizeof out);
    return out.seq == seq && out.state != CollState::kEmpty;
  }
  return false;
}

void FlightRecorder::queued(uint64_t seq, const std::vector<fl_coll_part_t>& parts, const char* name, int64_t t_ns) {
  CollRecord r;
  r.seq = seq;
  r.fingerprint = fingerprint(parts);
  r.t_queued_ns = t_ns;
  r.num_parts = uint32_t(parts.size());
  r.state = CollState::kQueued;
  for (size_t k = 0; k < parts.size() && k < CollRecord::kPartsKept; ++k) {
    const fl_coll_part_t& p = parts[k];
    r.parts[k] = CollPart{uint8_t(p.op), uint8_t(p.dtype), uint8_t(is_reduction(p.op) ? p.redop : 0), 0, p.peer, p.count};
  }
  if (name != nullptr) {
    const size_t len = strnlen(name, CollRecord::kNameBytes);
    size_t n = std::min(len, CollRecord::kNameBytes - 1);
    // Cut before a whole UTF-8 character, never inside one (the dumps are JSON).
    while (n > 0 && n < len && (static_cast<unsigned char>(name[n]) & 0xC0) == 0x80) --n;
    std::memcpy(r.name, name, n);
  }
  store(r);
  queued_.store(seq, std::memory_order_relaxed);
}

// Each update writes only its words: `state` shares one with `status` (set together).
struct StateWord {
  CollState state;
  uint8_t unused[3];
  int32_t status;
};
static_assert(offsetof(CollRecord, status) == offsetof(CollRecord, state) + offsetof(StateWord, status) &&
                  offsetof(CollRecord, state) % 8 == 0 && sizeof(StateWord) == 8,
              "state and status make one word of a record, laid out as StateWord");

namespace {
uint64_t state_word(CollState st, fl_status_t status) {
  StateWord w{st, {}, int32_t(status)};
  uint64_t v;
  std::memcpy(&v, &w, sizeof v);
  return v;
}
uint64_t time_word(int64_t t) { return uint64_t(t); }
}  // namespace

void FlightRecorder::set_instr(uint64_t seq, uint64_t instr) { patch(seq, {{offsetof(CollRecord, instr), instr}}); }

void FlightRecorder::forget(uint64_t seq) {
  CollRecord r;
  r.seq = seq;  // state kEmpty: readers skip it
  store(r);
  queued_.store(seq - 1, std::memory_order_relaxed);
}

void FlightRecorder::issued(uint64_t seq, int64_t t_ns) {
  issued_t_ns_.store(t_ns, std::memory_order_relaxed);
  // Release pairs with the acquire load in last_issued(): its reader sees this time or a later one.
  issued_.store(std::max(issued_.load(std::memory_order_relaxed), seq), std::memory_order_release);
  patch(seq, {{offsetof(CollRecord, t_issued_ns), time_word(t_ns)},
              {offsetof(CollRecord, state), state_word(CollState::kIssued, FL_OK)}});
}

void FlightRecorder::finished(uint64_t seq, CollState st, fl_status_t status, int64_t t_ns) {
  finished_.store(std::max(finished_.load(std::memory_order_relaxed), seq), std::memory_order_relaxed);
  if (st == CollState::kCompleted) succeeded_.store(succeeded_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  patch(seq, {{offsetof(CollRecord, t_done_ns), time_word(t_ns)}, {offsetof(CollRecord, state), state_word(st, status)}});
}

// ---- text and JSON -------------------------------------------------------------------------

void FlightRecorder::dump_text(std::string& out) const {
  auto ms = [](int64_t ns) {
    if (ns < 0) return std::string("-");
    char b[32];
    std::snprintf(b, sizeof b, "+%.3f ms", double(ns) / 1e6);
    return std::string(b);
  };
  const uint64_t last = queued_seq();
  const uint64_t first = last > kTextRecords ? last - kTextRecords + 1 : 1;
  std::string lines;
  size_t shown = 0;
  CollRecord r;
  for (uint64_t seq = first; seq <= last; ++seq) {
    if (!read(seq, r)) continue;
    ++shown;
    char b[96];
    std::snprintf(b, sizeof b, "      seq %-4" PRIu64 " #%-6" PRIu64 " %-9s ", r.seq, r.instr, coll_state_name(r.state));
    lines += b + record_signature(r) + "  queued " + ms(r.t_queued_ns) + ", issued " + ms(r.t_issued_ns) + ", done " +
             ms(r.t_done_ns) + "\n";
  }
  out += "    flight recorder (the last " + std::to_string(shown) + " of " + std::to_string(last) +
         " collectives; the ring keeps " + std::to_string(capacity_) + ", FLOWLANE_COMM_TRACE_SIZE):\n" + lines;
}

void record_json(std::string& out, const CollRecord& r) {
  auto t = [](int64_t ns) { return ns < 0 ? std::string("null") : std::to_string(ns); };
  char fp[24];
  std::snprintf(fp, sizeof fp, "0x%016" PRIx64, r.fingerprint);
  out += "{\"seq\":" + std::to_string(r.seq) + ",\"instr\":" + std::to_string(r.instr) + ",\"name\":";
  out += json_string(std::string(r.name, strnlen(r.name, sizeof r.name)));
  out += ",\"fingerprint\":\"" + std::string(fp) + "\",\"signature\":" + json_string(record_signature(r)) +
         ",\"num_parts\":" + std::to_string(r.num_parts) + ",\"parts\":[";
  for (size_t k = 0; k < r.num_parts && k < CollRecord::kPartsKept; ++k) {
    const CollPart& p = r.parts[k];
    out += std::string(k ? "," : "") + "{\"op\":\"" + op_name(p.op) + "\",\"dtype\":\"" + dtype_name(p.dtype) + "\"";
    if (is_reduction(p.op)) out += std::string(",\"redop\":\"") + redop_name(p.redop) + "\"";
    if (p.op == FL_COLL_BROADCAST) out += ",\"root\":" + std::to_string(p.peer);
    if (is_p2p(p.op)) out += ",\"peer\":" + std::to_string(p.peer);
    out += ",\"count\":" + std::to_string(p.count) + "}";
  }
  out += std::string("],\"state\":\"") + coll_state_name(r.state) + "\",\"status\":" +
         (r.status != 0 ? "\"" + std::string(fl_status_name(fl_status_t(r.status))) + "\"" : std::string("null")) +
         ",\"t_queued_ns\":" + t(r.t_queued_ns) + ",\"t_issued_ns\":" + t(r.t_issued_ns) + ",\"t_done_ns\":" +
         t(r.t_done_ns) + "}";
}

void FlightRecorder::dump_json(std::string& out) const {
  const uint64_t last = queued_seq();
  const uint64_t first = last > capacity_ ? last - capacity_ + 1 : 1;
  out += "\"records\":[";
  size_t n = 0;
  CollRecord r;
  for (uint64_t seq = first; seq <= last; ++seq) {
    if (!read(seq, r)) continue;
    out += n++ ? ",\n  " : "\n  ";
    record_json(out, r);
  }
  out += "],\"records_dropped\":" + std::to_string(last - n);
}

}  // namespace flowlane::comm
