// A host-only stand-in for the parts of the CUDA runtime that libflowlane calls, for
// exercising the engine's GPU protocol (launch edges, the poller, cleanup after
// completion, drain) on a machine without a GPU. LD_PRELOADed ahead of libcudart.
// It proves nothing about real CUDA; it checks flowlane's side of the contract.
//
// Streams are host threads running their queue in order; events are generation
// counters completed by their stream; cudaStreamWaitEvent queues a wait. "Kernels" are
// FakeKernel descriptors (see fake_kernel.hpp) passed as the function pointer: the
// argument bytes are copied at launch, as CUDA does, and `run` executes on the stream.
#include <cuda_runtime_api.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "fake_kernel.hpp"

struct CUstream_st {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> q;
  bool stop = false;
  std::thread th;
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

struct CUevent_st {
  std::atomic<uint64_t> recorded{0};
  std::atomic<uint64_t> completed{0};
};

namespace {
thread_local cudaError_t t_last = cudaSuccess;
thread_local int t_device = 0;
std::atomic<int> g_sticky{cudaSuccess};
std::atomic<long> g_events_created{0};
std::atomic<long> g_event_records{0};
std::atomic<long> g_stream_waits{0};
std::atomic<int> g_fail_records{0};  // the next N cudaEventRecord calls fail (a broken context)

cudaError_t set_err(cudaError_t e) {
  if (e != cudaSuccess) t_last = e;
  return e;
}
}  // namespace

extern "C" {

long fake_cudart_events_created() { return g_events_created.load(); }
long fake_cudart_event_records() { return g_event_records.load(); }
long fake_cudart_stream_waits() { return g_stream_waits.load(); }
void fake_cudart_fail_event_records(int n) { g_fail_records.store(n); }
void fake_cudart_reset_sticky() { g_sticky.store(cudaSuccess); }

cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
  *d = t_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  if (d != 0) return set_err(cudaErrorInvalidDevice);
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
  auto* st = new CUstream_st();
  st->th = std::thread([st] { st->run(); });
  *s = st;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->stop = true;
  }
  s->cv.notify_one();
  s->th.join();
  delete s;
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) {
  *e = new CUevent_st();
  g_events_created.fetch_add(1);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  for (int n = g_fail_records.load(); n > 0;)
    if (g_fail_records.compare_exchange_weak(n, n - 1)) return set_err(cudaErrorLaunchFailure);
  g_event_records.fetch_add(1);
  uint64_t g = e->recorded.fetch_add(1) + 1;
  s->push([e, g] { e->completed.store(g); });
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (g_sticky.load() != cudaSuccess) return cudaError_t(g_sticky.load());
  return e->completed.load() >= e->recorded.load() ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
  g_stream_waits.fetch_add(1);
  uint64_t g = e->recorded.load();
  s->push([e, g] {
    while (e->completed.load() < g && g_sticky.load() == cudaSuccess) std::this_thread::yield();
  });
  return cudaSuccess;
}
cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t, cudaStream_t s) {
  if (block.x * block.y * block.z > 1024 || grid.x == 0) return set_err(cudaErrorInvalidConfiguration);
  const auto* k = static_cast<const fake::Kernel*>(func);
  auto bytes = std::make_shared<std::vector<std::vector<unsigned char>>>();
  for (int a = 0; a < k->nargs; ++a) {
    const auto* p = static_cast<const unsigned char*>(args[a]);
    bytes->emplace_back(p, p + k->sizes[a]);
  }
  s->push([k, bytes] {
    if (g_sticky.load() != cudaSuccess) return;
    std::vector<const void*> ptrs;
    for (auto& b : *bytes) ptrs.push_back(b.data());
    if (k->run(ptrs.data()) != 0) g_sticky.store(cudaErrorIllegalAddress);
  });
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind, cudaStream_t s) {
  s->push([dst, src, n] { std::memcpy(dst, src, n); });
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* dst, int v, size_t n, cudaStream_t s) {
  s->push([dst, v, n] { std::memset(dst, v, n); });
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, size_t n, unsigned int) {
  *p = std::malloc(n);
  return *p ? cudaSuccess : set_err(cudaErrorMemoryAllocation);
}
cudaError_t cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}

}  // extern "C"
