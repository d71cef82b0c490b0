// The poller of the CUDA backend (gpu/poller.hpp).
#include "gpu/poller.hpp"

#if FLOWLANE_HAVE_CUDA

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/cpu.hpp"
#include "base/env.hpp"
#include "gpu/complete.hpp"
#include "gpu/cuda.hpp"
#include "gpu/hops.hpp"
#include "gpu/value_edges.hpp"

namespace flowlane::gpu {

namespace {

// One thread per engine, started with the first device instruction: the fallback that
// completes device work no other thread completes (gpu/complete.hpp). Lanes hand it streams
// with queued work (`incoming`) when they leave them, or when what they queued runs user
// code; it keeps them in `active` and queries the event covering each one's head until
// nothing is queued, dropping a stream its lane watches again (the lane completes it). With
// work in flight and no progress it spins briefly (pacing its queries), then yields, then
// sleeps in growing steps (bounded by kMaxSleep) until new work arrives. With nothing in
// flight it watches `has_incoming` for kIdleSpin (a host that waits for a GPU result and
// then launches the next step comes back within microseconds), then sleeps on `cv`; a
// lane notifies only a sleeping poller, so a busy one costs launchers no system call.

// Between two queries that found no progress, the spinning poller pauses kPollPaceNs
// (FLOWLANE_POLL_PACE_NS; 0: a CPU pause only). Every cudaEventQuery enters the CUDA driver,
// which the lanes' launches enter too; whether a query loop without pauses slows launches
// down, and which pause pays, is what BM_RawChainWithPollingThread and scripts/dev/gpu-knobs.sh
// measure on a GPU host. Until they have, the default keeps the measured behaviour (no pause).
constexpr int64_t kPollPaceNs = 0;
constexpr int kSpinPolls = 64;
constexpr int kYieldPolls = 64;
constexpr auto kMinSleep = std::chrono::microseconds(2);
constexpr auto kMaxSleep = std::chrono::microseconds(100);
constexpr auto kIdleSpin = std::chrono::microseconds(50);

}  // namespace

struct Poller {
  core::Engine* engine = nullptr;
  Settings settings;
  Counters counters;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<StreamState*> incoming;  // streams handed over (registered), under mu
  bool stop = false;             // under mu
  bool sleeping = false;         // under mu: the poller waits on cv
  // A hint that `incoming` is not empty or `stop` is set, read without the lock: written
  // under mu (release), read by the poller (acquire) before it takes mu, which decides.
  std::atomic<bool> has_incoming{false};
  std::thread thread;
  // The engine's stream states, newest first (StreamState::next_of_engine): waiting threads
  // walk them (help_complete). Release store of each new head (stream_listed, under
  // pool_mu) pairs with the acquire load in all_streams(); entries are freed only after
  // the engine drained.
  std::atomic<StreamState*> all{nullptr};

  // The engine's event pool, per device, and the count of its CUDA stream states (the
  // last one destroyed after the drain frees this poller). Under pool_mu.
  std::mutex pool_mu;
  std::vector<std::vector<cudaEvent_t>> free_events;
  bool closed = false;  // after the drain: returned events are destroyed, not pooled
  int streams = 0;
  // The engine's CUDA streams, per device (at most cuda_stream_budget() of them): under
  // pool_mu.
  struct Shared {
    cudaStream_t cs = nullptr;
    uint32_t kind = 0;  // fl_stream_kind_t of its first user
    int users = 0;
  };
  std::vector<std::vector<Shared>> cuda_streams;

  void run();
  bool poll(std::vector<StreamState*>& active);
  bool keep(StreamState* ss);
  void pace();
  void spin_while_idle();
};

namespace {
int64_t poll_pace_ns() {
  static const int64_t ns = env_count("FLOWLANE_POLL_PACE_NS", kPollPaceNs, 1'000'000);
  return ns;
}

// Settings of a new engine's poller (poller.hpp), from the environment of the moment.
Settings read_settings() {
  Settings s;
  if (const char* v = std::getenv("FLOWLANE_GPU_COMPLETE"); v != nullptr && *v != 0) {
    const std::string list(v);
    s.lane_completes = list.find("lane") != std::string::npos;
    s.waiter_completes = list.find("waiter") != std::string::npos;
  }
  s.value_edges = env_count("FLOWLANE_GPU_VALUE_EDGES", 0, 1) == 1;
  return s;
}
}  // namespace

void Poller::pace() {
  const int64_t ns = poll_pace_ns();
  if (ns <= 0) {
    cpu_relax();
    return;
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
  do {
    for (int k = 0; k < 8; ++k) cpu_relax();
    if (has_incoming.load(std::memory_order_relaxed)) return;  // a hint only: run() decides (acquire there)
  } while (std::chrono::steady_clock::now() < until);
}

void Poller::spin_while_idle() {
  auto until = std::chrono::steady_clock::now() + kIdleSpin;
  for (int n = 1;; ++n) {
    if (has_incoming.load(std::memory_order_acquire)) return;  // pairs with the release store in hand_to_poller()
    if ((n & 31) == 0) {
      if (std::chrono::steady_clock::now() >= until) return;
      std::this_thread::yield();  // an oversubscribed machine's lanes need the core more
    } else {
      cpu_relax();
    }
  }
}

cudaError_t make_current(int dev) {
  int cur = -1;
  cudaError_t r = cu().cudaGetDevice(&cur);
  if (r == cudaSuccess && cur == dev) return cudaSuccess;
  return cu().cudaSetDevice(dev);
}

// Whether the poller keeps `ss` in its active list: something is queued that no lane
// completes (its lane left it, or it needs the poller). Otherwise it drops the stream:
// `registered` cleared, then `queued` and `watched` looked at again (seq_cst: the
// store-load pairs with append_run / lane_leave, see StreamState), re-registering it if
// work arrived meanwhile.
bool Poller::keep(StreamState* ss) {
  // seq_cst loads: the load half of the store-load pairs with lane_leave (its store of
  // `watched`) and append_run / hand_to_poller (their increments, then the exchange of
  // `registered`).
  auto wanted = [ss] {
    const bool queued = ss->queued.load(std::memory_order_seq_cst) != 0;  // pairs with append_run (store-load)
    const bool watched = ss->watched.load(std::memory_order_seq_cst);     // pairs with lane_leave (store-load)
    const bool heavy = ss->heavy.load(std::memory_order_seq_cst) != 0;    // pairs with append_run (store-load)
    return queued && (!watched || heavy);
  };
  if (wanted()) return true;
  // The store of that store-load pair; the exchange pairs with hand_to_poller's (one of
  // us registers it).
  ss->registered.store(false, std::memory_order_seq_cst);
  if (wanted() && !ss->registered.exchange(true, std::memory_order_seq_cst)) return true;
  ss->in_active = false;
  return false;
}

bool Poller::poll(std::vector<StreamState*>& active) {
  bool progress = false;
  for (size_t k = 0; k < active.size();) {
    StreamState* ss = active[k];
    // A stream its lane watches is the lane's to complete (unless user code must run).
    // acquire pairs with lane_watch/lane_leave's and append_run's seq_cst writes (hints:
    // completing under the try-lock is right either way).
    if (!ss->watched.load(std::memory_order_acquire) || ss->heavy.load(std::memory_order_acquire) != 0) {
      // The stream's device is current while its events are queried and the release and
      // cleanup callbacks of its instructions run (they may use CUDA themselves).
      if (make_current(ss->device) != cudaSuccess) (void)cu().cudaGetLastError();
      if (complete_ready(ss, Completer::kPoller)) progress = true;
    }
    if (keep(ss)) {
      ++k;
    } else {
      active[k] = active.back();
      active.pop_back();
    }
  }
  return progress;
}

void Poller::run() {
  std::vector<StreamState*> active;
  std::vector<StreamState*> batch;
  int idle = 0;
  auto sleep = kMinSleep;
  for (;;) {
    if (active.empty()) spin_while_idle();
    const bool quiet = idle >= kSpinPolls + kYieldPolls;
    // acquire: pairs with the release store of has_incoming in hand_to_poller() and stop_poller().
    if (active.empty() || quiet || has_incoming.load(std::memory_order_acquire)) {
      std::unique_lock<std::mutex> lock(mu);
      if (active.empty() && incoming.empty()) {
        if (stop) return;
        sleeping = true;
        cv.wait(lock, [this] { return stop || !incoming.empty(); });
        sleeping = false;
        if (incoming.empty()) return;  // stop, and nothing left
      } else if (quiet && incoming.empty()) {
        sleeping = true;
        cv.wait_for(lock, sleep, [this] { return !incoming.empty(); });
        sleeping = false;
        sleep = std::min<std::chrono::microseconds>(sleep * 2, kMaxSleep);
      }
      batch.swap(incoming);
      has_incoming.store(stop, std::memory_order_relaxed);  // under mu
    }
    for (StreamState* ss : batch) {
      if (!ss->in_active) {
        ss->in_active = true;
        active.push_back(ss);
      }
    }
    if (!batch.empty()) idle = 0;
    batch.clear();
    if (poll(active)) {
      idle = 0;
      sleep = kMinSleep;
    } else if (++idle <= kSpinPolls) {
      pace();
    } else if (idle <= kSpinPolls + kYieldPolls) {
      std::this_thread::yield();
    }
  }
}

Poller* poller_of(core::Engine* e) {
  // acquire pairs with the release store below.
  if (void* p = e->device_state.load(std::memory_order_acquire)) return static_cast<Poller*>(p);
  std::lock_guard<std::mutex> lock(e->device_mu);
  if (void* p = e->device_state.load(std::memory_order_relaxed)) return static_cast<Poller*>(p);
  auto p = std::make_unique<Poller>();
  p->engine = e;
  p->settings = read_settings();
  p->thread = std::thread([raw = p.get()] {
    pthread_setname_np(pthread_self(), "fl-gpu-poller");  // named for profilers and the fake's counters
    core::set_completion_thread(raw->engine);
    raw->run();
  });
  Poller* raw = p.release();
  // release: publishes the started poller; pairs with the acquire loads above, in help_complete() and in value_edge().
  e->device_state.store(raw, std::memory_order_release);
  return raw;
}

void hand_to_poller(StreamState* ss) {
  // seq_cst: pairs with Poller::keep's store and exchange of `registered` (a store-load
  // pair with what the caller stored before: one of the two registers the stream).
  if (ss->registered.exchange(true, std::memory_order_seq_cst)) return;
  Poller* p = ss->poller;
  bool wake;
  {
    std::lock_guard<std::mutex> lock(p->mu);
    p->incoming.push_back(ss);
    p->has_incoming.store(true, std::memory_order_release);  // pairs with the poller's acquire loads
    wake = p->sleeping;
  }
  if (wake) p->cv.notify_one();
}

void stream_listed(Poller* p, StreamState* ss) {
  std::lock_guard<std::mutex> lock(p->pool_mu);
  ss->next_of_engine = p->all.load(std::memory_order_relaxed);
  p->all.store(ss, std::memory_order_release);  // pairs with the acquire load in all_streams()
}

StreamState* all_streams(Poller* p) { return p->all.load(std::memory_order_acquire); }  // pairs with stream_listed()

const Settings& settings_of(Poller* p) { return p->settings; }
Counters& counters_of(Poller* p) { return p->counters; }

void stop_poller(core::Engine* e) {
  // acq_rel: pairs with the release store in poller_of(); after the drain, so nothing races.
  Poller* p = static_cast<Poller*>(e->device_state.exchange(nullptr, std::memory_order_acq_rel));
  if (p == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(p->mu);
    p->stop = true;
    p->has_incoming.store(true, std::memory_order_release);  // ends an idle spin; pairs with the poller's acquire loads
  }
  p->cv.notify_one();
  p->thread.join();
  report_counters(p->engine, p->counters);  // FLOWLANE_GPU_STATS, FLOWLANE_GPU_HOPS
  bool last;
  {
    std::lock_guard<std::mutex> lock(p->pool_mu);
    p->closed = true;
    for (size_t dev = 0; dev < p->free_events.size(); ++dev) {
      if (p->free_events[dev].empty()) continue;
      if (make_current(int(dev)) == cudaSuccess)
        for (cudaEvent_t ev : p->free_events[dev]) (void)cu().cudaEventDestroy(ev);
      (void)cu().cudaGetLastError();
      p->free_events[dev].clear();
    }
    last = p->streams == 0;
  }
  if (last) delete p;
}

cudaError_t event_get(Poller* p, int device, cudaEvent_t* out) {
  {
    std::lock_guard<std::mutex> lock(p->pool_mu);
    if (size_t(device) < p->free_events.size() && !p->free_events[size_t(device)].empty()) {
      *out = p->free_events[size_t(device)].back();
      p->free_events[size_t(device)].pop_back();
      return cudaSuccess;
    }
  }
  return cu().cudaEventCreateWithFlags(out, cudaEventDisableTiming);
}

void event_put(Poller* p, int device, cudaEvent_t e) {
  {
    std::lock_guard<std::mutex> lock(p->pool_mu);
    if (!p->closed) {
      if (p->free_events.size() <= size_t(device)) p->free_events.resize(size_t(device) + 1);
      p->free_events[size_t(device)].push_back(e);
      return;
    }
  }
  // After the drain (an instruction recycled late, e.g. from the failure ledger).
  int saved = -1;
  (void)cu().cudaGetDevice(&saved);
  if (make_current(device) == cudaSuccess) (void)cu().cudaEventDestroy(e);
  if (saved >= 0 && saved != device) (void)cu().cudaSetDevice(saved);
  (void)cu().cudaGetLastError();
}

int cuda_stream_budget() {
  static const int n = [] {
    // CUDA_DEVICE_MAX_CONNECTIONS' default is 8; 0 or junk means unset.
    int64_t x = env_count("FLOWLANE_CUDA_STREAMS", 0, 1024);
    if (x == 0) x = env_count("CUDA_DEVICE_MAX_CONNECTIONS", 0, 1024);
    return x > 0 ? int(x) : 8;
  }();
  return n;
}

cudaError_t acquire_cuda_stream(Poller* p, int device, uint32_t kind, int priority, cudaStream_t* out) {
  std::lock_guard<std::mutex> lock(p->pool_mu);
  if (p->cuda_streams.size() <= size_t(device)) p->cuda_streams.resize(size_t(device) + 1);
  std::vector<Poller::Shared>& v = p->cuda_streams[size_t(device)];
  const bool collective = kind == FL_STREAM_COLLECTIVE;
  if (!collective && int(v.size()) >= cuda_stream_budget()) {
    // Over the budget: share the least used non-collective stream, preferring one of the
    // same kind (copies queue behind copies, kernels behind kernels).
    Poller::Shared* best = nullptr;
    for (Poller::Shared& x : v) {
      if (x.kind == FL_STREAM_COLLECTIVE) continue;
      if (best == nullptr || (x.kind == kind && best->kind != kind) ||
          ((x.kind == kind) == (best->kind == kind) && x.users < best->users))
        best = &x;
    }
    if (best != nullptr) {
      ++best->users;
      *out = best->cs;
      return cudaSuccess;
    }
  }
  cudaStream_t cs = nullptr;
  cudaError_t r = cu().cudaStreamCreateWithPriority(&cs, cudaStreamNonBlocking, priority);
  if (r != cudaSuccess) return r;
  v.push_back(Poller::Shared{cs, kind, 1});
  *out = cs;
  return cudaSuccess;
}

void release_cuda_stream(Poller* p, int device, cudaStream_t cs) {
  std::lock_guard<std::mutex> lock(p->pool_mu);
  std::vector<Poller::Shared>& v = p->cuda_streams[size_t(device)];
  for (size_t k = 0; k < v.size(); ++k) {
    if (v[k].cs != cs) continue;
    if (--v[k].users == 0) {
      if (make_current(device) == cudaSuccess) (void)cu().cudaStreamDestroy(cs);  // drained: nothing pending
      (void)cu().cudaGetLastError();
      v.erase(v.begin() + long(k));
    }
    return;
  }
}

void stream_attached(Poller* p) {
  std::lock_guard<std::mutex> lock(p->pool_mu);
  ++p->streams;
}

void stream_detached(Poller* p) {
  bool last;
  {
    std::lock_guard<std::mutex> lock(p->pool_mu);
    last = --p->streams == 0 && p->closed;
  }
  if (last) delete p;
}

}  // namespace flowlane::gpu

#endif
