// A "kernel" for the fake CUDA runtime: passed as fl_kernel_instr_t.func.
#pragma once
#include <cstddef>

namespace fake {
struct Kernel {
  int nargs;
  size_t sizes[8];
  int (*run)(const void* const* args);  // non-zero: an asynchronous fault (illegal address)
};
}  // namespace fake
