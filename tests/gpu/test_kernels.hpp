// Small kernels for the GPU tests (tests/gpu/kernels.cu). Each accessor returns the
// kernel's host-side handle for fl_kernel_instr_t.func.
#pragma once

namespace fltest {

// fill(int* p, int value, int n): p[k] = value for k < n.
const void* fill_kernel();
// add(int* p, int value, int n): p[k] += value.
const void* add_kernel();
// copy(int* dst, const int* src, int n): dst[k] = src[k].
const void* copy_kernel();
// wait_flag_then_write(const volatile int* flag, int* out, int value, unsigned long long timeout_ns):
// one thread spins until *flag != 0 (or the timeout passes: then *out = -1), then *out = value.
const void* wait_flag_then_write_kernel();
// set_flag(volatile int* flag): *flag = 1 (system-scope fence).
const void* set_flag_kernel();
// sleep_then_set(volatile int* flag, unsigned long long ns): spins ns on %globaltimer, then *flag = 1.
const void* sleep_then_set_kernel();
// write_to(int* p): *p = 1 — given a bad pointer, an illegal address.
const void* write_to_kernel();
// mix(int* dst, const int* src, int c, unsigned long long spin_ns): spins spin_ns, then
// *dst = (*dst * 31 + *src + c) mod 1000003 (the randomized model tests' step).
const void* mix_kernel();

// echo_big(BigArg b): out[k] = b.v[k] for every k: one kernel argument of exactly 32764
// bytes, CUDA's parameter limit (sm_70+, CUDA 12.1+). The output pointer travels as two
// 32-bit halves: a pointer member would align the struct to 8 and pad it to 32768 bytes.
struct BigArg {
  unsigned out_lo, out_hi;
  int v[8189];
  void set_out(int* p) {
    const unsigned long long a = reinterpret_cast<unsigned long long>(p);
    out_lo = unsigned(a);
    out_hi = unsigned(a >> 32);
  }
};
static_assert(sizeof(BigArg) == 32764, "BigArg must be exactly the parameter limit");
const void* echo_big_kernel();

// Loads every kernel above now (cudaFuncGetAttributes), so that no launch of a test waits
// for a lazy module load while another kernel spins (CUDA_MODULE_LOADING=LAZY is the
// default since CUDA 12.2). Returns the number of kernels that failed to load.
int preload_kernels();

}  // namespace fltest
