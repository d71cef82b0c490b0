// Randomized multi-threaded stress checked against a sequential model.
//
// Each round: several threads submit, each on its own lane, instructions over a few shared
// objects (1-3 operands, read / write / read-write), some of which fail on purpose and some
// of which wait inside their callback (fl_object_wait or fl_stream_synchronize on objects a
// producer thread writes on its own lane, a nested fl_parallel_for, or a wait on one of their
// own operands, which must be refused). A collector thread may synchronize concurrently.
// Afterwards the run is replayed sequentially in recording order (instruction ids):
//   - each thread's instructions were recorded in its submission order;
//   - every object saw its users in one serial order equal to the recording order (writers
//     exclusive and in id order, readers between the writers they were recorded between);
//   - exactly the instructions the model runs were run (an instruction reading a poisoned
//     object is skipped, a failed or skipped writer poisons what it writes);
//   - every cleanup ran once; the waits answered as documented;
//   - every injected failure that ran was reported exactly once, naming it, and the
//     reports' skipped counts add up to the model's skipped instructions.
//
// Usage: flowlane_model_stress [--seconds S] [--seed N] [--round-seed N]
//   --seconds: run rounds until S seconds have passed (default 5);
//   --seed: master seed (default: from the clock; printed first, so any run can be replayed);
//   --round-seed: run exactly one round with this seed (printed with any failure).
// FLOWLANE_STRESS_SEED in the environment sets the master seed as --seed does.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "flowlane/flowlane.h"

#ifndef FL_UNDER_SANITIZER
#define FL_UNDER_SANITIZER 0
#endif

namespace {

constexpr int kMaxObjects = 6;
constexpr int kSideObjects = 3;

enum WaitKind : uint8_t { kNoWait, kWaitSide, kSyncProducer, kNestedLoop, kWaitOwnOperand };

struct ObjLog {
  std::atomic<int> active{0};
  std::mutex mu;
  std::vector<std::pair<uint64_t, uint8_t>> log;
};

struct Round;

struct Ins {
  Round* round = nullptr;
  int thread = 0;
  int index = 0;
  uint8_t read_mask = 0;  // objects read (R or RW)
  uint8_t write_mask = 0; // objects written (W or RW)
  bool fail = false;
  WaitKind wait = kNoWait;
  int wait_obj = 0;
  char name[32] = {};
  fl_instr_id id = 0;
  std::atomic<int> ran{0};
  std::atomic<int> cleaned{0};
  std::atomic<uint64_t> seen_id{0};
  std::atomic<int> wait_status{-1};
};

struct Round {
  fl_engine_t* engine = nullptr;
  fl_object_t* objs[kMaxObjects] = {};
  fl_object_t* side[kSideObjects] = {};
  fl_stream_t* producer = nullptr;
  int num_objects = 0;
  ObjLog logs[kMaxObjects];
  std::atomic<uint64_t> overlaps{0};
  std::vector<std::string> errors;
  std::mutex errors_mu;
  void error(const std::string& e) {
    std::lock_guard<std::mutex> lk(errors_mu);
    if (errors.size() < 20) errors.push_back(e);
  }
};

fl_status_t noop_fn(fl_instr_ctx_t*, void*) { return FL_OK; }

// The running round's engine, for the hang guard's state dump.
std::atomic<fl_engine_t*> g_engine{nullptr};

fl_status_t run_ins(fl_instr_ctx_t* ctx, void* ud) {
  Ins* in = static_cast<Ins*>(ud);
  Round* r = in->round;
  in->ran.fetch_add(1);
  // The id from the context: the submitter stores fl_submit_host's out id only after the
  // call returns, possibly after fn ran (the two are compared afterwards).
  const uint64_t id = fl_instr_get_id(ctx);
  in->seen_id.store(id);
  for (int o = 0; o < r->num_objects; ++o) {
    ObjLog& L = r->logs[o];
    if (in->write_mask & (1u << o)) {
      int expected = 0;
      if (!L.active.compare_exchange_strong(expected, -1)) r->overlaps.fetch_add(1);
      {
        std::lock_guard<std::mutex> lk(L.mu);
        L.log.emplace_back(id, uint8_t(FL_WRITE));
      }
      L.active.store(0);
    } else if (in->read_mask & (1u << o)) {
      if (L.active.fetch_add(1) < 0) r->overlaps.fetch_add(1);
      {
        std::lock_guard<std::mutex> lk(L.mu);
        L.log.emplace_back(id, uint8_t(FL_READ));
      }
      L.active.fetch_sub(1);
    }
  }
  switch (in->wait) {
    case kNoWait: break;
    case kWaitSide: in->wait_status = fl_object_wait(r->side[in->wait_obj], FL_READ); break;
    case kSyncProducer: in->wait_status = fl_stream_synchronize(r->producer); break;
    case kNestedLoop:
      in->wait_status = fl_parallel_for(r->engine, 0, 4, 1, [](uint64_t lo, uint64_t, void* u) {
        Ins* i = static_cast<Ins*>(u);
        return fl_object_wait(i->round->side[(i->wait_obj + int(lo)) % kSideObjects], FL_READ);
      }, in);
      break;
    case kWaitOwnOperand: in->wait_status = fl_object_wait(r->objs[in->wait_obj], FL_READ); break;
  }
  if (in->fail) {
    fl_instr_set_error(ctx, "injected failure");
    return FL_ERR_INSTRUCTION_FAILED;
  }
  return FL_OK;
}

void cleanup_ins(void* ud) { static_cast<Ins*>(ud)->cleaned.fetch_add(1); }

std::string check_log(const std::vector<std::pair<uint64_t, uint8_t>>& log) {
  uint64_t prev_writer = 0, next = UINT64_MAX;
  std::vector<uint64_t> writer_after(log.size(), UINT64_MAX);
  for (size_t k = log.size(); k-- > 0;) {
    writer_after[k] = next;
    if (log[k].second == FL_WRITE) next = log[k].first;
  }
  for (size_t k = 0; k < log.size(); ++k) {
    const uint64_t id = log[k].first;
    if (log[k].second == FL_WRITE) {
      if (id <= prev_writer) return "writer #" + std::to_string(id) + " ran after writer #" + std::to_string(prev_writer);
      prev_writer = id;
    } else if (!(prev_writer < id && id < writer_after[k])) {
      return "reader #" + std::to_string(id) + " ran between writers #" + std::to_string(prev_writer) + " and #" +
             std::to_string(writer_after[k]);
    }
  }
  return "";
}

struct Report {
  fl_status_t status;
  std::string message;
};

// "... (12 instructions that depended on it were skipped)" -> 12; 1 for the singular; 0.
uint64_t skipped_in(const std::string& m) {
  size_t at = m.rfind(" that depended on it ");
  if (at == std::string::npos) return 0;
  size_t open = m.rfind('(', at);
  if (open == std::string::npos) return 0;
  return std::strtoull(m.c_str() + open + 1, nullptr, 10);
}

std::string quoted_name(const std::string& m) {
  size_t a = m.find('\'');
  size_t b = a == std::string::npos ? a : m.find('\'', a + 1);
  return b == std::string::npos ? "" : m.substr(a + 1, b - a - 1);
}

// One round; returns "" or a description of what went wrong.
bool g_no_waits = false;  // --no-waits: no waits inside callbacks
int g_min_workers = 1;    // --min-workers N

std::string run_round(uint64_t seed, uint64_t* instructions) {
  std::mt19937_64 rng(seed);
  const int threads = 2 + int(rng() % 3);
  const int workers = std::max(g_min_workers, 1 + int(rng() % 3));
  const int num_objects = 3 + int(rng() % (kMaxObjects - 2));
  const int per_thread = int((FL_UNDER_SANITIZER ? 300 : 3000) + rng() % (FL_UNDER_SANITIZER ? 300 : 3000));
  const int fail_permille = int(rng() % 30);
  const int wait_permille = g_no_waits ? 0 * int(rng() % 40) : int(rng() % 40);
  const bool collector = rng() % 2 == 0;
  const uint64_t window = rng() % 3 == 0 ? 16 : 0;

  Round r;
  r.num_objects = num_objects;
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  d.num_workers = uint64_t(workers);
  d.max_lanes = uint64_t(threads) + 2;
  d.inflight_limit = window;
  if (fl_engine_create(&d, &r.engine) != FL_OK) return std::string("fl_engine_create: ") + fl_last_error_message();
  g_engine = r.engine;
  fl_device_t cpu{FL_DEVICE_CPU, 0};
  for (int o = 0; o < num_objects; ++o) fl_object_create(r.engine, nullptr, nullptr, &r.objs[o]);
  for (auto& s : r.side) fl_object_create(r.engine, nullptr, nullptr, &s);
  fl_stream_get(r.engine, uint32_t(threads) + 1, cpu, FL_STREAM_HOST, &r.producer);

  std::vector<std::vector<Ins>> prog(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    prog[size_t(t)] = std::vector<Ins>(size_t(per_thread));
    for (int k = 0; k < per_thread; ++k) {
      Ins& in = prog[size_t(t)][size_t(k)];
      in.round = &r;
      in.thread = t;
      in.index = k;
      const int n = 1 + int(rng() % 3);
      for (int j = 0; j < n; ++j) {
        const int o = int(rng() % uint64_t(num_objects));
        const uint32_t acc = 1 + uint32_t(rng() % 3);
        if (acc & FL_READ) in.read_mask |= uint8_t(1u << o);
        if (acc & FL_WRITE) in.write_mask |= uint8_t(1u << o);
      }
      in.fail = int(rng() % 1000) < fail_permille;
      if (int(rng() % 1000) < wait_permille) {
        in.wait = WaitKind(1 + rng() % 4);
        in.wait_obj = int(rng() % kSideObjects);
        if (in.wait == kWaitOwnOperand) {  // one it writes if any: that wait is always refused
          for (int o = 0; o < num_objects; ++o)
            if (in.read_mask & (1u << o)) in.wait_obj = o;
          for (int o = 0; o < num_objects; ++o)
            if (in.write_mask & (1u << o)) in.wait_obj = o;
        }
      }
      std::snprintf(in.name, sizeof in.name, "t%di%d", t, k);
    }
  }

  std::atomic<int> submitters_left{threads};
  std::vector<Report> reports;
  std::mutex reports_mu;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      fl_stream_t* s = nullptr;
      fl_stream_get(r.engine, uint32_t(t) + 1, cpu, FL_STREAM_HOST, &s);
      for (Ins& in : prog[size_t(t)]) {
        fl_operand_t ops[kMaxObjects];
        size_t n = 0;
        for (int o = 0; o < num_objects; ++o) {
          uint32_t acc = ((in.read_mask >> o) & 1u ? uint32_t(FL_READ) : 0u) | ((in.write_mask >> o) & 1u ? uint32_t(FL_WRITE) : 0u);
          if (acc) ops[n++] = fl_operand_t{r.objs[o], acc, 0};
        }
        fl_host_instr_t hi = FL_HOST_INSTR_INIT;
        hi.fn = &run_ins;
        hi.cleanup = &cleanup_ins;
        hi.user_data = &in;
        hi.operands = ops;
        hi.num_operands = n;
        hi.name = in.name;
        // Every third instruction asks to run on this thread when it is ready at once
        // (FL_SUBMIT_INLINE): its waits then happen on a submitting thread.
        if ((size_t(&in - prog[size_t(t)].data()) + size_t(t)) % 3 == 0) hi.flags = FL_SUBMIT_INLINE;
        fl_status_t st = fl_submit_host(s, &hi, &in.id);
        if (st != FL_OK) r.error(std::string("submit ") + in.name + ": " + fl_last_error_message());
      }
      submitters_left.fetch_sub(1);
    });
  std::thread producer([&] {
    std::mt19937_64 prng(seed ^ 0x5bd1e995u);
    while (submitters_left.load() > 0) {
      fl_operand_t op{r.side[prng() % kSideObjects], FL_WRITE, 0};
      fl_host_instr_t hi = FL_HOST_INSTR_INIT;
      hi.fn = &noop_fn;
      hi.operands = &op;
      hi.num_operands = 1;
      hi.name = "producer";
      if (fl_submit_host(r.producer, &hi, nullptr) != FL_OK) r.error(std::string("producer: ") + fl_last_error_message());
      std::this_thread::yield();
    }
  });
  std::thread coll;
  if (collector)
    coll = std::thread([&] {
      while (submitters_left.load() > 0) {
        fl_status_t st = fl_engine_synchronize(r.engine);
        if (st != FL_OK) {
          std::lock_guard<std::mutex> lk(reports_mu);
          reports.push_back({st, fl_last_error_message()});
        }
      }
    });
  for (auto& t : ts) t.join();
  producer.join();
  if (coll.joinable()) coll.join();
  for (;;) {
    fl_status_t st = fl_engine_synchronize(r.engine);
    if (st == FL_OK) break;
    reports.push_back({st, fl_last_error_message()});
  }

  // The sequential model, in recording (id) order.
  std::vector<Ins*> order;
  for (auto& v : prog)
    for (auto& in : v) order.push_back(&in);
  std::sort(order.begin(), order.end(), [](const Ins* a, const Ins* b) { return a->id < b->id; });
  for (auto& v : prog)
    for (size_t k = 1; k < v.size(); ++k)
      if (v[k].id <= v[k - 1].id)
        r.error(std::string(v[k].name) + " was recorded before " + v[k - 1].name + ", submitted earlier by its thread");
  bool poisoned[kMaxObjects] = {};
  std::map<std::string, int> roots;  // injected failures that ran -> times reported
  uint64_t skipped = 0;
  for (Ins* in : order) {
    bool skip = false;
    for (int o = 0; o < num_objects; ++o)
      if ((in->read_mask & (1u << o)) && poisoned[o]) skip = true;
    const bool failed = skip || in->fail;
    for (int o = 0; o < num_objects; ++o)
      if (in->write_mask & (1u << o)) poisoned[o] = failed;
    skipped += skip;
    if (!skip && in->fail) roots[in->name] = 0;
    if (in->ran.load() != (skip ? 0 : 1))
      r.error(std::string(in->name) + " (#" + std::to_string(in->id) + ") ran " + std::to_string(in->ran.load()) +
              " times; the model " + (skip ? "skips it" : "runs it once"));
    if (in->cleaned.load() != 1) r.error(std::string(in->name) + ": cleanup ran " + std::to_string(in->cleaned.load()) + " times");
    if (!skip && in->seen_id.load() != in->id)
      r.error(std::string(in->name) + ": fl_instr_get_id gave " + std::to_string(in->seen_id.load()) +
              ", fl_submit_host " + std::to_string(in->id));
    if (!skip && in->wait != kNoWait) {
      // Waiting on an own operand is refused when the caller writes it (it would wait for
      // itself or for a later user that waits for it); for one it only reads, the wait is
      // refused exactly when a later writer is pending, else it returns at once.
      const bool own = in->wait == kWaitOwnOperand;
      const bool writes = own && (in->write_mask & (1u << in->wait_obj)) != 0;
      const int want = own && writes ? FL_ERR_INVALID_ARGUMENT : FL_OK;
      const int got = in->wait_status.load();
      if (got != want && !(own && !writes && got == FL_ERR_INVALID_ARGUMENT))
        r.error(std::string(in->name) + ": wait kind " + std::to_string(int(in->wait)) + " answered " +
                fl_status_name(fl_status_t(in->wait_status.load())) + ", expected " + fl_status_name(fl_status_t(want)));
    }
  }
  for (int o = 0; o < num_objects; ++o) {
    std::string why = check_log(r.logs[o].log);
    if (!why.empty()) r.error("object " + std::to_string(o) + ": " + why);
  }
  if (r.overlaps.load() != 0) r.error(std::to_string(r.overlaps.load()) + " overlapping accesses to an object with a writer");
  uint64_t reported_skipped = 0;
  for (auto& rep : reports) {
    std::string name = quoted_name(rep.message);
    auto it = roots.find(name);
    if (rep.status != FL_ERR_INSTRUCTION_FAILED || it == roots.end()) {
      r.error(std::string("unexpected report ") + fl_status_name(rep.status) + ": " + rep.message);
      continue;
    }
    if (++it->second > 1) r.error("reported twice: " + rep.message);
    reported_skipped += skipped_in(rep.message);
  }
  for (auto& [name, times] : roots)
    if (times == 0) r.error("the failure of " + name + " was never reported");
  // A dependent skipped after its failure was returned (to the concurrent collector) is
  // counted on a report already made: only the final, quiet synchronizes count them all.
  if (collector ? reported_skipped > skipped : reported_skipped != skipped)
    r.error("reports count " + std::to_string(reported_skipped) + " skipped dependents, the model " +
            std::to_string(skipped));

  for (auto* o : r.objs)
    if (o) fl_object_release(o);
  for (auto* o : r.side) fl_object_release(o);
  g_engine = nullptr;
  if (fl_engine_destroy(r.engine) != FL_OK) r.error(std::string("fl_engine_destroy: ") + fl_last_error_message());
  *instructions += uint64_t(threads) * uint64_t(per_thread);
  if (r.errors.empty()) return "";
  std::string all = "threads=" + std::to_string(threads) + " workers=" + std::to_string(workers) +
                    " objects=" + std::to_string(num_objects) + " per_thread=" + std::to_string(per_thread) +
                    " collector=" + std::to_string(collector) + " window=" + std::to_string(window) + "\n";
  for (auto& e : r.errors) all += "  " + e + "\n";
  return all;
}

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 5;
  uint64_t seed = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  if (const char* env = std::getenv("FLOWLANE_STRESS_SEED")) seed = std::strtoull(env, nullptr, 0);
  bool one_round = false;
  uint64_t round_seed = 0;
  for (int k = 1; k < argc; ++k) {
    std::string a = argv[k];
    if (a == "--seconds" && k + 1 < argc) seconds = std::atof(argv[++k]);
    else if (a == "--seed" && k + 1 < argc) seed = std::strtoull(argv[++k], nullptr, 0);
    else if (a == "--round-seed" && k + 1 < argc) one_round = true, round_seed = std::strtoull(argv[++k], nullptr, 0);
    else if (a == "--no-waits") g_no_waits = true;
    else if (a == "--min-workers" && k + 1 < argc) g_min_workers = std::atoi(argv[++k]);
    else {
      std::fprintf(stderr, "usage: %s [--seconds S] [--seed N] [--round-seed N] [--no-waits] [--min-workers N]\n", argv[0]);
      return 2;
    }
  }
  if (!one_round) std::printf("model_stress: seed %llu (replay: --seed %llu)\n", (unsigned long long)seed, (unsigned long long)seed);
  std::fflush(stdout);
  // A round that deadlocks fails with its replay seed instead of hanging until ctest's timeout
  // (FLOWLANE_HANG_GUARD_S overrides the generous per-round limit).
  std::atomic<uint64_t> current_round_seed{0};
  std::atomic<int> progress{0};
  const char* guard_env = std::getenv("FLOWLANE_HANG_GUARD_S");
  const int guard_s = guard_env != nullptr && std::atoi(guard_env) > 0 ? std::atoi(guard_env) : 300;
  std::thread([&] {
    int last = -1;
    for (;;) {
      std::this_thread::sleep_for(std::chrono::seconds(guard_s));
      const int now = progress.load();
      if (now == last) {
        std::printf("HANG: a round (replay: --round-seed %llu; the whole run: --seed %llu) did not finish within "
                    "%d s: the engine deadlocked\n",
                    (unsigned long long)current_round_seed.load(), (unsigned long long)seed, guard_s);
        if (fl_engine_t* e = g_engine.load()) {
          static char dump[1 << 16];
          if (fl_engine_dump(e, dump, sizeof dump, nullptr) == FL_OK) std::printf("%s\n", dump);
        }
        std::fflush(stdout);
        std::abort();
      }
      last = now;
    }
  }).detach();
  const auto start = std::chrono::steady_clock::now();
  uint64_t instructions = 0;
  int rounds = 0;
  for (int k = 0;; ++k) {
    const uint64_t rs = one_round ? round_seed : splitmix(seed + uint64_t(k));
    current_round_seed = rs;
    progress.fetch_add(1);
    std::string err = run_round(rs, &instructions);
    ++rounds;
    if (!err.empty()) {
      std::printf("FAIL in round %d (replay this round: --round-seed %llu; the whole run: --seed %llu)\n%s", k,
                  (unsigned long long)rs, (unsigned long long)seed, err.c_str());
      return 1;
    }
    if (one_round) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= seconds) break;
  }
  std::printf("model_stress: PASS, %d rounds, %llu instructions, seed %llu\n", rounds, (unsigned long long)instructions,
              (unsigned long long)seed);
  return 0;
}
