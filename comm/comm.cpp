// What the collective backends share: names, signatures, validation, the settings, the
// per-engine registry of communicators and the backend dispatch (comm/comm.hpp).
#include "comm/comm.hpp"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "comm/dump.hpp"

namespace flowlane::comm {

// ---- names, signatures, validation -------------------------------------------------------

const char* op_name(uint32_t op) {
  switch (op) {
    case FL_COLL_ALL_REDUCE: return "all_reduce";
    case FL_COLL_ALL_GATHER: return "all_gather";
    case FL_COLL_REDUCE_SCATTER: return "reduce_scatter";
    case FL_COLL_BROADCAST: return "broadcast";
    case FL_COLL_SEND: return "send";
    case FL_COLL_RECV: return "recv";
    default: return "?";
  }
}

namespace {
struct DtypeInfo {
  const char* name;
  size_t size;
};
constexpr DtypeInfo kDtypes[] = {{"int8", 1},    {"uint8", 1},   {"int32", 4},   {"uint32", 4},   {"int64", 8},
                                 {"uint64", 8},  {"float16", 2}, {"float32", 4}, {"float64", 8}, {"bfloat16", 2}};
constexpr uint32_t kNumDtypes = sizeof kDtypes / sizeof kDtypes[0];
static_assert(kNumDtypes == FL_DTYPE_BFLOAT16 + 1, "one entry per fl_dtype_t");
constexpr const char* kRedops[] = {"sum", "prod", "max", "min"};
static_assert(sizeof kRedops / sizeof kRedops[0] == FL_REDOP_MIN + 1, "one entry per fl_redop_t");
}  // namespace

const char* dtype_name(uint32_t t) { return t < kNumDtypes ? kDtypes[t].name : "?"; }
size_t dtype_size(uint32_t t) { return t < kNumDtypes ? kDtypes[t].size : 0; }
const char* redop_name(uint32_t r) { return r <= FL_REDOP_MIN ? kRedops[r] : "?"; }
bool is_reduction(uint32_t op) { return op == FL_COLL_ALL_REDUCE || op == FL_COLL_REDUCE_SCATTER; }
bool is_p2p(uint32_t op) { return op == FL_COLL_SEND || op == FL_COLL_RECV; }

std::string part_signature(const fl_coll_part_t& p) {
  std::string s;  // built in place: one allocation (it is made for every collective submitted)
  s.reserve(72);
  s += op_name(p.op);
  s += '(';
  s += dtype_name(p.dtype);
  if (is_reduction(p.op)) {
    s += ", ";
    s += redop_name(p.redop);
  }
  const char* peer = p.op == FL_COLL_BROADCAST ? ", root="
                     : p.op == FL_COLL_SEND    ? ", to="
                     : p.op == FL_COLL_RECV    ? ", from="
                                               : nullptr;
  if (peer != nullptr) {
    s += peer;
    s += std::to_string(p.peer);
  }
  s += ", count=";
  s += std::to_string(p.count);
  s += ')';
  return s;
}

std::string signature(const std::vector<fl_coll_part_t>& parts) {
  if (parts.size() == 1) return part_signature(parts[0]);
  std::string s = "group[";
  for (size_t k = 0; k < parts.size(); ++k) s += (k ? "; " : "") + part_signature(parts[k]);
  return s + "]";
}

std::string hex(uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%016" PRIx64, v);
  return b;
}

std::vector<fl_coll_part_t> check_parts(const fl_collective_instr_t& in, uint32_t rank, uint32_t nranks,
                                        bool inline_ok) {
  static const std::string fn = "fl_submit_collective";  // static: no allocation per submit
  const uint64_t known = FL_SUBMIT_NONBLOCKING | (inline_ok ? FL_SUBMIT_INLINE : 0);
  if ((in.flags & ~known) != 0)
    fail(FL_ERR_INVALID_ARGUMENT,
         fn + ": unknown flags " + std::to_string(in.flags) +
             (inline_ok ? " (FL_SUBMIT_NONBLOCKING and FL_SUBMIT_INLINE are defined)"
                        : " (FL_SUBMIT_NONBLOCKING is defined; FL_SUBMIT_INLINE only for a transport's communicator, "
                          "whose collectives never block the caller)"));
  if (in.num_parts == 0 || in.parts == nullptr)
    fail(FL_ERR_INVALID_ARGUMENT, fn + ": parts is NULL or num_parts is 0 (give at least one part)");
  if (in.num_parts > 1024) fail(FL_ERR_OUT_OF_RANGE, fn + ": num_parts " + std::to_string(in.num_parts) + " exceeds 1024");
  std::vector<fl_coll_part_t> parts(in.parts, in.parts + in.num_parts);
  for (size_t k = 0; k < parts.size(); ++k) {
    const fl_coll_part_t& p = parts[k];
    auto at = [&] { return fn + ": part " + std::to_string(k) + ": "; };
    if (p.op < FL_COLL_ALL_REDUCE || p.op > FL_COLL_RECV)
      fail(FL_ERR_INVALID_ARGUMENT, at() + "op " + std::to_string(p.op) + " is unknown (FL_COLL_ALL_REDUCE..FL_COLL_RECV)");
    if (p.dtype >= kNumDtypes) fail(FL_ERR_INVALID_ARGUMENT, at() + "dtype " + std::to_string(p.dtype) + " is unknown");
    if (is_reduction(p.op) && p.redop > FL_REDOP_MIN)
      fail(FL_ERR_INVALID_ARGUMENT, at() + "redop " + std::to_string(p.redop) + " is unknown (sum, prod, max, min)");
    if ((p.op == FL_COLL_BROADCAST || is_p2p(p.op)) && p.peer >= nranks)
      fail(FL_ERR_OUT_OF_RANGE, at() + (p.op == FL_COLL_BROADCAST ? "root " : "peer ") + std::to_string(p.peer) +
                                    " is out of range: the communicator has " + std::to_string(nranks) + " ranks");
    if (p.count > (uint64_t(1) << 40)) fail(FL_ERR_OUT_OF_RANGE, at() + "count " + std::to_string(p.count) + " is too large");
    if (p.count == 0) continue;
    bool needs_send = p.op != FL_COLL_RECV && (p.op != FL_COLL_BROADCAST || p.peer == rank);
    bool needs_recv = p.op != FL_COLL_SEND;
    if (needs_send && p.sendbuf == nullptr) fail(FL_ERR_INVALID_ARGUMENT, at() + op_name(p.op) + " needs a sendbuf");
    if (needs_recv && p.recvbuf == nullptr) fail(FL_ERR_INVALID_ARGUMENT, at() + op_name(p.op) + " needs a recvbuf");
  }
  return parts;
}

void check_desc(const Engine& e, const fl_comm_desc_t& d) {
  const std::string fn = "fl_comm_create";
  if ((d.flags & ~FL_COMM_UNORDERED) != 0)
    fail(FL_ERR_INVALID_ARGUMENT, fn + ": flags " + std::to_string(d.flags) + " are unknown (0 or FL_COMM_UNORDERED)");
  if (d.nranks == 0 || d.nranks > 4096)
    fail(FL_ERR_OUT_OF_RANGE, fn + ": nranks " + std::to_string(d.nranks) + " is out of range (1..4096)");
  if (d.rank >= d.nranks)
    fail(FL_ERR_OUT_OF_RANGE, fn + ": rank " + std::to_string(d.rank) + " is out of range: the communicator has " +
                                  std::to_string(d.nranks) + " ranks (0.." + std::to_string(d.nranks - 1) + ")");
  if (d.lane >= e.lane_count())
    fail(FL_ERR_OUT_OF_RANGE, fn + ": lane " + std::to_string(d.lane) + " is out of range: this engine has " +
                                  std::to_string(e.lane_count()) + " lanes");
  if (e.shutting_down()) fail(FL_ERR_SHUTDOWN, fn + ": the engine is being destroyed");
}

// ---- settings ----------------------------------------------------------------------------

namespace {

// The variable `name` as a whole number in [lo, hi]; `fallback` when unset or empty.
uint64_t env_number(const char* name, uint64_t fallback, uint64_t lo, uint64_t hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == 0) return fallback;
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(v, &end, 10);
  if (*v == '-' || end == v || *end != 0 || errno != 0 || x < lo || x > hi)
    fail(FL_ERR_INVALID_ARGUMENT, std::string("fl_comm_create: ") + name + "='" + v + "' is not a whole number in " +
                                      std::to_string(lo) + ".." + std::to_string(hi));
  return x;
}

uint32_t env_signals() {
  const char* v = std::getenv("FLOWLANE_COMM_DUMP_ON_SIGNAL");
  if (v == nullptr || *v == 0) return 0;
  uint32_t bits = 0;
  std::string list = v;
  for (size_t at = 0; at <= list.size();) {
    size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    std::string word = list.substr(at, end - at);
    if (word.rfind("SIG", 0) == 0) word = word.substr(3);
    if (word == "TERM")
      bits |= kSignalTerm;
    else if (word == "USR1")
      bits |= kSignalUsr1;
    else
      fail(FL_ERR_INVALID_ARGUMENT, "fl_comm_create: FLOWLANE_COMM_DUMP_ON_SIGNAL='" + list + "' names '" + word +
                                        "'; the signals it takes are TERM and USR1, separated by commas");
    at = end + 1;
  }
  return bits;
}

}  // namespace

Settings read_settings() {
  Settings s;
  s.trace_size = size_t(env_number("FLOWLANE_COMM_TRACE_SIZE", FlightRecorder::kDefaultSize, 1, FlightRecorder::kMaxSize));
  s.timeout_ms = env_number("FLOWLANE_COMM_TIMEOUT_MS", 0, 1, kMaxTimeoutMs);
  if (const char* d = std::getenv("FLOWLANE_COMM_DUMP_DIR"); d != nullptr) s.dump_dir = d;
  s.signals = env_signals();
  s.check = FL_TRANSPORT_CHECK_STRICT;
  if (const char* c = std::getenv("FLOWLANE_COMM_CHECK"); c != nullptr && *c != 0) {
    const std::string v = c;
    if (v == "alongside")
      s.check = 0;
    else if (v == "off")
      s.check = FL_TRANSPORT_CHECK_OFF;
    else if (v != "strict")
      fail(FL_ERR_INVALID_ARGUMENT, "fl_comm_create: FLOWLANE_COMM_CHECK='" + v +
                                        "' is unknown: strict (the default), alongside or off");
  }
  if (s.signals != 0 && s.dump_dir.empty())
    fail(FL_ERR_INVALID_ARGUMENT, "fl_comm_create: FLOWLANE_COMM_DUMP_ON_SIGNAL is set but FLOWLANE_COMM_DUMP_DIR is "
                                  "not: set the folder the dumps go to");
  return s;
}

uint64_t comm_id(const fl_comm_unique_id_t& id) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (char c : id.internal) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

Communicator::Communicator(const char* backend, Engine* e, const fl_comm_desc_t& d, const fl_comm_unique_id_t& uid,
                           const Settings& s)
    : Communicator(backend, e, d, comm_id(uid), s) {}

Communicator::Communicator(const char* backend, Engine* e, const fl_comm_desc_t& d, uint64_t comm_id_value,
                           const Settings& s)
    : engine(e),
      lane(uint32_t(d.lane)),
      rank(uint32_t(d.rank)),
      nranks(uint32_t(d.nranks)),
      id(comm_id_value),
      backend_name(backend),
      timeout_ms(s.timeout_ms),
      recorder(s.trace_size) {}

// ---- the per-engine registry -------------------------------------------------------------

namespace {

const char kRegistryKey = 0;  // its address keys the extension

// Every communicator of one engine, and the engine's dumps (comm/dump.hpp). At destroy a
// dump is written if collectives are pending, then their handles go stale and they are
// aborted before the drain (a collective waiting for a peer that never comes would hold it
// up).
class Registry : public core::Extension {
 public:
  explicit Registry(Engine* e) : engine_(e), dumps_(std::make_shared<EngineDumps>(e, dump_dir(), next_serial())) {}
  // No lock here: the engine destroys its extensions holding its extension lock, which a
  // dump takes after EngineDumps::mu; begin_shutdown (always before) forgot the engine.
  const std::shared_ptr<EngineDumps>& dumps() const { return dumps_; }
  void add(std::shared_ptr<Communicator> c) {
    std::lock_guard<std::mutex> lk(mu_);
    comms_.push_back(std::move(c));
  }
  std::shared_ptr<Communicator> remove(Communicator* c) {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto it = comms_.begin(); it != comms_.end(); ++it)
      if (it->get() == c) {
        std::shared_ptr<Communicator> keep = std::move(*it);
        comms_.erase(it);
        return keep;
      }
    return nullptr;
  }
  std::vector<std::shared_ptr<Communicator>> list() {
    std::lock_guard<std::mutex> lk(mu_);
    return comms_;
  }
  void begin_shutdown() override {
    auto all = list();
    uint64_t pending = 0;
    for (auto& c : all) pending += c->recorder.queued_seq() - c->recorder.finished_seq();
    if (pending > 0)
      dump_triggered(dumps_, DumpReason::kAbort,
                     "engine " + hex(engine_->handle()) + " destroyed (fl_engine_destroy) with " +
                         std::to_string(pending) + " collective(s) pending",
                     /*request_all=*/true);
    forget_engine();
    for (auto& c : all) {
      engine_->forget_handle(c->handle.load(std::memory_order_relaxed));
      c->abort("rank " + std::to_string(c->rank) + "'s engine was destroyed (fl_engine_destroy)", true);
    }
  }
  void end_shutdown() override {
    forget_engine();  // a second time: this registry may have been made during the drain
    std::vector<std::shared_ptr<Communicator>> gone;
    std::lock_guard<std::mutex> lk(mu_);
    gone.swap(comms_);
  }
  void dump(std::string& out) override {
    auto all = list();
    out += "communicators: " + std::to_string(all.size()) + "\n";
    for (auto& c : all) c->dump(out);
  }
  void lane_waits(std::vector<core::LaneWait>& out) override {
    for (auto& c : list()) c->lane_waits(out);
  }
  void on_watchdog(const std::string& reason) override {
    if (!list().empty()) dump_triggered(dumps_, DumpReason::kWatchdog, reason, /*request_all=*/true);
  }

 private:
  static std::string dump_dir() {
    const char* d = std::getenv("FLOWLANE_COMM_DUMP_DIR");
    return d != nullptr ? d : "";
  }
  static uint64_t next_serial() {
    static std::atomic<uint64_t> n{0};
    return n.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  // Nothing dumps this engine from now on (waits for a dump under way).
  void forget_engine() {
    std::lock_guard<std::mutex> lk(dumps_->mu);
    dumps_->engine = nullptr;
  }

  Engine* engine_;
  std::shared_ptr<EngineDumps> dumps_;
  std::mutex mu_;
  std::vector<std::shared_ptr<Communicator>> comms_;
};

Registry& registry(Engine& e) {
  if (auto* r = static_cast<Registry*>(e.extension(&kRegistryKey))) return *r;
  return *static_cast<Registry*>(e.attach(&kRegistryKey, std::make_unique<Registry>(&e)));
}

}  // namespace

std::vector<std::shared_ptr<Communicator>> communicators(Engine& e) { return registry(e).list(); }

std::shared_ptr<EngineDumps> engine_dumps(Engine& e) { return registry(e).dumps(); }

void unique_id(uint32_t backend, fl_comm_unique_id_t* out) {
  if (backend == FL_COMM_HOST_FAKE) return host_unique_id(out);
  if (backend != FL_COMM_NCCL)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_comm_get_unique_id: backend " + std::to_string(backend) +
                                      " is unknown (FL_COMM_NCCL = 0, FL_COMM_HOST_FAKE = 1)");
  std::string why;
  if (!nccl_usable(&why)) fail(FL_ERR_UNSUPPORTED, "fl_comm_get_unique_id: the NCCL backend is not available: " + why);
  nccl_unique_id(out);
}

Communicator* create(Engine* e, const fl_comm_desc_t& d, const fl_comm_unique_id_t& id) {
  check_desc(*e, d);
  const Settings settings = read_settings();
  std::shared_ptr<Communicator> c;
  if (d.backend == FL_COMM_HOST_FAKE) {
    c = create_host(e, d, id, settings);
  } else if (d.backend == FL_COMM_NCCL) {
    std::string why;
    if (!nccl_usable(&why)) fail(FL_ERR_UNSUPPORTED, "fl_comm_create: the NCCL backend is not available: " + why);
    if (is_host_unique_id(id))
      fail(FL_ERR_INVALID_ARGUMENT, "fl_comm_create: the unique id was made by fl_comm_get_unique_id(FL_COMM_HOST_FAKE); "
                                    "an NCCL communicator needs fl_comm_get_unique_id(FL_COMM_NCCL)");
    c = create_nccl(e, d, id, settings);
  } else {
    fail(FL_ERR_INVALID_ARGUMENT, "fl_comm_create: backend " + std::to_string(d.backend) +
                                      " is unknown (FL_COMM_NCCL = 0, FL_COMM_HOST_FAKE = 1)");
  }
  return enroll(std::move(c), settings);
}

Communicator* enroll(std::shared_ptr<Communicator> c, const Settings& settings) {
  Communicator* raw = c.get();
  Registry& reg = registry(*c->engine);
  reg.add(std::move(c));
  if (settings.signals != 0) monitor_install_signals(settings.signals);
  if (!reg.dumps()->dir.empty() || settings.timeout_ms != 0) monitor_watch(reg.dumps());
  return raw;
}

void set_timeout(Communicator& c, uint64_t timeout_ms) {
  if (timeout_ms > kMaxTimeoutMs)
    fail(FL_ERR_OUT_OF_RANGE, "fl_comm_set_timeout: timeout_ms " + std::to_string(timeout_ms) +
                                  " is over one day (" + std::to_string(kMaxTimeoutMs) + ")");
  c.timeout_ms.store(timeout_ms, std::memory_order_relaxed);
  if (timeout_ms != 0) monitor_watch(engine_dumps(*c.engine));
}

void destroy(Communicator* c) {
  const uint64_t pending = c->recorder.queued_seq() - c->recorder.finished_seq();
  if (pending > 0)
    dump_triggered(engine_dumps(*c->engine), DumpReason::kAbort,
                   "rank " + std::to_string(c->rank) + " destroyed communicator " + hex(c->id) + " with " +
                       std::to_string(pending) + " collective(s) pending (fl_comm_destroy)",
                   /*request_all=*/true);
  std::shared_ptr<Communicator> keep = registry(*c->engine).remove(c);  // dropped after the abort
  c->abort("rank " + std::to_string(c->rank) + " destroyed its communicator (fl_comm_destroy)", false);
}

}  // namespace flowlane::comm
