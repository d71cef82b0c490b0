// Helpers of the fake-runtime tests (fake_engine_test.cpp, fake_hardening_test.cpp,
// fake_completion_test.cpp, fake_value_edges_test.cpp): an engine, kernels, a gate that
// holds a lane, the fake's controls (fake_cudart.cpp, its last block), waits that cannot
// hang the suite, and the randomized cross-stream model test's work.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../random_model.hpp"
#include "fake_kernel.hpp"
#include "flowlane/flowlane.h"

extern "C" {
void fake_cudart_mark_this_thread();
long fake_cudart_queries(int by);
long fake_cudart_ready_queries(int by);
void fake_cudart_blind(int by, int on);
void fake_cudart_set_sync(int on);
void fake_cudart_set_kernel_ns(long ns);
void fake_cudart_set_launch_ns(long ns);
long fake_cudart_value_waits();
long fake_cudart_value_writes();
void fake_cudart_fail_value_writes(int n);
void fake_cudart_set_write_delay_ns(long ns);
void fake_cudart_reset_sticky();
}

namespace fakegpu {

// fake_cudart_queries(by): the thread the test marked, the engine's poller, anyone else
// (lane runners).
constexpr int kMarked = 0, kPoller = 1, kOther = 2;

constexpr fl_device_t kCpu{FL_DEVICE_CPU, 0};
constexpr fl_device_t kGpu{FL_DEVICE_CUDA, 0};

struct Eng {
  fl_engine_t* e = nullptr;
  explicit Eng(uint64_t workers = 4) {
    fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
    d.num_workers = workers;
    EXPECT_EQ(fl_engine_create(&d, &e), FL_OK) << fl_last_error_message();
  }
  ~Eng() {
    if (e != nullptr) fl_engine_destroy(e);
  }
  fl_stream_t* s(uint32_t lane, fl_device_t dev, fl_stream_kind_t k) {
    fl_stream_t* out = nullptr;
    EXPECT_EQ(fl_stream_get(e, lane, dev, k, &out), FL_OK) << fl_last_error_message();
    return out;
  }
  fl_stream_t* gpu(uint32_t lane) { return s(lane, kGpu, FL_STREAM_COMPUTE); }
  fl_object_t* obj(void* u = nullptr, fl_release_fn r = nullptr) {
    fl_object_t* o = nullptr;
    EXPECT_EQ(fl_object_create(e, u, r, &o), FL_OK);
    return o;
  }
};

inline fl_status_t kernel(fl_stream_t* s, const fake::Kernel& k, std::vector<const void*> args,
                          std::vector<fl_operand_t> ops, const char* name, uint32_t block = 1,
                          fl_instr_id* out_id = nullptr) {
  std::vector<uint64_t> sizes;
  for (int a = 0; a < k.nargs; ++a) sizes.push_back(k.sizes[a]);
  fl_kernel_instr_t ki = FL_KERNEL_INSTR_INIT;
  ki.func = &k;
  ki.block = {block, 1, 1};
  ki.args = args.data();
  ki.arg_sizes = sizes.data();
  ki.num_args = args.size();
  ki.operands = ops.data();
  ki.num_operands = ops.size();
  ki.name = name;
  return fl_submit_kernel(s, &ki, out_id);
}

// *p += v
inline int run_add(const void* const* a) {
  int* p = *static_cast<int* const*>(a[0]);
  std::atomic_ref<int>(*p).fetch_add(*static_cast<const int*>(a[1]));
  return 0;
}
inline const fake::Kernel kAdd{2, {sizeof(int*), sizeof(int)}, &run_add};

// *dst = *src * 10 + c
inline int run_scale(const void* const* a) {
  int* dst = *static_cast<int* const*>(a[0]);
  const int* src = *static_cast<const int* const*>(a[1]);
  std::atomic_ref<int>(*dst).store(std::atomic_ref<const int>(*src).load() * 10 + *static_cast<const int*>(a[2]));
  return 0;
}
inline const fake::Kernel kScale{3, {sizeof(int*), sizeof(int*), sizeof(int)}, &run_scale};

// Spins until *flag != 0 (20 s at most, then *out = -1), then *out = v.
inline int run_wait_flag(const void* const* a) {
  int* flag = *static_cast<int* const*>(a[0]);
  int* out = *static_cast<int* const*>(a[1]);
  int v = *static_cast<const int*>(a[2]);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::atomic_ref<int>(*flag).load() == 0) {
    if (std::chrono::steady_clock::now() > until) {
      std::atomic_ref<int>(*out).store(-1);
      return 0;
    }
    std::this_thread::yield();
  }
  std::atomic_ref<int>(*out).store(v);
  return 0;
}
inline const fake::Kernel kWaitFlag{3, {sizeof(int*), sizeof(int*), sizeof(int)}, &run_wait_flag};

// A host instruction that holds its lane until `open` is set (20 s at most), so that what
// is submitted behind it is queued when the lane goes on.
struct Gate {
  std::atomic<int> open{0};
  void submit(Eng& g, uint32_t lane) {
    fl_host_instr_t h = FL_HOST_INSTR_INIT;
    h.fn = [](fl_instr_ctx_t*, void* u) -> fl_status_t {
      auto* gate = static_cast<Gate*>(u);
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (gate->open.load() == 0 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
      return FL_OK;
    };
    h.user_data = this;
    h.name = "gate";
    ASSERT_EQ(fl_submit_host(g.s(lane, kCpu, FL_STREAM_HOST), &h, nullptr), FL_OK);
  }
};

// Runs `f` (which returns a status) on another thread; a hang ends the process with a
// message rather than stalling the suite.
template <class F>
fl_status_t or_die(F f, const char* what, int seconds = 30) {
  auto fut = std::async(std::launch::async, f);
  if (fut.wait_for(std::chrono::seconds(seconds)) != std::future_status::ready) {
    std::fprintf(stderr, "FATAL: %s did not return within %d s (a hang)\n", what, seconds);
    std::fflush(stderr);
    std::_Exit(3);
  }
  return fut.get();
}

inline fl_status_t synchronize_or_die(Eng& g, const char* what) {
  return or_die([&g] { return fl_engine_synchronize(g.e); }, what);
}

// Polls `done()` until it holds or `seconds` pass; true when it held.
template <class F>
bool eventually(F done, int seconds = 20) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::yield();
  }
  return true;
}

// The engine's state dump (fl_engine_dump).
inline std::string dump(fl_engine_t* e) {
  uint64_t need = 0;
  fl_engine_dump(e, nullptr, 0, &need);
  std::string s(size_t(need) + 1, '\0');
  fl_engine_dump(e, s.data(), s.size(), &need);
  s.resize(std::strlen(s.c_str()));
  return s;
}

// The calling thread's name (the poller is "fl-gpu-poller").
inline std::string thread_name() {
  char name[32] = {0};
  pthread_getname_np(pthread_self(), name, sizeof name);
  return name;
}

// dst = mix(dst, src, c), dawdling `spin` us on the stream first (a missing wait then shows
// as a wrong value).
inline int run_mix(const void* const* a) {
  int* dst = *static_cast<int* const*>(a[0]);
  const int* src = *static_cast<const int* const*>(a[1]);
  int c = *static_cast<const int*>(a[2]);
  int spin = *static_cast<const int*>(a[3]);
  int s = std::atomic_ref<const int>(*src).load();
  int d = std::atomic_ref<int>(*dst).load();
  if (spin > 0) std::this_thread::sleep_for(std::chrono::microseconds(spin));
  std::atomic_ref<int>(*dst).store(randmodel::mix(d, s, c));
  return 0;
}
inline const fake::Kernel kMix{4, {sizeof(int*), sizeof(int*), sizeof(int), sizeof(int)}, &run_mix};

// The randomized cross-stream model test's work (randmodel::random_plan) run against the fake
// runtime: the objects must end with the sequential model's values. (The GPU twin:
// tests/gpu/test_gpu_model.cpp.)
inline void random_work(uint32_t seed, int ops, bool gates) {
  const randmodel::Plan plan = randmodel::random_plan(seed, ops, gates);
  std::vector<int> vals = plan.initial;
  std::vector<std::unique_ptr<Gate>> held;
  {
    Eng g;
    std::vector<fl_object_t*> objs;
    for (int k = 0; k < randmodel::kObjects; ++k) objs.push_back(g.obj());
    struct HostMix {
      int* dst;
      const int* src;
      int c;
    };
    std::vector<HostMix> host_args;
    host_args.reserve(plan.steps.size());
    for (const randmodel::Step& st : plan.steps) {
      if (st.hold) {
        held.push_back(std::make_unique<Gate>());
        held.back()->submit(g, st.lane);
      }
      std::vector<fl_operand_t> opnds = {{objs[st.dst], FL_READ_WRITE, 0}};
      if (st.src != st.dst) opnds.push_back({objs[st.src], FL_READ, 0});
      if (st.host) {
        host_args.push_back({&vals[st.dst], &vals[st.src], st.c});
        fl_host_instr_t h = FL_HOST_INSTR_INIT;
        h.fn = [](fl_instr_ctx_t*, void* u) -> fl_status_t {
          auto* m = static_cast<HostMix*>(u);
          int s = std::atomic_ref<const int>(*m->src).load();
          int d = std::atomic_ref<int>(*m->dst).load();
          std::atomic_ref<int>(*m->dst).store(randmodel::mix(d, s, m->c));
          return FL_OK;
        };
        h.user_data = &host_args.back();
        h.operands = opnds.data();
        h.num_operands = opnds.size();
        ASSERT_EQ(fl_submit_host(g.s(st.lane, kCpu, FL_STREAM_HOST), &h, nullptr), FL_OK);
        continue;
      }
      int* pd = &vals[st.dst];
      const int* ps = &vals[st.src];
      int c = st.c, spin = st.dawdle ? 50 : 0;
      const fl_stream_kind_t kind = st.h2d ? FL_STREAM_H2D : FL_STREAM_COMPUTE;
      ASSERT_EQ(kernel(g.s(st.lane, kGpu, kind), kMix, {&pd, &ps, &c, &spin}, opnds, "mix"), FL_OK)
          << fl_last_error_message();
      if (st.open >= 0) held[size_t(st.open)]->open.store(1);
    }
    for (auto& gt : held) gt->open.store(1);
    ASSERT_EQ(synchronize_or_die(g, "random cross-stream work"), FL_OK);
    for (fl_object_t* o : objs) fl_object_release(o);
  }
  EXPECT_EQ(vals, plan.model) << "seed " << seed;
}

// Sets an environment variable for the engines created while it lives (the CUDA backend
// reads its settings when an engine's first device stream is made).
struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};

// Every blinding and timing knob of the fake back to normal at the end of a test.
struct FakeReset {
  ~FakeReset() {
    for (int by = 0; by < 3; ++by) fake_cudart_blind(by, 0);
    fake_cudart_set_sync(0);
    fake_cudart_set_kernel_ns(0);
    fake_cudart_set_launch_ns(0);
    fake_cudart_fail_value_writes(0);
    fake_cudart_set_write_delay_ns(0);
  }
};

}  // namespace fakegpu
