// Kernels for the GPU tests: tiny and single-purpose.
#include "gpu/test_kernels.hpp"

namespace {

__device__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void fill(int* p, int value, int n) {
  int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k < n) p[k] = value;
}

__global__ void add(int* p, int value, int n) {
  int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k < n) p[k] += value;
}

__global__ void copy(int* dst, const int* src, int n) {
  int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k < n) dst[k] = src[k];
}

__global__ void wait_flag_then_write(const volatile int* flag, int* out, int value, unsigned long long timeout_ns) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  unsigned long long start = now_ns();
  while (*flag == 0) {
    if (now_ns() - start > timeout_ns) {
      *out = -1;
      return;
    }
  }
  __threadfence();
  *out = value;
}

__global__ void set_flag(volatile int* flag) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    *flag = 1;
    __threadfence_system();
  }
}

__global__ void sleep_then_set(volatile int* flag, unsigned long long ns) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  unsigned long long start = now_ns();
  while (now_ns() - start < ns) {
  }
  *flag = 1;
  __threadfence_system();
}

__global__ void write_to(int* p) { *p = 1; }

__global__ void mix(int* dst, const int* src, int c, unsigned long long spin_ns) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  int s = *static_cast<const volatile int*>(src);
  int d = *static_cast<volatile int*>(dst);
  unsigned long long start = now_ns();
  while (now_ns() - start < spin_ns) {
  }
  *static_cast<volatile int*>(dst) = int((static_cast<long long>(d) * 31 + s + c) % 1000003);
  __threadfence_system();
}

__global__ void echo_big(fltest::BigArg b) {
  int* out = reinterpret_cast<int*>((static_cast<unsigned long long>(b.out_hi) << 32) | b.out_lo);
  for (int k = threadIdx.x; k < 8189; k += blockDim.x) out[k] = b.v[k];
}

}  // namespace

namespace fltest {
const void* fill_kernel() { return reinterpret_cast<const void*>(&fill); }
const void* add_kernel() { return reinterpret_cast<const void*>(&add); }
const void* copy_kernel() { return reinterpret_cast<const void*>(&copy); }
const void* wait_flag_then_write_kernel() { return reinterpret_cast<const void*>(&wait_flag_then_write); }
const void* set_flag_kernel() { return reinterpret_cast<const void*>(&set_flag); }
const void* sleep_then_set_kernel() { return reinterpret_cast<const void*>(&sleep_then_set); }
const void* write_to_kernel() { return reinterpret_cast<const void*>(&write_to); }
const void* echo_big_kernel() { return reinterpret_cast<const void*>(&echo_big); }
const void* mix_kernel() { return reinterpret_cast<const void*>(&mix); }

int preload_kernels() {
  static const int failed = [] {
    int bad = 0;
    for (const void* f : {fill_kernel(), add_kernel(), copy_kernel(), wait_flag_then_write_kernel(), set_flag_kernel(),
                          sleep_then_set_kernel(), write_to_kernel(), echo_big_kernel(), mix_kernel()}) {
      cudaFuncAttributes a;
      if (cudaFuncGetAttributes(&a, f) != cudaSuccess) {
        (void)cudaGetLastError();
        ++bad;
      }
    }
    return bad;
  }();
  return failed;
}
}  // namespace fltest
