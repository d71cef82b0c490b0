// The CUDA backend's runtime: stream state, the event pool, the launch step run by the
// lane runner and the per-engine poller thread that detects GPU completion. Protocol:
// gpu/README.md. In a CPU-only build only the trivial hooks at the end are compiled.
#include "gpu/backend.hpp"

#include "core/engine.hpp"

#if FLOWLANE_HAVE_CUDA

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "gpu/cuda.hpp"
#include "gpu/nccl.hpp"

namespace flowlane::gpu {

using core::Instr;
using core::InstrState;

int device_count() {
  static const int n = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the (non-sticky) error: no driver or no device
      count = 0;
    }
    return count;
  }();
  return n;
}

std::string cuda_message(cudaError_t e, const char* call) {
  return std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") from " + call;
}

StreamState* state_of(core::Stream* s) { return static_cast<StreamState*>(s->backend); }

cudaStream_t cuda_stream(core::Stream* s) { return state_of(s)->cs; }

void* stream_state_create(core::Stream* s) {
  auto* ss = new StreamState();
  ss->stream = s;
  ss->device = s->device.index;
  return ss;
}

void stream_state_destroy(core::Stream* s) {
  StreamState* ss = state_of(s);
  if (ss == nullptr) return;
  if (ss->cs != nullptr) {
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur != ss->device) (void)cudaSetDevice(ss->device);
    (void)cudaStreamDestroy(ss->cs);  // after the drain: nothing is pending on it
    (void)cudaGetLastError();
  }
  delete ss;
  s->backend = nullptr;
}

// ---------------------------------------------------------------------------------------
// Event pool: one free list per device, process-wide (records outlive no engine, but a
// process-wide pool needs no teardown order). Events are created with
// cudaEventDisableTiming when the list is empty, so after warm-up (the high-water mark of
// events alive at once) nothing is created on the hot path. Never destroyed.

namespace {

struct EventPool {
  std::mutex mu;
  std::vector<cudaEvent_t> free;
};

EventPool& event_pool(int device) {
  static const int n = std::max(1, device_count());
  static EventPool* pools = new EventPool[size_t(n)];  // never destroyed
  return pools[std::clamp(device, 0, n - 1)];
}

// The device must be current (the launch made it so).
cudaError_t event_get(int device, cudaEvent_t* out) {
  EventPool& p = event_pool(device);
  {
    std::lock_guard<std::mutex> lock(p.mu);
    if (!p.free.empty()) {
      *out = p.free.back();
      p.free.pop_back();
      return cudaSuccess;
    }
  }
  return cudaEventCreateWithFlags(out, cudaEventDisableTiming);
}

void event_put(int device, cudaEvent_t e) {
  EventPool& p = event_pool(device);
  std::lock_guard<std::mutex> lock(p.mu);
  p.free.push_back(e);
}

// ---------------------------------------------------------------------------------------
// The poller: one thread per engine, started with the first device instruction. Lanes
// append covered runs to `incoming` (launch order per stream, since a stream's
// instructions launch one at a time on its lane); the poller moves them to their stream's
// FIFO and queries the event covering the head of each stream, completing instructions in
// stream order. With work in flight and no progress it spins briefly, then yields, then
// sleeps in growing steps (bounded by kMaxSleep) until new work arrives. With nothing in
// flight it watches `has_incoming` for kIdleSpin (a host that waits for a GPU result and
// then launches the next step comes back within microseconds), then sleeps on `cv`; a
// lane notifies only a sleeping poller, so a busy one costs launchers no system call.

constexpr int kSpinPolls = 64;
constexpr int kYieldPolls = 64;
constexpr auto kMinSleep = std::chrono::microseconds(2);
constexpr auto kMaxSleep = std::chrono::microseconds(100);
constexpr auto kIdleSpin = std::chrono::microseconds(50);

struct Poller {
  core::Engine* engine = nullptr;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Instr*> incoming;  // under mu
  bool stop = false;             // under mu
  bool sleeping = false;         // under mu: the poller waits on cv
  // A hint that `incoming` is not empty or `stop` is set, read without the lock: written
  // under mu (release), read by the poller (acquire) before it takes mu, which decides.
  std::atomic<bool> has_incoming{false};
  std::thread thread;

  void run();
  bool poll(std::vector<StreamState*>& active);
  void spin_while_idle();
};

void Poller::spin_while_idle() {
  auto until = std::chrono::steady_clock::now() + kIdleSpin;
  for (int n = 1;; ++n) {
    if (has_incoming.load(std::memory_order_acquire)) return;
    if ((n & 31) == 0) {
      if (std::chrono::steady_clock::now() >= until) return;
      std::this_thread::yield();  // an oversubscribed machine's lanes need the core more
    } else {
      FL_CPU_RELAX();
    }
  }
}

// The event that tells whether `i` (launched, in a stream FIFO) has completed: its own, or
// the one recorded after it on the same stream (Instr::cover).
cudaEvent_t completion_event(const Instr* i) {
  return static_cast<cudaEvent_t>(i->event != nullptr ? i->event : i->cover->event);
}

bool Poller::poll(std::vector<StreamState*>& active) {
  bool progress = false;
  for (size_t k = 0; k < active.size();) {
    StreamState* ss = active[k];
    while (!ss->launched.empty()) {
      // The FIFO's head and the instructions up to its covering event complete together.
      Instr* head = ss->launched.front();
      cudaError_t r = cudaEventQuery(completion_event(head));
      if (r == cudaErrorNotReady) break;
      progress = true;
      std::string detail;
      if (r != cudaSuccess) {
        (void)cudaGetLastError();  // a sticky error stays; a non-sticky one is reported once
        detail = cuda_message(r, "the GPU work (asynchronous fault, seen by cudaEventQuery on the event recorded "
                                 "after this instruction's run of its stream)");
      }
      for (;;) {
        Instr* i = ss->launched.front();
        ss->launched.pop_front();
        bool owner = i->event != nullptr;  // read before completion may recycle i
        if (r == cudaSuccess && i->kind == core::InstrKind::kCollective) {
          std::string why;  // an NCCL collective cut short by an abort completes on the GPU too
          fl_status_t st = nccl_settle(i, &why);
          engine->complete_device(i, st, why);
        } else {
          engine->complete_device(i, r == cudaSuccess ? FL_OK : FL_ERR_CUDA, detail);
        }
        if (owner) break;
      }
    }
    if (ss->launched.empty()) {
      ss->polled = false;
      active[k] = active.back();
      active.pop_back();
    } else {
      ++k;
    }
  }
  return progress;
}

void Poller::run() {
  std::vector<StreamState*> active;
  std::vector<Instr*> batch;
  int idle = 0;
  auto sleep = kMinSleep;
  for (;;) {
    if (active.empty()) spin_while_idle();
    const bool quiet = idle >= kSpinPolls + kYieldPolls;
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
    for (Instr* i : batch) {
      StreamState* ss = state_of(i->stream);
      ss->launched.push_back(i);
      if (!ss->polled) {
        ss->polled = true;
        active.push_back(ss);
      }
    }
    if (!batch.empty()) idle = 0;
    batch.clear();
    if (poll(active)) {
      idle = 0;
      sleep = kMinSleep;
    } else if (++idle <= kSpinPolls) {
      FL_CPU_RELAX();
    } else if (idle <= kSpinPolls + kYieldPolls) {
      std::this_thread::yield();
    }
  }
}

Poller* poller_of(core::Engine* e) {
  // acquire pairs with the release store below.
  if (void* p = e->gpu_backend.load(std::memory_order_acquire)) return static_cast<Poller*>(p);
  std::lock_guard<std::mutex> lock(e->gpu_backend_mu);
  if (void* p = e->gpu_backend.load(std::memory_order_relaxed)) return static_cast<Poller*>(p);
  auto p = std::make_unique<Poller>();
  p->engine = e;
  p->thread = std::thread([raw = p.get()] {
    core::set_completion_thread(raw->engine);
    raw->run();
  });
  Poller* raw = p.release();
  e->gpu_backend.store(raw, std::memory_order_release);  // publishes the started poller
  return raw;
}

}  // namespace

void event_release(Instr* i) {
  event_put(i->stream->device.index, static_cast<cudaEvent_t>(i->event));
  i->event = nullptr;
}

// Makes `dev` current on this thread (a user callback may have changed it).
static cudaError_t make_current(int dev) {
  int cur = -1;
  cudaError_t r = cudaGetDevice(&cur);
  if (r == cudaSuccess && cur == dev) return cudaSuccess;
  return cudaSetDevice(dev);
}

fl_status_t launch(Instr* i) {
  core::Stream* s = i->stream;
  StreamState* ss = state_of(s);
  (void)poller_of(i->engine);  // started before anything is tracked
  const int dev = ss->device;
  cudaError_t r = make_current(dev);
  if (r != cudaSuccess) {
    i->error = cuda_message(r, "cudaSetDevice");
    return r == cudaErrorInvalidDevice || r == cudaErrorNoDevice ? FL_ERR_NO_DEVICE : FL_ERR_CUDA;
  }
  if (ss->cs == nullptr) {
    r = cudaStreamCreateWithPriority(&ss->cs, cudaStreamNonBlocking, ss->priority);
    if (r != cudaSuccess) {
      ss->cs = nullptr;
      i->error = cuda_message(r, "cudaStreamCreateWithPriority");
      return FL_ERR_CUDA;
    }
  }
  // Cross-stream device predecessors: order by their events on the GPU (DESIGN rule 3).
  // acquire pairs with the release store of kLaunched in Engine::cover_launched(), which
  // follows the writes of pred->event / pred->cover; the dep entry's reference keeps pred,
  // and pred's reference keeps its cover, so the event stays ours while we wait on it.
  // A predecessor that is not yet kLaunched here was launched by this very lane (no edge:
  // lane order), and the lane covered it before switching streams.
  for (const Instr::Dep& d : i->deps) {
    if ((d.flags & Instr::Dep::kLaunchWait) == 0) continue;
    InstrState ps = d.pred->load_state(std::memory_order_acquire);
    if (ps != InstrState::kLaunched) continue;  // completed, failed, skipped: nothing on the GPU to wait for
    r = cudaStreamWaitEvent(ss->cs, completion_event(d.pred), 0);
    if (r != cudaSuccess) {
      i->error = cuda_message(r, "cudaStreamWaitEvent") + " waiting for " + d.pred->describe();
      return FL_ERR_CUDA;
    }
  }
  fl_status_t st = i->fn(reinterpret_cast<fl_instr_ctx_t*>(i), i->user_data);
  cudaError_t last = cudaGetLastError();
  if (st == FL_OK && last != cudaSuccess) {
    if (i->error.empty()) i->error = cuda_message(last, "the launch");
    st = FL_ERR_CUDA;
  }
  return st;
}

fl_status_t record_event(Instr* last) {
  StreamState* ss = state_of(last->stream);
  cudaError_t r = make_current(ss->device);  // a device function may have switched devices
  if (r != cudaSuccess) {
    last->error = cuda_message(r, "cudaSetDevice");
    return FL_ERR_CUDA;
  }
  cudaEvent_t ev = nullptr;
  r = event_get(ss->device, &ev);
  if (r != cudaSuccess) {
    last->error = cuda_message(r, "cudaEventCreateWithFlags");
    return FL_ERR_CUDA;
  }
  r = cudaEventRecord(ev, ss->cs);
  if (r != cudaSuccess) {
    (void)cudaGetLastError();  // not to be blamed on the next launch of this thread
    event_put(ss->device, ev);
    last->error = cuda_message(r, "cudaEventRecord");
    return FL_ERR_CUDA;
  }
  last->event = ev;
  return FL_OK;
}

void track(Instr* const* run, size_t n) {
  Poller* p = static_cast<Poller*>(run[0]->engine->gpu_backend.load(std::memory_order_acquire));
  bool wake;
  {
    std::lock_guard<std::mutex> lock(p->mu);
    p->incoming.insert(p->incoming.end(), run, run + n);
    p->has_incoming.store(true, std::memory_order_release);  // pairs with the poller's acquire loads
    wake = p->sleeping;
  }
  if (wake) p->cv.notify_one();
}

void engine_stop(core::Engine* e) {
  Poller* p = static_cast<Poller*>(e->gpu_backend.exchange(nullptr, std::memory_order_acq_rel));
  if (p == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(p->mu);
    p->stop = true;
    p->has_incoming.store(true, std::memory_order_release);  // ends an idle spin
  }
  p->cv.notify_one();
  p->thread.join();
  delete p;
}

}  // namespace flowlane::gpu

#else  // CPU-only build: no CUDA stream can exist, so only device_count() is ever asked.

namespace flowlane::gpu {
int device_count() { return 0; }
void* stream_state_create(core::Stream*) { return nullptr; }
void stream_state_destroy(core::Stream*) {}
fl_status_t launch(core::Instr* i) {
  i->error = "this libflowlane was built without CUDA";
  return FL_ERR_UNSUPPORTED;
}
fl_status_t record_event(core::Instr* last) {
  last->error = "this libflowlane was built without CUDA";
  return FL_ERR_UNSUPPORTED;
}
void track(core::Instr* const*, size_t) {}
void engine_stop(core::Engine*) {}
void event_release(core::Instr* i) { i->event = nullptr; }
}  // namespace flowlane::gpu

#endif
