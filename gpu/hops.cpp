// Per-hop timestamps and completion counters of the CUDA backend (gpu/hops.hpp).
#if FLOWLANE_HAVE_CUDA  // (gpu/hops.hpp needs the CUDA headers: nothing here without them)

#include "gpu/hops.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "gpu/poller.hpp"

namespace flowlane::gpu {

namespace {

const char* hops_path() {
  static const char* path = [] {
    const char* v = std::getenv("FLOWLANE_GPU_HOPS");
    return v != nullptr && *v != 0 ? v : nullptr;
  }();
  return path;
}

// The hops gathered since the last write, process-wide (a diagnostic run: a mutex per
// completion is acceptable, and said so in gpu/README.md). At most kMaxHops are kept.
constexpr size_t kMaxHops = 1 << 20;
struct Hop {
  HopTimes t;
  int64_t done;
  Completer who;
};
struct HopLog {
  std::mutex mu;
  std::vector<Hop> hops;
  uint64_t dropped = 0;
};
HopLog& hop_log() {
  static HopLog* l = new HopLog();  // never destroyed: engines may outlive statics
  return *l;
}

const char* completer_name(Completer who) {
  switch (who) {
    case Completer::kLane: return "lane";
    case Completer::kWaiter: return "waiter";
    default: return "poller";
  }
}

}  // namespace

bool stats_on() {
  static const bool on = [] {
    const char* v = std::getenv("FLOWLANE_GPU_STATS");
    return (v != nullptr && *v == '1') || hops_path() != nullptr;
  }();
  return on;
}

void count(std::atomic<uint64_t>& c) {
  if (stats_on()) c.fetch_add(1, std::memory_order_relaxed);  // a statistic: no ordering
}

void count_completion(Poller* p, Completer who) { count(counters_of(p).completed[int(who)]); }
void count_query(Poller* p, Completer who) { count(counters_of(p).queries[int(who)]); }

bool hops_on() { return hops_path() != nullptr; }

int64_t hop_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

HopTimes hop_times(Instr* i, const DeviceRecord& r, int64_t t_seen) {
  HopTimes h;
  h.engine = i->engine->handle();
  h.id = i->id;
  h.lane = i->stream->lane->id;
  h.submit = r.t_submit;
  h.issue = r.t_issue;
  h.launched = r.t_launched;
  h.covered = r.t_covered;
  h.seen = t_seen;
  return h;
}

void hop_done(const HopTimes& h, Completer who) {
  const int64_t done = hop_now();
  HopLog& l = hop_log();
  std::lock_guard<std::mutex> lock(l.mu);
  if (l.hops.size() >= kMaxHops) {
    ++l.dropped;
    return;
  }
  l.hops.push_back(Hop{h, done, who});
}

void report_counters(core::Engine* e, const Counters& c) {
  if (!stats_on()) return;
  auto v = [](const std::atomic<uint64_t>& x) { return (unsigned long long)x.load(std::memory_order_relaxed); };
  if (const char* s = std::getenv("FLOWLANE_GPU_STATS"); s != nullptr && *s == '1') {
    std::fprintf(stderr,
                 "flowlane-gpu-stats: engine %llu: completed by lane %llu, waiter %llu, poller %llu; event queries by "
                 "lane %llu, waiter %llu, poller %llu; value edges %llu (fallbacks to events %llu), value writes %llu, "
                 "waits %llu, releases %llu\n",
                 (unsigned long long)e->handle(), v(c.completed[1]), v(c.completed[2]), v(c.completed[0]),
                 v(c.queries[1]), v(c.queries[2]), v(c.queries[0]), v(c.value_edges), v(c.value_fallbacks),
                 v(c.value_writes), v(c.value_waits), v(c.value_releases));
  }
  const char* path = hops_path();
  if (path == nullptr) return;
  HopLog& l = hop_log();
  std::lock_guard<std::mutex> lock(l.mu);
  FILE* f = std::fopen(path, "a");
  if (f == nullptr) {
    std::fprintf(stderr, "flowlane: FLOWLANE_GPU_HOPS: cannot open %s for appending\n", path);
    return;
  }
  for (const Hop& h : l.hops)
    std::fprintf(f, "%llu %llu %u %s %lld %lld %lld %lld %lld %lld\n", (unsigned long long)h.t.engine,
                 (unsigned long long)h.t.id, h.t.lane,
                 completer_name(h.who), (long long)h.t.submit, (long long)h.t.issue, (long long)h.t.launched,
                 (long long)h.t.covered, (long long)h.t.seen, (long long)h.done);
  if (l.dropped != 0) std::fprintf(f, "# dropped %llu records (more than %zu)\n", (unsigned long long)l.dropped, kMaxHops);
  std::fclose(f);
  l.hops.clear();
  l.dropped = 0;
}

}  // namespace flowlane::gpu

#endif  // FLOWLANE_HAVE_CUDA
