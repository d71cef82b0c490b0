// What the driver's stream memory operations cost on this GPU, beside the event calls they
// replace (gpu/README.md, "Value edges"): raw CUDA only, one run, printed as text for
// scripts/dev/gpu-session.sh. No public measurement of these was found; this is it.
//   1. host time per call: cudaEventRecord, cudaStreamWaitEvent, cuStreamWriteValue64,
//      cuStreamWaitValue64 (already satisfied), each over kCalls calls on an idle stream;
//   2. a chain of kSteps tiny kernels alternating between two streams, one launching
//      thread: each step ordered after the previous by event (record + wait) or by value
//      (write + wait) - the floors of flowlane's two edge kinds;
//   3. a host round trip: launch + cudaStreamSynchronize, against launch + a value written
//      after the kernel into mapped memory that the host spins on;
//   4. whether a host store into a mapped slot releases a wait already on the GPU (if not
//      within 1 s, a GPU write releases it, and the answer is "no").
//   gpu_memops_probe [steps]   (exit 1 on a CUDA error, 2 when the driver lacks the operations)
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

__global__ void tick(int* p) { *p += 1; }
__global__ void set_one(volatile int* p) {
  *p = 1;
  __threadfence_system();
}

using MemOp = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
MemOp g_wait = nullptr;
MemOp g_write = nullptr;

#define CK(call)                                                                               \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "memops_probe: %s: %s\n", #call, cudaGetErrorString(e_));           \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)
#define CKD(call)                                                                              \
  do {                                                                                         \
    CUresult r_ = (call);                                                                      \
    if (r_ != CUDA_SUCCESS) {                                                                  \
      std::fprintf(stderr, "memops_probe: %s: CUresult %d\n", #call, int(r_));                 \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <class F>
double per_call_us(int n, F f) {
  const double t0 = now_us();
  for (int k = 0; k < n; ++k) f(k);
  return (now_us() - t0) / n;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::max(100, std::atoi(argv[1])) : 2000;
  constexpr int kCalls = 10000, kRounds = 5;
  void* w = nullptr;
  void* x = nullptr;
  cudaDriverEntryPointQueryResult q1{}, q2{};
  if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", &w, 12000, cudaEnableDefault, &q1) != cudaSuccess ||
      cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &x, 12000, cudaEnableDefault, &q2) != cudaSuccess ||
      w == nullptr || x == nullptr) {
    std::printf("memops: the driver's stream memory operations are not available (%d, %d)\n", int(q1), int(q2));
    return 2;
  }
  g_wait = reinterpret_cast<MemOp>(w);
  g_write = reinterpret_cast<MemOp>(x);
  cudaStream_t s[2];
  for (auto& c : s) CK(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking));
  uint64_t* slots = nullptr;  // mapped pinned: [0], [1] for the chain, [2] round trips, [3] the host-store probe
  CK(cudaHostAlloc(reinterpret_cast<void**>(&slots), 8 * sizeof(uint64_t), cudaHostAllocMapped));
  for (int k = 0; k < 8; ++k) slots[k] = 0;
  uint64_t* dslots = nullptr;
  CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dslots), slots, 0));
  auto dslot = [&](int k) { return CUdeviceptr(reinterpret_cast<uintptr_t>(dslots + k)); };
  int* p = nullptr;
  CK(cudaMalloc(&p, sizeof(int)));
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  tick<<<1, 1, 0, s[0]>>>(p);  // warm up
  CK(cudaStreamSynchronize(s[0]));

  // 1. host time per call.
  std::printf("1. host time per call (us, median of %d rounds of %d calls):\n", kRounds, kCalls);
  std::vector<double> rec, wev, wr, wv;
  for (int r = 0; r < kRounds; ++r) {
    rec.push_back(per_call_us(kCalls, [&](int) { CK(cudaEventRecord(ev, s[0])); }));
    CK(cudaStreamSynchronize(s[0]));
    wev.push_back(per_call_us(kCalls, [&](int) { CK(cudaStreamWaitEvent(s[1], ev, 0)); }));
    CK(cudaStreamSynchronize(s[1]));
    wr.push_back(per_call_us(kCalls, [&](int k) { CKD(g_write(s[0], dslot(4), cuuint64_t(k + 1), 0)); }));
    CK(cudaStreamSynchronize(s[0]));
    wv.push_back(per_call_us(kCalls, [&](int) { CKD(g_wait(s[1], dslot(4), 1, CU_STREAM_WAIT_VALUE_GEQ)); }));
    CK(cudaStreamSynchronize(s[1]));
  }
  std::printf("   cudaEventRecord %.3f  cudaStreamWaitEvent %.3f  cuStreamWriteValue64 %.3f  cuStreamWaitValue64 %.3f\n",
              median(rec), median(wev), median(wr), median(wv));

  // 2. two-stream chains.
  std::vector<double> by_event, by_value;
  for (int r = 0; r < kRounds; ++r) {
    double t0 = now_us();
    for (int k = 0; k < steps; ++k) {
      cudaStream_t c = s[k & 1];
      if (k > 0) CK(cudaStreamWaitEvent(c, ev, 0));
      tick<<<1, 1, 0, c>>>(p);
      CK(cudaEventRecord(ev, c));
    }
    CK(cudaDeviceSynchronize());
    by_event.push_back((now_us() - t0) / steps);
    slots[0] = slots[1] = 0;
    t0 = now_us();
    for (int k = 0; k < steps; ++k) {
      const int me = k & 1;
      if (k > 0) CKD(g_wait(s[me], dslot(1 - me), cuuint64_t(k), CU_STREAM_WAIT_VALUE_GEQ));
      tick<<<1, 1, 0, s[me]>>>(p);
      CKD(g_write(s[me], dslot(me), cuuint64_t(k + 1), 0));
    }
    CK(cudaDeviceSynchronize());
    by_value.push_back((now_us() - t0) / steps);
  }
  std::printf("2. two-stream chain, one thread, us per step (median of %d rounds of %d steps): by event %.3f, "
              "by value %.3f\n",
              kRounds, steps, median(by_event), median(by_value));

  // 3. host round trips.
  std::vector<double> sync_rt, spin_rt;
  for (int r = 0; r < kRounds; ++r) {
    double t0 = now_us();
    for (int k = 0; k < 1000; ++k) {
      tick<<<1, 1, 0, s[0]>>>(p);
      CK(cudaStreamSynchronize(s[0]));
    }
    sync_rt.push_back((now_us() - t0) / 1000);
    t0 = now_us();
    for (int k = 0; k < 1000; ++k) {
      tick<<<1, 1, 0, s[0]>>>(p);
      const uint64_t want = uint64_t(r) * 1000 + uint64_t(k) + 1;
      CKD(g_write(s[0], dslot(2), cuuint64_t(want), 0));
      while (__atomic_load_n(&slots[2], __ATOMIC_ACQUIRE) < want) {  // mapped memory the GPU writes
      }
    }
    spin_rt.push_back((now_us() - t0) / 1000);
  }
  std::printf("3. host round trip, us (median of %d rounds of 1000): launch + cudaStreamSynchronize %.3f, "
              "launch + value write + host spin %.3f\n",
              kRounds, median(sync_rt), median(spin_rt));

  // 4. does a host store release a pending wait?
  int* flag = nullptr;
  CK(cudaHostAlloc(reinterpret_cast<void**>(&flag), sizeof(int), cudaHostAllocMapped));
  *flag = 0;
  int* dflag = nullptr;
  CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dflag), flag, 0));
  CKD(g_wait(s[0], dslot(3), 1, CU_STREAM_WAIT_VALUE_GEQ));
  set_one<<<1, 1, 0, s[0]>>>(dflag);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the wait is on the GPU by now
  __atomic_store_n(&slots[3], uint64_t(1), __ATOMIC_RELEASE);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) == 0 && std::chrono::steady_clock::now() < until) {
  }
  const bool released = __atomic_load_n(flag, __ATOMIC_ACQUIRE) != 0;
  if (!released) CKD(g_write(s[1], dslot(3), 2, 0));  // release it from the GPU
  CK(cudaDeviceSynchronize());
  std::printf("4. a host store into a mapped slot releases a pending cuStreamWaitValue64: %s\n",
              released ? "yes" : "no (released by a GPU write instead)");
  CK(cudaFreeHost(flag));
  CK(cudaFreeHost(slots));
  CK(cudaFree(p));
  CK(cudaEventDestroy(ev));
  for (auto& c : s) CK(cudaStreamDestroy(c));
  return 0;
}
