// Shared helpers for the test suites.
#pragma once

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "flowlane/flowlane.h"

#ifndef FL_UNDER_TSAN
#define FL_UNDER_TSAN 0
#endif
#ifndef FL_UNDER_ASAN
#define FL_UNDER_ASAN 0
#endif
#ifndef FL_UNDER_SANITIZER
#define FL_UNDER_SANITIZER 0
#endif

// Picks the normal size, or a smaller one under sanitizers.
constexpr long fl_scaled(long normal, long sanitized) { return FL_UNDER_SANITIZER ? sanitized : normal; }

// EXPECT that a call returned `status` and set a message containing `fragment`.
#define EXPECT_FL_ERR(call, status, fragment)                                              \
  do {                                                                                     \
    fl_status_t st_ = (call);                                                              \
    EXPECT_EQ(st_, status) << #call << " returned " << fl_status_name(st_) << ": "         \
                           << fl_last_error_message();                                     \
    EXPECT_NE(std::string(fl_last_error_message()).find(fragment), std::string::npos)      \
        << "message was: " << fl_last_error_message();                                     \
  } while (0)

#define ASSERT_FL_OK(call)                                                                 \
  do {                                                                                     \
    fl_status_t st_ = (call);                                                              \
    ASSERT_EQ(st_, FL_OK) << #call << " returned " << fl_status_name(st_) << ": "          \
                          << fl_last_error_message();                                      \
  } while (0)

#define EXPECT_FL_OK(call)                                                                 \
  do {                                                                                     \
    fl_status_t st_ = (call);                                                              \
    EXPECT_EQ(st_, FL_OK) << #call << " returned " << fl_status_name(st_) << ": "          \
                          << fl_last_error_message();                                      \
  } while (0)

// An engine that is destroyed at scope exit.
struct EngineFixture {
  fl_engine_t* engine = nullptr;
  explicit EngineFixture(uint64_t workers = 2, uint64_t lanes = 0, uint64_t window = 0) {
    fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
    d.num_workers = workers;
    d.max_lanes = lanes;
    d.inflight_limit = window;
    if (fl_engine_create(&d, &engine) != FL_OK) ADD_FAILURE() << fl_last_error_message();
  }
  ~EngineFixture() {
    if (engine) fl_engine_destroy(engine);
  }
  fl_stream_t* host(uint32_t lane) const {
    fl_stream_t* s = nullptr;
    fl_device_t cpu{FL_DEVICE_CPU, 0};
    if (fl_stream_get(engine, lane, cpu, FL_STREAM_HOST, &s) != FL_OK) ADD_FAILURE() << fl_last_error_message();
    return s;
  }
};

// Lambdas as host instructions, operands and gates, for tests through the public API.
namespace fltest {

using Clock = std::chrono::steady_clock;

// Owns a lambda submitted as a host instruction; freed by the instruction's cleanup.
// The lambda may take the instruction context or nothing.
template <class F>
struct Closure {
  F f;
  static fl_status_t call(fl_instr_ctx_t* ctx, void* ud) {
    auto* self = static_cast<Closure*>(ud);
    if constexpr (std::is_invocable_v<F&, fl_instr_ctx_t*>)
      return self->f(ctx);
    else
      return self->f();
  }
  static void destroy(void* ud) { delete static_cast<Closure*>(ud); }
};

// Submits f with the submission `flags`; returns fl_submit_host's status (the id in
// *out_id). A refused submission never calls cleanup: the closure is freed here then.
template <class F>
fl_status_t try_submit(fl_stream_t* s, F f, std::vector<fl_operand_t> ops, const char* name, uint64_t flags,
                       fl_instr_id* out_id) {
  auto* c = new Closure<F>{std::move(f)};
  fl_host_instr_t in = FL_HOST_INSTR_INIT;
  in.fn = &Closure<F>::call;
  in.cleanup = &Closure<F>::destroy;
  in.user_data = c;
  in.operands = ops.empty() ? nullptr : ops.data();
  in.num_operands = ops.size();
  in.name = name;
  in.flags = flags;
  fl_status_t st = fl_submit_host(s, &in, out_id);
  if (st != FL_OK) delete c;
  return st;
}

template <class F>
fl_instr_id submit(fl_stream_t* s, F f, std::vector<fl_operand_t> ops = {}, const char* name = nullptr) {
  fl_instr_id id = 0;
  fl_status_t st = try_submit(s, std::move(f), std::move(ops), name, 0, &id);
  EXPECT_EQ(st, FL_OK) << fl_last_error_message();
  return id;
}

// Submits n instructions to s, each busy for `each` (so that their completions are spread
// out: a thread waiting for a later one really sleeps meanwhile); returns their ids.
inline std::vector<fl_instr_id> submit_busy(fl_stream_t* s, int n, std::chrono::nanoseconds each) {
  std::vector<fl_instr_id> ids;
  for (int k = 0; k < n; ++k)
    ids.push_back(submit(s, [each] {
      const auto until = std::chrono::steady_clock::now() + each;
      while (std::chrono::steady_clock::now() < until) {
      }
      return FL_OK;
    }));
  return ids;
}

inline fl_object_t* make_obj(fl_engine_t* e) {
  fl_object_t* o = nullptr;
  EXPECT_EQ(fl_object_create(e, nullptr, nullptr, &o), FL_OK) << fl_last_error_message();
  return o;
}
inline fl_operand_t R(fl_object_t* o) { return fl_operand_t{o, FL_READ, 0}; }
inline fl_operand_t W(fl_object_t* o) { return fl_operand_t{o, FL_WRITE, 0}; }
inline fl_operand_t RW(fl_object_t* o) { return fl_operand_t{o, FL_READ_WRITE, 0}; }

// A flag a callback can wait on; gives up after 60 s so a broken engine cannot hang CI
// (the test then fails instead).
struct Gate {
  std::atomic<bool> open{false};
  bool wait() const {
    auto deadline = Clock::now() + std::chrono::seconds(60);
    while (!open.load()) {
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return true;
  }
};

// A path in the test's temporary folder unique to this process: test binaries of several
// builds (and the nocuda copy of a suite) may run at once on one machine.
inline std::string unique_temp_path(const std::string& name) {
  return ::testing::TempDir() + std::to_string(::getpid()) + "_" + name;
}

// The engine's state dump (fl_engine_dump).
inline std::string engine_dump(fl_engine_t* e) {
  uint64_t needed = 0;
  EXPECT_EQ(fl_engine_dump(e, nullptr, 0, &needed), FL_OK) << fl_last_error_message();
  std::string text(needed + 4096, '\0');  // the state may grow between the calls
  EXPECT_EQ(fl_engine_dump(e, text.data(), text.size(), &needed), FL_OK) << fl_last_error_message();
  text.resize(std::strlen(text.c_str()));
  return text;
}

// Waits until the state dump contains every fragment, which is how a test observes the
// engine's state instead of sleeping; gives up after 60 s (the test then fails on the
// returned dump).
inline std::string wait_for_dump(fl_engine_t* e, std::vector<std::string> fragments) {
  auto deadline = Clock::now() + std::chrono::seconds(60);
  for (;;) {
    std::string d = engine_dump(e);
    bool all = true;
    for (const std::string& f : fragments) all = all && d.find(f) != std::string::npos;
    if (all || Clock::now() > deadline) return d;
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
}

// One part of a collective group (fl_submit_collective).
inline fl_coll_part_t coll_part(uint32_t op, uint32_t dtype, const void* send, void* recv, uint64_t count,
                                uint32_t redop = FL_REDOP_SUM, uint32_t peer = 0) {
  fl_coll_part_t p{};
  p.op = op;
  p.dtype = dtype;
  p.redop = redop;
  p.peer = peer;
  p.sendbuf = send;
  p.recvbuf = recv;
  p.count = count;
  return p;
}

// fib(n) with one task group per call through the C API, as a program written against it
// would: the calling task spawns one half into a new group and computes the other itself.
// A failed call or destroy makes the whole run fail.
struct GroupFib {
  fl_engine_t* engine;
  uint64_t n;
  uint64_t result = 0;
  static fl_status_t run(void* p) {
    auto* self = static_cast<GroupFib*>(p);
    if (self->n < 2) {
      self->result = self->n;
      return FL_OK;
    }
    GroupFib a{self->engine, self->n - 1}, b{self->engine, self->n - 2};
    fl_task_group_t* g = nullptr;
    fl_status_t st = fl_task_group_create(self->engine, &g);
    if (st != FL_OK) return st;
    if ((st = fl_task_group_spawn(g, &GroupFib::run, &a, nullptr)) != FL_OK) {
      fl_task_group_destroy(g);
      return st;
    }
    fl_status_t mine = run(&b);
    st = fl_task_group_wait(g);
    if (fl_task_group_destroy(g) != FL_OK) return FL_ERR_INTERNAL;
    self->result = a.result + b.result;
    return mine != FL_OK ? mine : st;
  }
};
inline uint64_t fib_sequential(uint64_t n) { return n < 2 ? n : fib_sequential(n - 1) + fib_sequential(n - 2); }

}  // namespace fltest
