// flowlane.hpp — the C++ API of flowlane: header-only, C++17, on top of flowlane.h.
//
// RAII handles, lambdas with captures as instructions and tasks, errors as exceptions.
// Everything here is a thin layer over the C API; the C header's comments are the manual
// for what each call does.
//
//   #include <flowlane/flowlane.hpp>
//   flowlane::engine e;                               // workers = logical cores
//   auto x = e.make_object<int>(0);                   // an object holding an int
//   e.host(1).submit([&] { x.value() = 42; }, {flowlane::write(x)}, "produce");
//   e.host(0).submit([&] { std::printf("%d\n", x.value()); }, {flowlane::read(x)}, "consume");
//   x.wait(FL_READ);                                  // throws flowlane::error on failure
//
// Rules the types follow:
//  - engine, object<T>, task_group and the other owners are move-only; destroying them
//    calls the C destructor (an engine drains its work first; an object's value lives
//    until the last instruction using it has completed).
//  - A callable given to submit(), spawn() or parallel_for() may return void or
//    fl_status_t, and may take an instr_context (submit) as its argument. An exception it
//    throws fails the instruction or task with its what() as the message (for
//    parallel_for, the first one is rethrown to the caller).
//  - A failed call throws flowlane::error, which carries the status and the message.
#ifndef FLOWLANE_FLOWLANE_HPP
#define FLOWLANE_FLOWLANE_HPP

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "flowlane.h"

namespace flowlane {

// ---- errors -------------------------------------------------------------------------------

// A failed flowlane call: its status and the message fl_last_error_message() gave.
class error : public std::runtime_error {
 public:
  error(fl_status_t status, const std::string& message)
      : std::runtime_error(std::string(fl_status_name(status)) + ": " + message), status_(status) {}
  fl_status_t status() const noexcept { return status_; }

 private:
  fl_status_t status_;
};

// Throws flowlane::error unless st is FL_OK.
inline void check(fl_status_t st) {
  if (st != FL_OK) throw error(st, fl_last_error_message());
}

// A wait that may time out: true when it completed, false on FL_ERR_TIMEOUT; throws on
// any other failure.
inline bool check_timed(fl_status_t st) {
  if (st == FL_ERR_TIMEOUT) return false;
  check(st);
  return true;
}

inline uint64_t to_ns(std::chrono::nanoseconds d) { return d.count() < 0 ? 0 : uint64_t(d.count()); }

namespace detail {

// Runs a user callable and turns its result into a status: void → FL_OK, a status as is,
// an exception → FL_ERR_INSTRUCTION_FAILED with its text in *message.
template <class F, class... Args>
fl_status_t invoke(F& f, std::string* message, Args&&... args) noexcept {
  try {
    if constexpr (std::is_void_v<std::invoke_result_t<F&, Args...>>) {
      f(std::forward<Args>(args)...);
      return FL_OK;
    } else {
      return static_cast<fl_status_t>(f(std::forward<Args>(args)...));
    }
  } catch (const std::exception& e) {
    if (message) *message = e.what();
  } catch (...) {
    if (message) *message = "unknown C++ exception";
  }
  return FL_ERR_INSTRUCTION_FAILED;
}

// A callable owned by the C API through user_data, freed by its cleanup.
template <class F>
struct Boxed {
  F f;
  static void destroy(void* p) noexcept { delete static_cast<Boxed*>(p); }
};

}  // namespace detail

// ---- objects and operands ----------------------------------------------------------------

class engine;

// What an instruction does with an object.
struct operand {
  fl_object_t* object;
  uint32_t access;
  operator fl_operand_t() const { return fl_operand_t{object, access, 0}; }
};

// A dependence object holding a T (object<void>: a phony, for ordering only). The value is
// the instructions' to read and write (list the object in their operands); the program
// may touch it after wait(). Move-only; the handle is released on destruction, and the
// value is destroyed once the last instruction using it has completed.
template <class T = void>
class object {
 public:
  object() = default;
  object(object&& o) noexcept : h_(std::exchange(o.h_, nullptr)), value_(std::exchange(o.value_, nullptr)) {}
  object& operator=(object&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, nullptr);
      value_ = std::exchange(o.value_, nullptr);
    }
    return *this;
  }
  ~object() { reset(); }

  fl_object_t* get() const noexcept { return h_; }
  explicit operator bool() const noexcept { return h_ != nullptr; }

  // The value (object<void> has none).
  template <class U = T, class = std::enable_if_t<!std::is_void_v<U>>>
  U& value() const noexcept {
    return *value_;
  }

  // fl_object_wait: FL_READ waits for the writes submitted before, FL_WRITE for every use.
  void wait(uint32_t access = FL_READ_WRITE) const { check(fl_object_wait(h_, access)); }
  // With a timeout: false when it timed out.
  bool wait_for(std::chrono::nanoseconds timeout, uint32_t access = FL_READ_WRITE) const {
    return check_timed(fl_object_wait_for(h_, access, to_ns(timeout)));
  }

  // Releases the handle now (the value lives until the instructions using it are done).
  void reset() noexcept {
    if (h_ != nullptr) fl_object_release(h_);
    h_ = nullptr;
    value_ = nullptr;
  }

 private:
  friend class engine;
  using Value = std::conditional_t<std::is_void_v<T>, char, T>;
  fl_object_t* h_ = nullptr;
  Value* value_ = nullptr;
};

template <class T>
operand read(const object<T>& o) {
  return {o.get(), FL_READ};
}
template <class T>
operand write(const object<T>& o) {
  return {o.get(), FL_WRITE};
}
template <class T>
operand read_write(const object<T>& o) {
  return {o.get(), FL_READ_WRITE};
}

// ---- instructions ------------------------------------------------------------------------

// What a running instruction's callable may ask (valid only inside it, on its thread).
class instr_context {
 public:
  explicit instr_context(fl_instr_ctx_t* ctx) : ctx_(ctx) {}
  fl_instr_id id() const { return fl_instr_get_id(ctx_); }
  uint32_t lane() const { return fl_instr_get_lane(ctx_); }
  // The message of this instruction's failure (if the callable then fails).
  void set_error(const std::string& message) const { fl_instr_set_error(ctx_, message.c_str()); }
  fl_instr_ctx_t* get() const { return ctx_; }

 private:
  fl_instr_ctx_t* ctx_;
};

// A stream of an engine (interned by the engine: nothing to release).
class stream {
 public:
  stream() = default;
  explicit stream(fl_stream_t* s) : s_(s) {}
  fl_stream_t* get() const noexcept { return s_; }

  // Submits f as a host instruction with these operands; returns its id. f runs once on a
  // worker; it may take an instr_context and return void or fl_status_t; an exception it
  // throws fails the instruction with its what().
  template <class F>
  fl_instr_id submit(F&& f, std::initializer_list<operand> ops = {}, const char* name = nullptr,
                     uint64_t flags = 0) const {
    std::vector<fl_operand_t> c(ops.begin(), ops.end());
    return submit_ops(std::forward<F>(f), c.data(), c.size(), name, flags);
  }
  template <class F>
  fl_instr_id submit(F&& f, const std::vector<operand>& ops, const char* name = nullptr, uint64_t flags = 0) const {
    std::vector<fl_operand_t> c(ops.begin(), ops.end());
    return submit_ops(std::forward<F>(f), c.data(), c.size(), name, flags);
  }

  void synchronize() const { check(fl_stream_synchronize(s_)); }
  bool synchronize_for(std::chrono::nanoseconds timeout) const {
    return check_timed(fl_stream_synchronize_for(s_, to_ns(timeout)));
  }
  fl_instr_state_t query(fl_instr_id id) const {
    uint32_t st = 0;
    check(fl_instr_query(s_, id, &st));
    return fl_instr_state_t(st);
  }
  // Waits for instruction id and throws its failure, if any; false on a timeout.
  bool wait(fl_instr_id id, std::chrono::nanoseconds timeout = std::chrono::nanoseconds::max()) const {
    return check_timed(fl_instr_wait_for(s_, id, timeout == std::chrono::nanoseconds::max() ? FL_WAIT_FOREVER
                                                                                           : to_ns(timeout)));
  }
  void cancel(fl_instr_id id) const { check(fl_instr_cancel(s_, id)); }
  void cancel() const { check(fl_stream_cancel(s_)); }

 private:
  template <class F>
  fl_instr_id submit_ops(F&& f, const fl_operand_t* ops, size_t n, const char* name, uint64_t flags) const {
    using Fn = std::decay_t<F>;
    struct Call {
      Fn fn;
      static fl_status_t run(fl_instr_ctx_t* ctx, void* p) {
        auto* self = static_cast<Call*>(p);
        std::string message;
        fl_status_t st;
        if constexpr (std::is_invocable_v<Fn&, instr_context>)
          st = detail::invoke(self->fn, &message, instr_context(ctx));
        else
          st = detail::invoke(self->fn, &message);
        if (!message.empty()) fl_instr_set_error(ctx, message.c_str());
        return st;
      }
      static void destroy(void* p) noexcept { delete static_cast<Call*>(p); }
    };
    auto owned = std::make_unique<Call>(Call{std::forward<F>(f)});
    fl_host_instr_t in = FL_HOST_INSTR_INIT;
    in.fn = &Call::run;
    in.user_data = owned.get();
    in.cleanup = &Call::destroy;
    in.operands = n ? ops : nullptr;
    in.num_operands = n;
    in.name = name;
    in.flags = flags;
    fl_instr_id id = 0;
    check(fl_submit_host(s_, &in, &id));  // on failure the closure is still ours
    owned.release();                      // the instruction's cleanup frees it
    return id;
  }

  fl_stream_t* s_ = nullptr;
};

// ---- task groups -------------------------------------------------------------------------

// fl_task_group_*: spawn callables, wait for all of them. Move-only; destroying it waits
// for its tasks (their failures are dropped: call wait()).
class task_group {
 public:
  task_group() = default;
  explicit task_group(fl_engine_t* e) { check(fl_task_group_create(e, &g_)); }
  task_group(task_group&& o) noexcept : g_(std::exchange(o.g_, nullptr)), first_(std::move(o.first_)) {}
  task_group& operator=(task_group&& o) noexcept {
    if (this != &o) {
      reset();
      g_ = std::exchange(o.g_, nullptr);
      first_ = std::move(o.first_);
    }
    return *this;
  }
  ~task_group() { reset(); }
  fl_task_group_t* get() const noexcept { return g_; }

  // Runs f once on a worker (f returns void or fl_status_t). An exception f throws fails
  // the group: wait() rethrows the first one.
  template <class F>
  void spawn(F&& f) {
    using Fn = std::decay_t<F>;
    if (!first_) first_ = std::make_shared<First>();
    struct Call {
      Fn fn;
      std::shared_ptr<First> first;
      static fl_status_t run(void* p) {
        auto* self = static_cast<Call*>(p);
        try {
          if constexpr (std::is_void_v<std::invoke_result_t<Fn&>>) {
            self->fn();
            return FL_OK;
          } else {
            return static_cast<fl_status_t>(self->fn());
          }
        } catch (...) {
          self->first->keep(std::current_exception());
          return FL_ERR_INSTRUCTION_FAILED;
        }
      }
      static void destroy(void* p) noexcept { delete static_cast<Call*>(p); }
    };
    auto owned = std::make_unique<Call>(Call{std::forward<F>(f), first_});
    check(fl_task_group_spawn(g_, &Call::run, owned.get(), &Call::destroy));
    owned.release();
  }

  // Waits for every task; rethrows the first exception a task threw, or throws
  // flowlane::error for a failure status.
  void wait() {
    fl_status_t st = fl_task_group_wait(g_);
    if (first_) {
      if (std::exception_ptr e = first_->take()) std::rethrow_exception(e);
    }
    check(st);
  }

  void reset() noexcept {
    if (g_ != nullptr) fl_task_group_destroy(g_);
    g_ = nullptr;
  }

 private:
  struct First {
    std::mutex mu;
    std::exception_ptr e;
    void keep(std::exception_ptr x) {
      std::lock_guard<std::mutex> lock(mu);
      if (!e) e = std::move(x);
    }
    std::exception_ptr take() {
      std::lock_guard<std::mutex> lock(mu);
      return std::exchange(e, nullptr);
    }
  };
  fl_task_group_t* g_ = nullptr;
  std::shared_ptr<First> first_;
};

// ---- the engine --------------------------------------------------------------------------

struct engine_options {
  uint64_t workers = 0;         // 0: one per logical core of the affinity mask
  uint64_t lanes = 0;           // 0: 8
  uint64_t inflight_limit = 0;  // 0: the default window
  uint64_t watchdog_ms = 0;     // 0: off
};

// An engine (fl_engine_t). Move-only; the destructor drains its work and frees it.
class engine {
 public:
  explicit engine(const engine_options& o = {}) {
    fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
    d.num_workers = o.workers;
    d.max_lanes = o.lanes;
    d.inflight_limit = o.inflight_limit;
    d.watchdog_ms = o.watchdog_ms;
    check(fl_engine_create(&d, &e_));
  }
  engine(engine&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  engine& operator=(engine&& o) noexcept {
    if (this != &o) {
      reset();
      e_ = std::exchange(o.e_, nullptr);
    }
    return *this;
  }
  ~engine() { reset(); }
  fl_engine_t* get() const noexcept { return e_; }

  uint32_t lane_count() const { return fl_engine_lane_count(e_); }
  uint32_t worker_count() const { return fl_engine_worker_count(e_); }

  // The host stream of `lane`.
  stream host(uint32_t lane = 0) const { return stream_of(lane, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST); }
  stream stream_of(uint32_t lane, fl_device_t device, fl_stream_kind_t kind) const {
    fl_stream_t* s = nullptr;
    check(fl_stream_get(e_, lane, device, kind, &s));
    return stream(s);
  }

  // An object holding `value` (destroyed once no instruction uses it any more).
  template <class T, class... Args>
  object<T> make_object(Args&&... args) const {
    static_assert(!std::is_void_v<T>, "use phony() for an object without a value");
    auto value = std::make_unique<T>(std::forward<Args>(args)...);
    object<T> o;
    check(fl_object_create(e_, value.get(), [](void* p) { delete static_cast<T*>(p); }, &o.h_));
    o.value_ = value.release();
    return o;
  }
  // An object without a value: ordering only (fork/join through phony objects).
  object<void> phony() const {
    object<void> o;
    check(fl_object_create(e_, nullptr, nullptr, &o.h_));
    return o;
  }

  task_group make_task_group() const { return task_group(e_); }

  // fl_parallel_for over [begin, end): body(lo, hi) on disjoint chunks (grain 0: chosen by
  // the engine). The first exception a body throws is rethrown here.
  template <class F>
  void parallel_for(uint64_t begin, uint64_t end, F&& body, uint64_t grain = 0) const {
    struct Ctx {
      F* body;
      std::mutex mu;
      std::exception_ptr first;
    } ctx{&body, {}, nullptr};
    fl_status_t st = fl_parallel_for(
        e_, begin, end, grain,
        [](uint64_t lo, uint64_t hi, void* p) -> fl_status_t {
          auto* c = static_cast<Ctx*>(p);
          try {
            if constexpr (std::is_void_v<std::invoke_result_t<F&, uint64_t, uint64_t>>) {
              (*c->body)(lo, hi);
              return FL_OK;
            } else {
              return static_cast<fl_status_t>((*c->body)(lo, hi));
            }
          } catch (...) {
            std::lock_guard<std::mutex> lock(c->mu);
            if (!c->first) c->first = std::current_exception();
            return FL_ERR_INSTRUCTION_FAILED;
          }
        },
        &ctx);
    if (ctx.first) std::rethrow_exception(ctx.first);
    check(st);
  }

  void synchronize() const { check(fl_engine_synchronize(e_)); }
  bool synchronize_for(std::chrono::nanoseconds timeout) const {
    return check_timed(fl_engine_synchronize_for(e_, to_ns(timeout)));
  }
  void cancel() const { check(fl_engine_cancel(e_)); }
  // fl_engine_drain: false on a timeout.
  bool drain(std::chrono::nanoseconds timeout = std::chrono::nanoseconds::max()) const {
    return check_timed(
        fl_engine_drain(e_, timeout == std::chrono::nanoseconds::max() ? FL_WAIT_FOREVER : to_ns(timeout)));
  }
  fl_engine_stats_t stats() const {
    fl_engine_stats_t s = FL_ENGINE_STATS_INIT;
    check(fl_engine_stats(e_, &s));
    return s;
  }
  std::string dump() const {
    uint64_t needed = 0;
    check(fl_engine_dump(e_, nullptr, 0, &needed));
    std::string text;
    do {  // the state may grow between the two calls
      text.assign(size_t(needed) + 1, '\0');
      check(fl_engine_dump(e_, text.data(), text.size(), &needed));
    } while (needed > text.size());
    text.resize(std::min(text.find('\0'), text.size()));
    return text;
  }

  // Destroys the engine now (drains first); the destructor then does nothing.
  void reset() noexcept {
    if (e_ != nullptr) fl_engine_destroy(e_);
    e_ = nullptr;
  }

 private:
  fl_engine_t* e_ = nullptr;
};

}  // namespace flowlane

#endif  // FLOWLANE_FLOWLANE_HPP
