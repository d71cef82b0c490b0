// Helpers of the GPU tests (test_gpu.cpp, test_gpu_model.cpp): the device check that a
// GPU-host run turns into a failure, an engine, device and pinned buffers, kernel and copy
// submission.
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/test_kernels.hpp"
#include "test_util.hpp"

namespace fltest {


inline int visible_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

// FLOWLANE_REQUIRE_GPU=1 (scripts/dev/gpu-check.sh) turns the skip into a failure: a run on
// the GPU host must not pass by seeing no device. With a device, the test kernels are
// loaded first (lazy module loading would make a first launch wait while another kernel
// spins, and blame the engine).
inline bool gpu_required() {
  const char* v = std::getenv("FLOWLANE_REQUIRE_GPU");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

#define REQUIRE_GPU()                                                                        \
  do {                                                                                       \
    if (visible_devices() == 0) {                                                            \
      if (gpu_required()) FAIL() << "no CUDA device visible, and FLOWLANE_REQUIRE_GPU=1";    \
      GTEST_SKIP() << "no CUDA device visible";                                              \
    }                                                                                        \
    ASSERT_EQ(fltest::preload_kernels(), 0) << "loading the test kernels failed";            \
  } while (0)

constexpr fl_device_t kCpu{FL_DEVICE_CPU, 0};
constexpr fl_device_t kGpu0{FL_DEVICE_CUDA, 0};

struct Engine {
  fl_engine_t* e = nullptr;
  explicit Engine(uint64_t workers = 4) {
    fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
    d.num_workers = workers;
    EXPECT_EQ(fl_engine_create(&d, &e), FL_OK) << fl_last_error_message();
  }
  ~Engine() {
    if (e) fl_engine_destroy(e);
  }
  fl_stream_t* stream(uint32_t lane, fl_device_t dev, fl_stream_kind_t kind) {
    fl_stream_t* s = nullptr;
    EXPECT_EQ(fl_stream_get(e, lane, dev, kind, &s), FL_OK) << fl_last_error_message();
    return s;
  }
  fl_object_t* object(void* user = nullptr, fl_release_fn rel = nullptr) {
    fl_object_t* o = nullptr;
    EXPECT_EQ(fl_object_create(e, user, rel, &o), FL_OK) << fl_last_error_message();
    return o;
  }
};

// Device buffer of n ints. Tests allocate before they start a spinning kernel: cudaMalloc
// and cudaHostAlloc may wait for the device.
struct DevBuf {
  int* p = nullptr;
  explicit DevBuf(size_t n) { EXPECT_EQ(cudaMalloc(&p, n * sizeof(int)), cudaSuccess); }
  ~DevBuf() { cudaFree(p); }
};

// Pinned host buffer of n ints, zeroed (fl_submit_memcpy refuses pageable host memory).
struct PinnedBuf {
  int* p = nullptr;
  explicit PinnedBuf(size_t n) {
    EXPECT_EQ(fl_host_alloc_pinned(n * sizeof(int), reinterpret_cast<void**>(&p)), FL_OK) << fl_last_error_message();
    if (p != nullptr) std::memset(p, 0, n * sizeof(int));
  }
  ~PinnedBuf() { fl_host_free_pinned(p); }
};

// A kernel instruction with up to 4 arguments, the bytes kept here until submit copies them.
struct Kernel {
  fl_kernel_instr_t k = FL_KERNEL_INSTR_INIT;
  std::vector<const void*> args;
  std::vector<uint64_t> sizes;
  std::vector<fl_operand_t> ops;
  Kernel(const void* func, const char* name, uint32_t grid = 1, uint32_t block = 1) {
    k.func = func;
    k.name = name;
    k.grid = {grid, 1, 1};
    k.block = {block, 1, 1};
  }
  template <class T>
  Kernel& arg(const T& v) {
    args.push_back(&v);
    sizes.push_back(sizeof(T));
    return *this;
  }
  Kernel& op(fl_object_t* o, uint32_t access) {
    ops.push_back(fl_operand_t{o, access, 0});
    return *this;
  }
  fl_status_t submit(fl_stream_t* s, fl_instr_id* out_id = nullptr) {
    k.args = args.data();
    k.arg_sizes = sizes.data();
    k.num_args = args.size();
    k.operands = ops.data();
    k.num_operands = ops.size();
    return fl_submit_kernel(s, &k, out_id);
  }
};

inline fl_status_t memcpy_instr(fl_stream_t* s, uint32_t kind, void* dst, const void* src, uint64_t bytes,
                         std::vector<fl_operand_t> ops, const char* name) {
  fl_memcpy_instr_t m = FL_MEMCPY_INSTR_INIT;
  m.kind = kind;
  m.dst = dst;
  m.src = src;
  m.bytes = bytes;
  m.operands = ops.data();
  m.num_operands = ops.size();
  m.name = name;
  return fl_submit_memcpy(s, &m, nullptr);
}

}  // namespace fltest
