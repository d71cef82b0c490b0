// A host-only stand-in for the parts of the CUDA runtime that libflowlane calls, for
// exercising the engine's GPU protocol (launch edges, the poller, cleanup after
// completion, drain) on a machine without a GPU. LD_PRELOADed ahead of libcudart.
// It proves nothing about real CUDA; it checks flowlane's side of the contract.
//
// What it models beyond plain ordering: the thread's last error (cudaEventQuery's
// cudaErrorNotReady included), sticky faults that fail every later call, FAKE_CUDA_DEVICES
// devices (default 1) with a current device per thread, pageable host memory (registered
// with fake_cudart_register_pageable) whose copies block the caller, and a limited number
// of hardware queues (FAKE_CUDA_HW_QUEUES): streams share queues round-robin, and a
// wait at the head of a queue blocks every stream on it; kernels marked as registered with
// another runtime instance fail to launch (cudaErrorInvalidDeviceFunction). Variants for the loader tests:
// FAKE_CUDART_VERSION (another runtime version), FAKE_CUDART_OMIT (a missing function).
//
// Streams are host threads running their queue in order; events are generation
// counters completed by their stream; cudaStreamWaitEvent queues a wait. "Kernels" are
// FakeKernel descriptors (see fake_kernel.hpp) passed as the function pointer: the
// argument bytes are copied at launch, as CUDA does, and `run` executes on the stream.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "fake_kernel.hpp"

// A hardware queue: one host thread running what its streams pushed, in order. Streams of a
// device share FAKE_CUDA_HW_QUEUES queues (default CUDA_DEVICE_MAX_CONNECTIONS, else 8),
// each new stream on the least used one: a wait at the head of a queue holds back every
// stream on it, as on a GPU.
struct HwQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> q;
  bool stop = false;
  std::thread th;
  int users = 0;  // under the registry's lock
  void run() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [this] { return stop || !q.empty(); });
        if (q.empty()) return;
        f = std::move(q.front());
        q.pop_front();
      }
      f();
    }
  }
  void push(std::function<void()> f) {
    {
      std::lock_guard<std::mutex> lock(mu);
      q.push_back(std::move(f));
    }
    cv.notify_one();
  }
};

void fake_after_push(struct CUstream_st* s);  // the synchronous mode (the block at the end of this file)

struct CUstream_st {
  int device = 0;
  HwQueue* hw = nullptr;
  std::atomic<long> pending{0};  // pushed and not yet run
  void push(std::function<void()> f) {
    pending.fetch_add(1);
    hw->push([this, f = std::move(f)] {
      f();
      pending.fetch_sub(1);
    });
    fake_after_push(this);
  }
};

struct CUevent_st {
  int device = 0;
  std::atomic<uint64_t> recorded{0};
  std::atomic<uint64_t> completed{0};
  // The owner's reference plus one per queued record or wait: as in CUDA, an event may be
  // destroyed while work that uses it is still queued; it goes once that work ran.
  std::atomic<int> refs{1};
  void unref() {
    if (refs.fetch_sub(1) == 1) delete this;
  }
};

namespace {
thread_local cudaError_t t_last = cudaSuccess;
thread_local int t_device = 0;
std::atomic<int> g_sticky{cudaSuccess};
std::atomic<long> g_events_created{0};
std::atomic<long> g_events_destroyed{0};
std::atomic<long> g_streams_created{0};
std::atomic<long> g_streams_destroyed{0};

int hw_queue_count() {
  static const int n = [] {
    const char* v = std::getenv("FAKE_CUDA_HW_QUEUES");
    if (v == nullptr || *v == 0) v = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    int q = v != nullptr && *v != 0 ? std::atoi(v) : 8;
    return q < 1 ? 1 : q;
  }();
  return n;
}

std::mutex g_hw_mu;
std::map<int, std::vector<HwQueue*>> g_hw;  // per device, hw_queue_count() slots (null: unused)

HwQueue* attach_hw_queue(int device) {
  std::lock_guard<std::mutex> lock(g_hw_mu);
  std::vector<HwQueue*>& qs = g_hw[device];
  qs.resize(size_t(hw_queue_count()), nullptr);
  size_t best = 0;
  for (size_t k = 0; k < qs.size(); ++k) {
    int users = qs[k] != nullptr ? qs[k]->users : 0;
    int best_users = qs[best] != nullptr ? qs[best]->users : 0;
    if (users < best_users) best = k;
  }
  if (qs[best] == nullptr) {
    qs[best] = new HwQueue();
    HwQueue* h = qs[best];
    h->th = std::thread([h] { h->run(); });
  }
  ++qs[best]->users;
  return qs[best];
}

void detach_hw_queue(int device, HwQueue* h) {
  {
    std::lock_guard<std::mutex> lock(g_hw_mu);
    if (--h->users > 0) return;
    for (HwQueue*& q : g_hw[device])
      if (q == h) q = nullptr;
  }
  {
    std::lock_guard<std::mutex> lock(h->mu);
    h->stop = true;
  }
  h->cv.notify_one();
  h->th.join();
  delete h;
}

int device_count() {
  static const int n = [] {
    const char* v = std::getenv("FAKE_CUDA_DEVICES");
    int d = v != nullptr ? std::atoi(v) : 1;
    return d < 0 ? 0 : d;
  }();
  return n;
}

// Host memory known to the fake: pinned (cudaHostAlloc) or registered as pageable by a
// test. Anything else stands for device memory (the tests use host buffers for it).
std::mutex g_mem_mu;
std::map<uintptr_t, std::pair<size_t, cudaMemoryType>> g_mem;  // start -> (bytes, type)

// Kernels a test declared registered with another runtime instance (a second libcudart, or
// a program's static one): this runtime does not know them.
std::mutex g_foreign_mu;
std::vector<const void*> g_foreign;
bool is_foreign(const void* f) {
  std::lock_guard<std::mutex> lock(g_foreign_mu);
  for (const void* x : g_foreign)
    if (x == f) return true;
  return false;
}

cudaMemoryType memory_type(const void* p) {
  std::lock_guard<std::mutex> lock(g_mem_mu);
  auto a = reinterpret_cast<uintptr_t>(p);
  auto it = g_mem.upper_bound(a);
  if (it == g_mem.begin()) return cudaMemoryTypeDevice;
  --it;
  return a < it->first + it->second.first ? it->second.second : cudaMemoryTypeDevice;
}
std::atomic<long> g_event_records{0};
std::atomic<long> g_stream_waits{0};
std::atomic<int> g_fail_records{0};  // the next N cudaEventRecord calls fail (a broken context)

cudaError_t set_err(cudaError_t e) {
  if (e != cudaSuccess) t_last = e;
  return e;
}
// The timing model and the query counters (defined in the block at the end of this file).
bool fake_note_query(bool ready);
void fake_launch_cost();
void fake_kernel_time();
}  // namespace

extern "C" {

long fake_cudart_events_created() { return g_events_created.load(); }
long fake_cudart_events_alive() { return g_events_created.load() - g_events_destroyed.load(); }
long fake_cudart_streams_alive() { return g_streams_created.load() - g_streams_destroyed.load(); }
void fake_cudart_set_last_error(cudaError_t e) { t_last = e; }
void fake_cudart_set_sticky(cudaError_t e) { g_sticky.store(e); }
void fake_cudart_register_pageable(const void* p, size_t n) {
  std::lock_guard<std::mutex> lock(g_mem_mu);
  g_mem[reinterpret_cast<uintptr_t>(p)] = {n, cudaMemoryTypeUnregistered};
}
void fake_cudart_unregister(const void* p) {
  std::lock_guard<std::mutex> lock(g_mem_mu);
  g_mem.erase(reinterpret_cast<uintptr_t>(p));
}
int fake_cudart_stream_device(cudaStream_t s) { return s->device; }
void fake_cudart_mark_foreign_kernel(const void* f) {
  std::lock_guard<std::mutex> lock(g_foreign_mu);
  g_foreign.push_back(f);
}
long fake_cudart_event_records() { return g_event_records.load(); }
long fake_cudart_stream_waits() { return g_stream_waits.load(); }
void fake_cudart_fail_event_records(int n) { g_fail_records.store(n); }
void fake_cudart_reset_sticky() { g_sticky.store(cudaSuccess); }

#ifndef FAKE_CUDART_VERSION
#define FAKE_CUDART_VERSION CUDART_VERSION
#endif
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = FAKE_CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int* n) {
  *n = device_count();
  if (*n == 0) return set_err(cudaErrorNoDevice);
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
  *d = t_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  if (d < 0 || d >= device_count()) return set_err(cudaErrorInvalidDevice);
  t_device = d;
  return cudaSuccess;
}
cudaError_t cudaGetLastError(void) {
  cudaError_t e = t_last;
  t_last = cudaSuccess;
  if (e == cudaSuccess && g_sticky.load() != cudaSuccess) return cudaError_t(g_sticky.load());
  return e;
}
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    default: return "cudaErrorFake";
  }
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    default: return "fake error";
  }
}
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  *least = 0;
  *greatest = -5;
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int, int) {
  if (g_sticky.load() != cudaSuccess) return set_err(cudaError_t(g_sticky.load()));
  auto* st = new CUstream_st();
  st->device = t_device;
  st->hw = attach_hw_queue(st->device);
  g_streams_created.fetch_add(1);
  *s = st;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  // Like CUDA, the stream's pending work still runs; the fake waits for it here.
  while (s->pending.load() != 0) std::this_thread::yield();
  detach_hw_queue(s->device, s->hw);
  delete s;
  g_streams_destroyed.fetch_add(1);
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) {
  if (g_sticky.load() != cudaSuccess) return set_err(cudaError_t(g_sticky.load()));
  *e = new CUevent_st();
  (*e)->device = t_device;
  g_events_created.fetch_add(1);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  e->unref();
  g_events_destroyed.fetch_add(1);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  for (int n = g_fail_records.load(); n > 0;)
    if (g_fail_records.compare_exchange_weak(n, n - 1)) return set_err(cudaErrorLaunchFailure);
  if (g_sticky.load() != cudaSuccess) return set_err(cudaError_t(g_sticky.load()));
  if (e->device != s->device) return set_err(cudaErrorInvalidResourceHandle);  // as CUDA: same device
  g_event_records.fetch_add(1);
  uint64_t g = e->recorded.fetch_add(1) + 1;
  e->refs.fetch_add(1);
  s->push([e, g] {
    e->completed.store(g);
    e->unref();
  });
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (g_sticky.load() != cudaSuccess) return set_err(cudaError_t(g_sticky.load()));
  // Like the runtime, a not-ready answer is also the thread's last error.
  // Who asks, and whether that kind of thread is blinded (the block at the end of this file).
  const bool ready = fake_note_query(e->completed.load() >= e->recorded.load());
  return ready ? cudaSuccess : set_err(cudaErrorNotReady);
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
  g_stream_waits.fetch_add(1);
  uint64_t g = e->recorded.load();
  e->refs.fetch_add(1);
  s->push([e, g] {
    while (e->completed.load() < g && g_sticky.load() == cudaSuccess) std::this_thread::yield();
    e->unref();
  });
  return cudaSuccess;
}
cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t, cudaStream_t s) {
  if (g_sticky.load() != cudaSuccess) return set_err(cudaError_t(g_sticky.load()));
  if (block.x * block.y * block.z > 1024 || grid.x == 0) return set_err(cudaErrorInvalidConfiguration);
  const auto* k = static_cast<const fake::Kernel*>(func);
  if (is_foreign(func)) return set_err(cudaErrorInvalidDeviceFunction);  // registered with another runtime
  auto bytes = std::make_shared<std::vector<std::vector<unsigned char>>>();
  for (int a = 0; a < k->nargs; ++a) {
    const auto* p = static_cast<const unsigned char*>(args[a]);
    bytes->emplace_back(p, p + k->sizes[a]);
  }
  fake_launch_cost();  // host time of a launch, when a test sets one (the block at the end)
  s->push([k, bytes] {
    fake_kernel_time();  // device time of a kernel, likewise
    if (g_sticky.load() != cudaSuccess) return;
    std::vector<const void*> ptrs;
    for (auto& b : *bytes) ptrs.push_back(b.data());
    if (k->run(ptrs.data()) != 0) g_sticky.store(cudaErrorIllegalAddress);
  });
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind, cudaStream_t s) {
  if (g_sticky.load() != cudaSuccess) return set_err(cudaError_t(g_sticky.load()));
  if (memory_type(src) == cudaMemoryTypeUnregistered || memory_type(dst) == cudaMemoryTypeUnregistered) {
    // Pageable host memory: the runtime returns only once the copy is done, i.e. after
    // everything queued before it on the stream.
    auto done = std::make_shared<std::atomic<bool>>(false);
    s->push([dst, src, n, done] {
      std::memcpy(dst, src, n);
      done->store(true);
    });
    while (!done->load()) std::this_thread::yield();
    return cudaSuccess;
  }
  s->push([dst, src, n] { std::memcpy(dst, src, n); });
  return cudaSuccess;
}
// Device memory is host memory the fake does not know (memory_type: device), as every
// "device pointer" of the fake is. For programs that stage buffers as they would on a GPU
// (flowlane_nccl_procs run on the fakes); libflowlane calls none of these three.
cudaError_t cudaMalloc(void** p, size_t n) {
  *p = std::malloc(n > 0 ? n : 1);
  return *p != nullptr ? cudaSuccess : set_err(cudaErrorMemoryAllocation);
}
cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind) {  // synchronous; no stream ordering
  if (g_sticky.load() != cudaSuccess) return set_err(cudaError_t(g_sticky.load()));
  std::memmove(dst, src, n);
  return cudaSuccess;
}
#ifndef FAKE_CUDART_OMIT_POINTER_ATTRIBUTES
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  std::memset(a, 0, sizeof *a);
  a->type = memory_type(p);
  a->device = a->type == cudaMemoryTypeUnregistered ? -2 : 0;
  a->hostPointer = a->type == cudaMemoryTypeDevice ? nullptr : const_cast<void*>(p);
  a->devicePointer = a->type == cudaMemoryTypeUnregistered ? nullptr : const_cast<void*>(p);
  return cudaSuccess;
}
#endif
cudaError_t cudaMemsetAsync(void* dst, int v, size_t n, cudaStream_t s) {
  s->push([dst, v, n] { std::memset(dst, v, n); });
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, size_t n, unsigned int) {
  *p = std::malloc(n);
  if (*p == nullptr) return set_err(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> lock(g_mem_mu);
  g_mem[reinterpret_cast<uintptr_t>(*p)] = {n, cudaMemoryTypeHost};
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
  fake_cudart_unregister(p);
  std::free(p);
  return cudaSuccess;
}

}  // extern "C"

// ---- completion by whoever is there; stream memory operations (gpu/complete.hpp,
// gpu/value_edges.hpp) ---------------------------------------------------------------------
// Who queries events: the thread a test marked as its own (fake_cudart_mark_this_thread),
// the engine's poller (the thread named fl-gpu-poller), or anyone else (lane workers); each
// query counted, and those that found the event complete (after which that thread
// completes the work). A timing model: a host-side cost per kernel launch (busy, on the
// launching thread) and a device-side time per kernel (busy, on its queue), so that tests
// can make launches slower or faster than kernels. The driver's stream memory operations,
// found through cudaGetDriverEntryPointByVersion (FAKE_CUDA_NO_MEMOPS=1 or
// fake_cudart_set_memops(0): not found): a wait polls its 64-bit slot on the stream's queue
// until it reaches the value (>=, cyclic), so a host store releases it too; a wait that
// never ends stops the process after FAKE_CUDA_VALUE_WAIT_S seconds (default 30), naming
// itself, instead of hanging the suite.
namespace {
enum { kByMarked = 0, kByPoller = 1, kByOther = 2 };
thread_local int t_who = -1;
std::atomic<long> g_queries[3];
std::atomic<long> g_ready_queries[3];
std::atomic<long> g_launch_ns{0};
std::atomic<long> g_kernel_ns{0};
std::atomic<int> g_memops{-1};  // -1: from FAKE_CUDA_NO_MEMOPS
std::atomic<long> g_value_waits{0};
std::atomic<long> g_value_writes{0};
std::atomic<int> g_fail_value_writes{0};
std::atomic<long> g_write_delay_ns{0};

int who() {
  if (t_who < 0) {
    char name[32] = {0};
    pthread_getname_np(pthread_self(), name, sizeof name);
    t_who = std::strcmp(name, "fl-gpu-poller") == 0 ? kByPoller : kByOther;
  }
  return t_who;
}

std::atomic<int> g_blind[3];  // queries by that thread kind answer cudaErrorNotReady
std::atomic<int> g_sync{0};

bool fake_note_query(bool ready) {
  const int w = who();
  if (g_blind[w].load() != 0) ready = false;
  g_queries[w].fetch_add(1);
  if (ready) g_ready_queries[w].fetch_add(1);
  return ready;
}

void busy_for(long ns) {
  if (ns <= 0) return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
  while (std::chrono::steady_clock::now() < until) {
  }
}
void fake_launch_cost() { busy_for(g_launch_ns.load()); }
void fake_kernel_time() { busy_for(g_kernel_ns.load()); }

bool memops_on() {
  int m = g_memops.load();
  if (m < 0) {
    const char* v = std::getenv("FAKE_CUDA_NO_MEMOPS");
    m = (v != nullptr && *v == '1') ? 0 : 1;
  }
  return m == 1;
}

long value_wait_limit_s() {
  const char* v = std::getenv("FAKE_CUDA_VALUE_WAIT_S");
  long s = v != nullptr ? std::atol(v) : 30;
  return s > 0 ? s : 30;
}

CUresult fake_wait_value64(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  if (g_sticky.load() != cudaSuccess) return CUDA_ERROR_ILLEGAL_ADDRESS;
  if (flags != CU_STREAM_WAIT_VALUE_GEQ) return CUDA_ERROR_INVALID_VALUE;  // the only mode flowlane uses
  g_value_waits.fetch_add(1);
  auto* slot = reinterpret_cast<uint64_t*>(addr);
  s->push([slot, value] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(value_wait_limit_s());
    while (int64_t(std::atomic_ref<uint64_t>(*slot).load() - value) < 0 && g_sticky.load() == cudaSuccess) {
      if (std::chrono::steady_clock::now() > until) {
        std::fprintf(stderr, "FATAL (fake CUDA): a stream waited %ld s for value %llu at %p (it holds %llu): "
                             "nobody released it\n",
                     value_wait_limit_s(), (unsigned long long)value, static_cast<void*>(slot),
                     (unsigned long long)std::atomic_ref<uint64_t>(*slot).load());
        std::fflush(stderr);
        std::_Exit(4);
      }
      std::this_thread::yield();
    }
  });
  return CUDA_SUCCESS;
}

CUresult fake_write_value64(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int) {
  for (int n = g_fail_value_writes.load(); n > 0;)
    if (g_fail_value_writes.compare_exchange_weak(n, n - 1)) return CUDA_ERROR_LAUNCH_FAILED;
  if (g_sticky.load() != cudaSuccess) return CUDA_ERROR_ILLEGAL_ADDRESS;
  g_value_writes.fetch_add(1);
  auto* slot = reinterpret_cast<uint64_t*>(addr);
  s->push([slot, value] {
    busy_for(g_write_delay_ns.load());  // a slow write, when a test asks for one
    std::atomic_ref<uint64_t>(*slot).store(value);
  });
  return CUDA_SUCCESS;
}
}  // namespace

// Synchronous mode: whatever is pushed on a stream has run when the call returns (as with
// CUDA_LAUNCH_BLOCKING=1): every event is complete once recorded, so who sees it first is
// decided by who asks first.
void fake_after_push(CUstream_st* s) {
  if (g_sync.load() == 0) return;
  while (s->pending.load() != 0) std::this_thread::yield();
}

extern "C" {

void fake_cudart_mark_this_thread() { t_who = kByMarked; }
// Queries by the marked thread (0), the poller (1) or other threads (2) answer "not ready"
// while blinded: the others must complete the work.
void fake_cudart_blind(int by, int on) { g_blind[by].store(on); }
void fake_cudart_set_sync(int on) { g_sync.store(on); }
// Queries of events by the marked thread, the poller and others (workers): all, or only
// those that found the event complete.
long fake_cudart_queries(int by) { return g_queries[by].load(); }
long fake_cudart_ready_queries(int by) { return g_ready_queries[by].load(); }
void fake_cudart_set_launch_ns(long ns) { g_launch_ns.store(ns); }
void fake_cudart_set_kernel_ns(long ns) { g_kernel_ns.store(ns); }
void fake_cudart_set_memops(int on) { g_memops.store(on); }
long fake_cudart_value_waits() { return g_value_waits.load(); }
long fake_cudart_value_writes() { return g_value_writes.load(); }
void fake_cudart_fail_value_writes(int n) { g_fail_value_writes.store(n); }
void fake_cudart_set_write_delay_ns(long ns) { g_write_delay_ns.store(ns); }

cudaError_t cudaPeekAtLastError(void) {
  if (t_last == cudaSuccess && g_sticky.load() != cudaSuccess) return cudaError_t(g_sticky.load());
  return t_last;
}

cudaError_t cudaHostGetDevicePointer(void** d, void* h, unsigned int) {
  *d = h;  // host memory is device memory here
  return cudaSuccess;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int, unsigned long long,
                                             cudaDriverEntryPointQueryResult* status) {
  *fn = nullptr;
  if (memops_on() && std::strcmp(symbol, "cuStreamWaitValue64") == 0) *fn = reinterpret_cast<void*>(&fake_wait_value64);
  if (memops_on() && std::strcmp(symbol, "cuStreamWriteValue64") == 0) *fn = reinterpret_cast<void*>(&fake_write_value64);
  if (status != nullptr) *status = *fn != nullptr ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}

}  // extern "C"
// ---- end of completion by whoever is there; stream memory operations ----------------------
