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
//   x.wait(FL_READ);                                  // rethrows a failed lambda's exception
//   e.host().submit([] { work(); });                  // no operands, no lane: as on a thread pool
//
// Rules the types follow:
//  - engine, object<T>, task_group and the other owners are move-only; destroying them
//    calls the C destructor (an engine drains its work first; an object's value lives
//    until the last instruction using it has completed).
//  - A callable given to submit(), spawn(), parallel_for() or a graph may return void or
//    fl_status_t (any other result type does not compile), and may take an instr_context (submit) as its argument. An exception it
//    throws fails the instruction or task with its what() as the message; the waits that
//    observe the failure rethrow the exception itself (task_group::wait, taskgraph::run,
//    parallel_for, and for instructions check_wait).
//  - A failed call throws flowlane::error, which carries the status and the message.
//  - engine::host() is the default host stream: an instruction submitted to it without
//    operands runs on a lane the engine picks, side by side with others, ordered against
//    nothing (detail::spread); host(k) and every other stream keep their order.
//  - Every C call has its wrapper: lanes (lane), streams and their info, objects,
//    instructions (host, and on CUDA builds kernels, device functions, copies), task groups,
//    parallel_for, task graphs (taskgraph), waits, cancel and drain, the watchdog (a lambda),
//    the dump, traces, pinned host memory and communicators. The experimental C calls are
//    experimental here too (see flowlane.h).
#ifndef FLOWLANE_FLOWLANE_HPP
#define FLOWLANE_FLOWLANE_HPP

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <exception>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <array>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
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
  // What the status means, in words (fl_status_string).
  const char* description() const noexcept { return fl_status_string(status_); }

 private:
  fl_status_t status_;
};

// The library's version ("0.1.0") and its packed form (fl_version_hex).
inline const char* version() noexcept { return fl_version_string(); }
inline uint32_t version_hex() noexcept { return fl_version_hex(); }

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

// Runs a user callable for its status: void → FL_OK, an fl_status_t as is. Any other
// result type is refused at compile time (a `return true` would otherwise become status 1,
// a failure). Exceptions pass through.
template <class F, class... Args>
fl_status_t call_for_status(F& f, Args&&... args) {
  using R = std::invoke_result_t<F&, Args...>;
  static_assert(std::is_void_v<R> || std::is_same_v<std::remove_cv_t<R>, fl_status_t>,
                "a flowlane callable returns void or fl_status_t (FL_OK, or a failure status)");
  if constexpr (std::is_void_v<R>) {
    f(std::forward<Args>(args)...);
    return FL_OK;
  } else {
    return f(std::forward<Args>(args)...);
  }
}

// The first exception thrown by the callables of one wait (a task group, a loop, a graph
// run), kept for the waiter to rethrow; later ones are dropped.
class first_exception {
 public:
  void keep(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!first_) first_ = std::move(e);
  }
  std::exception_ptr take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(first_, nullptr);
  }
  // Runs f (returning void or a status) and turns an exception into a kept failure.
  template <class F, class... Args>
  fl_status_t run(F& f, Args&&... args) noexcept {
    try {
      return call_for_status(f, std::forward<Args>(args)...);
    } catch (...) {
      keep(std::current_exception());
      return FL_ERR_INSTRUCTION_FAILED;
    }
  }
  // Rethrows the kept exception if there is one, else throws for a failure status.
  void rethrow_or_check(fl_status_t st) {
    if (std::exception_ptr e = take()) std::rethrow_exception(e);
    check(st);
  }

 private:
  std::mutex mu_;
  std::exception_ptr first_;
};

// The exceptions thrown by instructions' callables (the last kKept of the process), for the
// waits that observe those failures: such a wait rethrows the exception itself, with its
// type, as task_group::wait() does for a task. The failure's message names the instruction
// "(#id, lane k, ...)", the one that failed last in a "skipped: ... by ..." chain, and holds
// the exception's what(): the id and that text find it (ids are per engine; the text keeps
// two engines apart). Read and written under one mutex, off the success path.
class instr_exceptions {
 public:
  static constexpr size_t kKept = 64;
  static instr_exceptions& get() {
    static instr_exceptions* kept = new instr_exceptions;  // never freed: callbacks may run at exit
    return *kept;
  }
  void keep(fl_instr_id id, std::exception_ptr e, std::string text) {
    std::lock_guard<std::mutex> lock(mu_);
    ring_[next_++ % kKept] = entry{id, std::move(e), std::move(text)};
  }
  // The exception behind a wait's failure message, or null.
  std::exception_ptr find(const std::string& message) const {
    const std::vector<fl_instr_id> ids = named_ids(message);
    std::lock_guard<std::mutex> lock(mu_);
    for (auto id = ids.rbegin(); id != ids.rend(); ++id)
      for (const entry& kept : ring_)
        if (kept.e && kept.id == *id && message.find(kept.text) != std::string::npos) return kept.e;
    return nullptr;
  }

 private:
  struct entry {
    fl_instr_id id = 0;
    std::exception_ptr e;
    std::string text;
  };
  // The ids a message names as "(#id,", in order.
  static std::vector<fl_instr_id> named_ids(const std::string& m) {
    std::vector<fl_instr_id> ids;
    for (size_t at = m.find("(#"); at != std::string::npos; at = m.find("(#", at + 2)) {
      size_t i = at + 2;
      fl_instr_id id = 0;
      for (; i < m.size() && m[i] >= '0' && m[i] <= '9'; ++i) id = id * 10 + fl_instr_id(m[i] - '0');
      if (i > at + 2 && i < m.size() && m[i] == ',') ids.push_back(id);
    }
    return ids;
  }
  mutable std::mutex mu_;
  std::array<entry, kKept> ring_;
  size_t next_ = 0;
};

// FLOWLANE_CHECK_ACCESS (see flowlane::set_check_access). Relaxed: a debugging switch that
// publishes nothing; an instruction records its operands if it was on at its submit.
inline std::atomic<bool>& check_access_flag() noexcept {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("FLOWLANE_CHECK_ACCESS");
    return v != nullptr && *v != '\0' && std::string_view(v) != "0";
  }()};
  return on;
}

// What an instruction declared, recorded at submit while FLOWLANE_CHECK_ACCESS is on.
struct declared_operands {
  std::vector<fl_operand_t> ops;
  std::string name;
};

// The instruction whose callable this thread runs (nested when one runs inline in
// another's submit), for the check of undeclared accesses.
struct running_instr {
  fl_instr_ctx_t* ctx;
  const declared_operands* declared;  // null: recorded with the check off
  running_instr* outer;
};
inline running_instr*& running() noexcept {
  static thread_local running_instr* current = nullptr;
  return current;
}

[[gnu::cold]] inline void undeclared_access(const void* object, const running_instr& r) {
  char where[160];
  std::snprintf(where, sizeof where, "object %p is accessed by instruction '%s' (#%llu, lane %u)", object,
                r.declared->name.c_str(), static_cast<unsigned long long>(fl_instr_get_id(r.ctx)),
                static_cast<unsigned>(fl_instr_get_lane(r.ctx)));
  throw error(FL_ERR_INVALID_ARGUMENT,
              std::string(where) + ", which does not list it in its operands: the engine does not order this "
                                   "access (add flowlane::read, write or read_write of it) [FLOWLANE_CHECK_ACCESS]");
}

// object<T>::value() inside an instruction's callable, with the check on.
inline void check_declared(const void* object) {
  const running_instr* r = running();
  if (r == nullptr || r->declared == nullptr) return;  // not in an instruction, or not recorded
  for (const fl_operand_t& op : r->declared->ops)
    if (op.object == object) return;
  undeclared_access(object, *r);
}

}  // namespace detail

// Turns the check of undeclared accesses on or off for the process: when on, the value()
// of an object read or written by an instruction's callable that does not list the object
// in its operands throws flowlane::error (FL_ERR_INVALID_ARGUMENT) naming the object and
// the instruction, which fails it. The default is the environment variable
// FLOWLANE_CHECK_ACCESS (1: on). Instructions submitted while it is off are not checked.
inline void set_check_access(bool on) noexcept { detail::check_access_flag().store(on, std::memory_order_relaxed); }
inline bool check_access() noexcept { return detail::check_access_flag().load(std::memory_order_relaxed); }

// Throws for a wait's failure status: the exception an instruction's callable threw, when
// the failure is that instruction's or a dependent skipped because of it (the same object
// every such wait rethrows), else flowlane::error.
inline void check_wait(fl_status_t st) {
  if (st == FL_OK) return;
  std::string message = fl_last_error_message();
  if (st == FL_ERR_INSTRUCTION_FAILED || st == FL_ERR_DEPENDENCY_FAILED)
    if (std::exception_ptr e = detail::instr_exceptions::get().find(message)) std::rethrow_exception(e);
  throw error(st, message);
}
// check_wait for a wait that may time out: false on FL_ERR_TIMEOUT.
inline bool check_wait_timed(fl_status_t st) {
  if (st == FL_ERR_TIMEOUT) return false;
  check_wait(st);
  return true;
}

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
  // What the C object carries as its user data (fl_object_user_data): the value's address.
  void* user_data() const {
    void* p = nullptr;
    check(fl_object_user_data(h_, &p));
    return p;
  }

  // The value (object<void> has none).
  // With FLOWLANE_CHECK_ACCESS on (set_check_access), called by an instruction's callable
  // that does not list this object in its operands, it throws flowlane::error instead.
  template <class U = T, class = std::enable_if_t<!std::is_void_v<U>>>
  U& value() const {
    if (detail::check_access_flag().load(std::memory_order_relaxed)) detail::check_declared(h_);
    return *value_;
  }

  // fl_object_wait: FL_READ waits for the writes submitted before, FL_WRITE for every use.
  // A poisoned value rethrows what the failed instruction's callable threw (check_wait).
  void wait(uint32_t access = FL_READ_WRITE) const { check_wait(fl_object_wait(h_, access)); }
  // With a timeout: false when it timed out.
  bool wait_for(std::chrono::nanoseconds timeout, uint32_t access = FL_READ_WRITE) const {
    return check_wait_timed(fl_object_wait_for(h_, access, to_ns(timeout)));
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
  // The engine running it (not owned), for follow-up work through the C API.
  fl_engine_t* engine() const { return fl_instr_get_engine(ctx_); }
  // Its lane's host stream, for follow-up work (defined after stream).
  inline class stream host() const;
  fl_instr_ctx_t* get() const { return ctx_; }

 private:
  fl_instr_ctx_t* ctx_;
};

// Where and what a stream is (fl_stream_info).
struct stream_info {
  uint32_t lane;
  fl_device_t device;
  fl_stream_kind_t kind;
};

// A kernel launch's shape (fl_kernel_instr_t; 0 in a component counts as 1) and its
// submit flags (FL_SUBMIT_NONBLOCKING).
struct launch {
  fl_dim3_t grid{1, 1, 1};
  fl_dim3_t block{1, 1, 1};
  uint64_t shared_mem_bytes = 0;
  uint64_t flags = 0;
};

namespace detail {

inline std::vector<fl_operand_t> c_operands(std::initializer_list<operand> ops) {
  return std::vector<fl_operand_t>(ops.begin(), ops.end());
}

// An instruction's callable threw: its what() becomes the instruction's error, and the
// exception is kept for the waits that observe the failure (check_wait).
[[gnu::cold]] inline fl_status_t fail_instr(fl_instr_ctx_t* ctx) noexcept {
  const std::exception_ptr e = std::current_exception();
  try {
    std::string text = "unknown C++ exception";
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      text = x.what();
    } catch (...) {
    }
    fl_instr_set_error(ctx, text.c_str());
    instr_exceptions::get().keep(fl_instr_get_id(ctx), e, std::move(text));
  } catch (...) {  // out of memory: the failure stands, without its text or exception
  }
  return FL_ERR_INSTRUCTION_FAILED;
}

// Runs an instruction's callable with its context (when it takes one) and the extra
// arguments; an exception fails the instruction (fail_instr). `declared`: its operands, for
// the check of undeclared accesses (null when it was off at submit).
template <class Fn, class... Args>
fl_status_t run_instr(Fn& fn, fl_instr_ctx_t* ctx, const declared_operands* declared, Args... args) noexcept {
  running_instr frame{ctx, declared, running()};
  running() = &frame;
  fl_status_t st;
  try {
    if constexpr (std::is_invocable_v<Fn&, instr_context, Args...>)
      st = call_for_status(fn, instr_context(ctx), args...);
    else
      st = call_for_status(fn, args...);
  } catch (...) {
    st = fail_instr(ctx);
  }
  running() = frame.outer;
  return st;
}

// Whether an argument of type A may be passed for a kernel parameter of type P: an integer
// to an integer type at least as wide (as a call converts it: a literal 5 for a size_t), or
// whatever braces convert without narrowing (a float to a double, a T* to a const T*). An
// int for a short, a size_t for an int or a double for a float must be cast.
template <class P, class A, class = void>
struct brace_converts : std::false_type {};
template <class P, class A>
struct brace_converts<P, A, std::void_t<decltype(P{std::declval<A>()})>> : std::true_type {};
template <class P, class A, class S = std::decay_t<A>>
constexpr bool widens_integer_v = std::is_integral_v<P> && !std::is_same_v<P, bool> && std::is_integral_v<S> &&
                                  sizeof(S) <= sizeof(P);
template <class P, class A>
constexpr bool kernel_arg_converts_v = widens_integer_v<P, A> || brace_converts<P, A>::value;

template <class P, class A>
P kernel_arg(A&& a) {
  static_assert(kernel_arg_converts_v<P, A>,
                "submit_kernel: an argument narrows to its parameter's type (cast it to the parameter's type)");
  if constexpr (widens_integer_v<P, A>)
    return static_cast<P>(a);
  else
    return P{std::forward<A>(a)};
}

// Where the default host stream (engine::host()) puts an instruction submitted without
// operands. As in the Python binding (bindings/python/flowlane/_lanes.py): on a lane of the
// spread range, the min(workers, lanes - 2) highest lanes, the first idle one from the top,
// else the least loaded by its count of such instructions not yet cleaned up; lanes the
// program names (host(k), stream_of(k, ...)) or holds (acquire_lane) are left out of it; an
// empty range (an engine with one or two lanes) means lane 0, in order; never the lane of the
// instruction whose callable submits. Such submissions thus run side by side, up to one per
// worker, ordered against nothing. (A callable that waits for such work may still wait behind
// other work of the lane it went to; for fork-join inside an instruction, use a task group.)
// The counts and flags are hints, read and written relaxed: nothing is published through
// them (a callable's data reaches it through the engine's own submit-to-run ordering).
class spread {
 public:
  explicit spread(fl_engine_t* e)
      : e_(e), n_(range_size(e)), low_(fl_engine_lane_count(e) - n_), lanes_(std::make_unique<slot[]>(n_)) {}

  // The lane for a submission without operands, counted (0, not counted: none is free).
  // Never the lane of the instruction whose callable submits: queued behind it, the
  // submission could not start before the callable returns.
  uint32_t pick() noexcept {
    const running_instr* caller = running();
    const uint32_t avoid =
        caller != nullptr && fl_instr_get_engine(caller->ctx) == e_ ? fl_instr_get_lane(caller->ctx) : 0;
    uint32_t best = 0, best_count = UINT32_MAX;
    for (uint32_t i = n_; i-- > 0;) {  // from the top
      const slot& s = lanes_[i];
      if (low_ + i == avoid || s.named.load(std::memory_order_relaxed) || s.held.load(std::memory_order_relaxed) != 0)
        continue;
      const uint32_t count = s.inflight.load(std::memory_order_relaxed);
      if (count < best_count) {
        best = low_ + i;
        best_count = count;
        if (count == 0) break;
      }
    }
    if (best != 0) lanes_[best - low_].inflight.fetch_add(1, std::memory_order_relaxed);
    return best;
  }
  // An instruction pick() counted was cleaned up (or refused).
  void finished(uint32_t lane) noexcept { lanes_[lane - low_].inflight.fetch_sub(1, std::memory_order_relaxed); }
  // The program named a lane (never spread to from then on), or holds (+1) or released (-1) one.
  void named(uint32_t lane) noexcept {
    if (in_range(lane)) lanes_[lane - low_].named.store(true, std::memory_order_relaxed);
  }
  void hold(uint32_t lane, int delta) noexcept {
    if (in_range(lane)) lanes_[lane - low_].held.fetch_add(delta, std::memory_order_relaxed);
  }
  // A range lane's host stream (interned by the engine; fetched once).
  fl_stream_t* stream(uint32_t lane) {
    std::atomic<fl_stream_t*>& cached = lanes_[lane - low_].host;
    fl_stream_t* s = cached.load(std::memory_order_acquire);  // pairs with the release store below
    if (s == nullptr) {
      check(fl_stream_get(e_, lane, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST, &s));
      cached.store(s, std::memory_order_release);  // the same pointer, whichever thread stores it
    }
    return s;
  }
  // The host streams of the range lanes that took work.
  template <class Fn>
  void for_each_used(Fn&& fn) const {
    for (uint32_t i = 0; i < n_; ++i)
      if (fl_stream_t* s = lanes_[i].host.load(std::memory_order_acquire)) fn(s);  // pairs as above
  }

  // The lanes of the default stream's last kRemembered submissions, so that its wait,
  // query and cancel of an id reach the lane the id went to.
  static constexpr size_t kRemembered = 4096;
  void remember(fl_instr_id id, uint32_t lane) {
    std::lock_guard<std::mutex> lock(ids_mu_);
    ids_.emplace(id, lane);
    order_.push_back(id);
    if (order_.size() > kRemembered) {
      ids_.erase(order_.front());
      order_.pop_front();
    }
  }
  // The lane id went to; throws FL_ERR_INVALID_ARGUMENT for one not (or no longer) remembered.
  uint32_t lane_of(fl_instr_id id) const {
    {
      std::lock_guard<std::mutex> lock(ids_mu_);
      auto it = ids_.find(id);
      if (it != ids_.end()) return it->second;
    }
    throw error(FL_ERR_INVALID_ARGUMENT, "instruction #" + std::to_string(id) + " is not one of the last " +
                                             std::to_string(kRemembered) +
                                             " submitted through the default host stream (engine::host()): wait "
                                             "for its objects, or use engine::synchronize()");
  }
  // The remembered ids that went to range lanes, with their lanes.
  std::vector<std::pair<fl_instr_id, uint32_t>> spread_ids() const {
    std::lock_guard<std::mutex> lock(ids_mu_);
    std::vector<std::pair<fl_instr_id, uint32_t>> out;
    for (const auto& kv : ids_)
      if (kv.second != 0) out.push_back(kv);
    return out;
  }

 private:
  struct slot {
    std::atomic<uint32_t> inflight{0};
    std::atomic<bool> named{false};
    std::atomic<int> held{0};
    std::atomic<fl_stream_t*> host{nullptr};
  };
  static uint32_t range_size(fl_engine_t* e) noexcept {
    const uint32_t lanes = fl_engine_lane_count(e), workers = fl_engine_worker_count(e);
    return lanes > 2 ? std::min(workers, lanes - 2) : 0;
  }
  bool in_range(uint32_t lane) const noexcept { return lane >= low_ && lane - low_ < n_; }

  fl_engine_t* e_;
  uint32_t n_, low_;
  std::unique_ptr<slot[]> lanes_;
  mutable std::mutex ids_mu_;
  std::unordered_map<fl_instr_id, uint32_t> ids_;
  std::deque<fl_instr_id> order_;
};

// A callable owned by an instruction from a successful submit to its cleanup, with what the
// instruction declared (FLOWLANE_CHECK_ACCESS) and, for a submission the default host stream
// spread, the lane count its cleanup drops.
template <class F>
struct owned_call {
  template <class G>
  explicit owned_call(G&& g) : fn(std::forward<G>(g)) {}
  F fn;
  std::unique_ptr<declared_operands> declared;
  std::shared_ptr<spread> spread_to;
  uint32_t lane = 0;
  static void destroy(void* p) noexcept {
    auto* call = static_cast<owned_call*>(p);
    if (call->spread_to) call->spread_to->finished(call->lane);
    delete call;
  }
};

// What an instruction with these operands and name records for the check of undeclared
// accesses: nothing while the check is off.
inline std::unique_ptr<declared_operands> record_operands(const fl_operand_t* ops, size_t n, const char* name) {
  if (!check_access_flag().load(std::memory_order_relaxed)) return nullptr;
  return std::make_unique<declared_operands>(
      declared_operands{std::vector<fl_operand_t>(ops, ops + n), name != nullptr ? name : "(unnamed)"});
}

// Submits through `submit_c` an instruction whose descriptor `fill(user_data, cleanup)`
// completes; on a refused submission the closure is freed here (the C API never calls
// the cleanup of an instruction it did not accept).
template <class Call, class Fill, class Submit>
fl_instr_id submit_owned(std::unique_ptr<Call> owned, Fill&& fill, Submit&& submit_c) {
  fill(static_cast<void*>(owned.get()), &Call::destroy);
  fl_instr_id id = 0;
  check(submit_c(&id));  // on failure the closure is still ours
  owned.release();       // the instruction's cleanup frees it
  return id;
}

}  // namespace detail

// A stream of an engine (interned by the engine: nothing to release).
class stream {
 public:
  stream() = default;
  explicit stream(fl_stream_t* s) : s_(s) {}
  // The default host stream of an engine (engine::host()): lane 0's, spreading (see submit).
  stream(fl_stream_t* lane0, std::shared_ptr<detail::spread> spread) : s_(lane0), spread_(std::move(spread)) {}
  // The C stream (on the default host stream: lane 0's).
  fl_stream_t* get() const noexcept { return s_; }

  // Submits f as a host instruction with these operands; returns its id. f runs once on a
  // worker; it may take an instr_context and return void or fl_status_t; an exception it
  // throws fails the instruction with its what(), and the waits that observe the failure
  // rethrow that exception (check_wait).
  // On the default host stream (engine::host()), an instruction without operands goes to a
  // lane the engine picks (detail::spread): such instructions run side by side, as on a
  // thread pool, ordered against nothing; one with operands goes to lane 0, in order. The
  // stream's wait, query and cancel of an id reach the lane it went to; its synchronize and
  // cancel() cover those lanes too.
  template <class F>
  fl_instr_id submit(F&& f, std::initializer_list<operand> ops = {}, const char* name = nullptr,
                     uint64_t flags = 0) const {
    std::vector<fl_operand_t> c = detail::c_operands(ops);
    return submit_ops(std::forward<F>(f), c.data(), c.size(), name, flags);
  }
  template <class F>
  fl_instr_id submit(F&& f, const std::vector<operand>& ops, const char* name = nullptr, uint64_t flags = 0) const {
    std::vector<fl_operand_t> c(ops.begin(), ops.end());
    return submit_ops(std::forward<F>(f), c.data(), c.size(), name, flags);
  }

  // ---- device work (EXPERIMENTAL, CUDA builds; see flowlane.h) ----

  // Launches the __global__ function `kernel` (its host-side handle) with `args`, each
  // converted to the parameter's own type, so that the bytes the kernel reads have its
  // parameters' sizes. Integers are widened (a literal 5 for a size_t parameter, as a call
  // would convert it), other arguments convert as in braces; nothing narrows: a size_t
  // for an int parameter, or a literal 7 for a short one, does not compile (cast it). The
  // bytes are copied at submit.
  template <class... Params, class... Args>
  fl_instr_id submit_kernel(void (*kernel)(Params...), const launch& shape, std::initializer_list<operand> ops,
                            Args&&... args) const {
    return submit_kernel_named(kernel, shape, ops, nullptr, std::forward<Args>(args)...);
  }
  template <class... Params, class... Args>
  fl_instr_id submit_kernel_named(void (*kernel)(Params...), const launch& shape, std::initializer_list<operand> ops,
                                  const char* name, Args&&... args) const {
    static_assert(sizeof...(Params) == sizeof...(Args), "submit_kernel: one argument per kernel parameter");
    std::tuple<std::decay_t<Params>...> values{detail::kernel_arg<std::decay_t<Params>>(std::forward<Args>(args))...};
    return launch_tuple(reinterpret_cast<const void*>(kernel), shape, ops, name, values,
                        std::index_sequence_for<Params...>{});
  }

  // A device function: f(void* cuda_stream) (or f(instr_context, void* cuda_stream)) runs
  // on the lane's worker and enqueues work on the CUDA stream (cuBLAS, several kernels); it
  // must not wait for that work. It returns void or fl_status_t; an exception fails the
  // instruction. The closure is destroyed once the work it enqueued has completed (or the
  // instruction was skipped), so it may own what that work uses.
  template <class F>
  fl_instr_id submit_device(F&& f, std::initializer_list<operand> ops = {}, const char* name = nullptr,
                            uint64_t flags = 0) const {
    using Call = detail::owned_call<std::decay_t<F>>;
    std::vector<fl_operand_t> c = detail::c_operands(ops);
    fl_device_instr_t in = FL_DEVICE_INSTR_INIT;
    in.fn = [](fl_instr_ctx_t* ctx, void* cuda_stream, void* p) -> fl_status_t {
      auto* call = static_cast<Call*>(p);
      return detail::run_instr(call->fn, ctx, call->declared.get(), cuda_stream);
    };
    in.operands = c.empty() ? nullptr : c.data();
    in.num_operands = c.size();
    in.name = name;
    in.flags = flags;
    auto call = std::make_unique<Call>(std::forward<F>(f));
    call->declared = detail::record_operands(c.data(), c.size(), name);
    return detail::submit_owned(
        std::move(call),
        [&](void* ud, fl_release_fn cleanup) {
          in.user_data = ud;
          in.cleanup = cleanup;
        },
        [&](fl_instr_id* id) { return fl_submit_device(s_, &in, id); });
  }

  // An asynchronous copy of `bytes` (FL_MEMCPY_H2D, _D2H, _D2D; host memory must be
  // pinned: see pinned_buffer); list the objects the buffers stand for as operands.
  fl_instr_id submit_memcpy(void* dst, const void* src, uint64_t bytes, fl_memcpy_kind_t kind,
                            std::initializer_list<operand> ops = {}, const char* name = nullptr,
                            uint64_t flags = 0) const {
    return memcpy_instr(uint32_t(kind), 0, dst, src, bytes, ops, name, flags);
  }
  // dst[0..bytes) = value on the device.
  fl_instr_id submit_memset(void* dst, uint8_t value, uint64_t bytes, std::initializer_list<operand> ops = {},
                            const char* name = nullptr, uint64_t flags = 0) const {
    return memcpy_instr(FL_MEMSET, value, dst, nullptr, bytes, ops, name, flags);
  }

  // ---- waits and queries ----

  // Waits for everything submitted to this stream before the call (the default host
  // stream: also to the lanes it spread to); throws a failure (check_wait).
  void synchronize() const {
    check_wait(fl_stream_synchronize(s_));
    if (spread_) spread_->for_each_used([](fl_stream_t* s) { check_wait(fl_stream_synchronize(s)); });
  }
  bool synchronize_for(std::chrono::nanoseconds timeout) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    bool done = check_wait_timed(fl_stream_synchronize_for(s_, to_ns(timeout)));
    if (spread_)
      spread_->for_each_used([&](fl_stream_t* s) {
        done = done && check_wait_timed(fl_stream_synchronize_for(s, to_ns(deadline - std::chrono::steady_clock::now())));
      });
    return done;
  }
  fl_instr_state_t query(fl_instr_id id) const {
    uint32_t st = 0;
    check(fl_instr_query(stream_of_id(id), id, &st));
    return fl_instr_state_t(st);
  }
  // Waits for instruction id and throws its failure, if any (check_wait); false on a timeout.
  bool wait(fl_instr_id id, std::chrono::nanoseconds timeout = std::chrono::nanoseconds::max()) const {
    return check_wait_timed(fl_instr_wait_for(stream_of_id(id), id,
                                              timeout == std::chrono::nanoseconds::max() ? FL_WAIT_FOREVER
                                                                                         : to_ns(timeout)));
  }
  void cancel(fl_instr_id id) const { check(fl_instr_cancel(stream_of_id(id), id)); }
  // fl_stream_cancel; on the default host stream, also fl_instr_cancel of the instructions
  // it spread (those already started or completed are left as they are).
  void cancel() const {
    check(fl_stream_cancel(s_));
    if (spread_)
      for (const auto& [id, lane] : spread_->spread_ids()) (void)fl_instr_cancel(spread_->stream(lane), id);
  }

  stream_info info() const {
    stream_info i{};
    check(fl_stream_info(s_, &i.lane, &i.device, &i.kind));
    return i;
  }
  // EXPERIMENTAL: a CUDA stream's priority, before its first instruction; returns the
  // value applied (clamped to the device's range).
  int32_t set_priority(int32_t priority) const {
    int32_t applied = 0;
    check(fl_stream_set_priority(s_, priority, &applied));
    return applied;
  }

 private:
  template <class F>
  fl_instr_id submit_ops(F&& f, const fl_operand_t* ops, size_t n, const char* name, uint64_t flags) const {
    using Call = detail::owned_call<std::decay_t<F>>;
    auto call = std::make_unique<Call>(std::forward<F>(f));
    call->declared = detail::record_operands(ops, n, name);
    fl_stream_t* target = s_;
    const uint32_t lane = spread_ && n == 0 ? spread_->pick() : 0;
    if (lane != 0) {
      try {
        target = spread_->stream(lane);
      } catch (...) {
        spread_->finished(lane);
        throw;
      }
      call->spread_to = spread_;  // its cleanup drops the lane's count
      call->lane = lane;
    }
    fl_host_instr_t in = FL_HOST_INSTR_INIT;
    in.fn = [](fl_instr_ctx_t* ctx, void* p) -> fl_status_t {
      auto* c = static_cast<Call*>(p);
      return detail::run_instr(c->fn, ctx, c->declared.get());
    };
    in.operands = n ? ops : nullptr;
    in.num_operands = n;
    in.name = name;
    in.flags = flags;
    fl_instr_id id = 0;
    try {
      id = detail::submit_owned(
          std::move(call),
          [&](void* ud, fl_release_fn cleanup) {
            in.user_data = ud;
            in.cleanup = cleanup;
          },
          [&](fl_instr_id* out) { return fl_submit_host(target, &in, out); });
    } catch (...) {
      if (lane != 0) spread_->finished(lane);  // refused: no cleanup will run
      throw;
    }
    if (spread_) {
      try {
        spread_->remember(id, lane);
      } catch (...) {  // out of memory: the id cannot be waited for through this stream
      }
    }
    return id;
  }

  // The stream id went to (the default host stream: the lane it spread the id to).
  fl_stream_t* stream_of_id(fl_instr_id id) const {
    if (!spread_) return s_;
    const uint32_t lane = spread_->lane_of(id);
    return lane != 0 ? spread_->stream(lane) : s_;
  }

  template <class Tuple, size_t... I>
  fl_instr_id launch_tuple(const void* func, const launch& shape, std::initializer_list<operand> ops, const char* name,
                           const Tuple& values, std::index_sequence<I...>) const {
    const std::array<const void*, sizeof...(I)> args{{static_cast<const void*>(&std::get<I>(values))...}};
    const std::array<uint64_t, sizeof...(I)> sizes{{uint64_t(sizeof(std::tuple_element_t<I, Tuple>))...}};
    std::vector<fl_operand_t> c = detail::c_operands(ops);
    fl_kernel_instr_t in = FL_KERNEL_INSTR_INIT;
    in.func = func;
    in.grid = shape.grid;
    in.block = shape.block;
    in.shared_mem_bytes = shape.shared_mem_bytes;
    in.flags = shape.flags;
    in.args = sizeof...(I) ? args.data() : nullptr;
    in.arg_sizes = sizeof...(I) ? sizes.data() : nullptr;
    in.num_args = sizeof...(I);
    in.operands = c.empty() ? nullptr : c.data();
    in.num_operands = c.size();
    in.name = name;
    fl_instr_id id = 0;
    check(fl_submit_kernel(s_, &in, &id));
    return id;
  }

  fl_instr_id memcpy_instr(uint32_t kind, uint32_t value, void* dst, const void* src, uint64_t bytes,
                           std::initializer_list<operand> ops, const char* name, uint64_t flags) const {
    std::vector<fl_operand_t> c = detail::c_operands(ops);
    fl_memcpy_instr_t in = FL_MEMCPY_INSTR_INIT;
    in.kind = kind;
    in.value = value;
    in.dst = dst;
    in.src = src;
    in.bytes = bytes;
    in.operands = c.empty() ? nullptr : c.data();
    in.num_operands = c.size();
    in.name = name;
    in.flags = flags;
    fl_instr_id id = 0;
    check(fl_submit_memcpy(s_, &in, &id));
    return id;
  }

  fl_stream_t* s_ = nullptr;
  std::shared_ptr<detail::spread> spread_;  // the default host stream's (else null)
};

inline stream instr_context::host() const {
  fl_stream_t* s = nullptr;
  check(fl_stream_get(engine(), lane(), fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST, &s));
  return stream(s);
}

// ---- lanes ---------------------------------------------------------------------------------

// A lane acquired from an engine (fl_lane_acquire), released when destroyed (work already
// submitted on it still runs). Move-only.
class lane {
 public:
  lane() = default;
  lane(lane&& o) noexcept : e_(std::exchange(o.e_, nullptr)), id_(o.id_), spread_(std::move(o.spread_)) {}
  lane& operator=(lane&& o) noexcept {
    if (this != &o) {
      reset();
      e_ = std::exchange(o.e_, nullptr);
      id_ = o.id_;
      spread_ = std::move(o.spread_);
    }
    return *this;
  }
  ~lane() { reset(); }

  uint32_t id() const noexcept { return id_; }
  explicit operator bool() const noexcept { return e_ != nullptr; }
  // The lane's host stream, and its other streams.
  stream host() const { return stream_of(fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST); }
  stream stream_of(fl_device_t device, fl_stream_kind_t kind) const {
    fl_stream_t* s = nullptr;
    check(fl_stream_get(e_, id_, device, kind, &s));
    return stream(s);
  }

  // Releases the lane now.
  void reset() noexcept {
    if (e_ != nullptr) fl_lane_release(e_, id_);
    if (e_ != nullptr && spread_) spread_->hold(id_, -1);
    e_ = nullptr;
    spread_.reset();
  }

 private:
  friend class engine;
  fl_engine_t* e_ = nullptr;
  uint32_t id_ = 0;
  std::shared_ptr<detail::spread> spread_;  // the engine's: left out of its spread while held
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
    if (!first_) first_ = std::make_shared<detail::first_exception>();
    struct Call {
      Fn fn;
      std::shared_ptr<detail::first_exception> first;
      static fl_status_t run(void* p) {
        auto* self = static_cast<Call*>(p);
        return self->first->run(self->fn);
      }
      static void destroy(void* p) noexcept { delete static_cast<Call*>(p); }
    };
    auto owned = std::make_unique<Call>(Call{std::forward<F>(f), first_});
    check(fl_task_group_spawn(g_, &Call::run, owned.get(), &Call::destroy));
    owned.release();
  }

  // Waits for every task; rethrows the first exception a task threw, or throws
  // flowlane::error for a failure status.
  void wait() { finish(fl_task_group_wait(g_)); }
  // With a timeout: false when tasks were still running at the timeout (they go on; a
  // failure among them is thrown by a later wait).
  bool wait_for(std::chrono::nanoseconds timeout) {
    fl_status_t st = fl_task_group_wait_for(g_, to_ns(timeout));
    if (st == FL_ERR_TIMEOUT) return false;
    finish(st);
    return true;
  }

  void reset() noexcept {
    if (g_ != nullptr) fl_task_group_destroy(g_);
    g_ = nullptr;
  }

 private:
  void finish(fl_status_t st) {
    if (first_)
      first_->rethrow_or_check(st);
    else
      check(st);
  }

  fl_task_group_t* g_ = nullptr;
  std::shared_ptr<detail::first_exception> first_;
};

// ---- task graphs ---------------------------------------------------------------------------

// fl_taskgraph_*: a graph of callables built once and run any number of times. Move-only;
// it owns its nodes' callables (destroyed with the graph).
class taskgraph {
 public:
  taskgraph() = default;
  explicit taskgraph(fl_engine_t* e) : calls_(std::make_unique<Calls>()) { check(fl_taskgraph_create(e, &g_)); }
  taskgraph(taskgraph&& o) noexcept : g_(std::exchange(o.g_, nullptr)), calls_(std::move(o.calls_)) {}
  taskgraph& operator=(taskgraph&& o) noexcept {
    if (this != &o) {
      drop();
      g_ = std::exchange(o.g_, nullptr);
      calls_ = std::move(o.calls_);
    }
    return *this;
  }
  ~taskgraph() { drop(); }
  fl_taskgraph_t* get() const noexcept { return g_; }

  // Adds a node running f (returning void or fl_status_t); returns its id (dense from 0).
  template <class F>
  uint64_t add(F&& f, const char* name = nullptr) {
    struct Call final : Node {
      explicit Call(F&& f, detail::first_exception* kept) : fn(std::forward<F>(f)), first(kept) {}
      std::decay_t<F> fn;
      detail::first_exception* first;
      static fl_status_t run(void* p) {
        auto* self = static_cast<Call*>(p);
        return self->first->run(self->fn);
      }
    };
    auto call = std::make_unique<Call>(std::forward<F>(f), calls_ ? &calls_->first : nullptr);
    // Room first: once the graph holds the node, keeping its callable must not throw.
    if (calls_ && calls_->nodes.size() == calls_->nodes.capacity())
      calls_->nodes.reserve(std::max<size_t>(8, 2 * calls_->nodes.size()));
    uint64_t node = 0;
    check(fl_taskgraph_add(g_, &Call::run, call.get(), name, &node));  // no graph: throws
    calls_->nodes.push_back(std::move(call));
    return node;
  }
  // `after` starts only once `before` has finished.
  void precede(uint64_t before, uint64_t after) { check(fl_taskgraph_precede(g_, before, after)); }

  // Runs every node once, in dependency order, on at most `threads` threads (-1: every
  // logical core, 0: the physical ones). Rethrows the first exception a node threw (the
  // nodes that depend on a failed one do not run), or throws for a failure status. A run
  // while the graph runs (from another thread or one of its nodes) throws
  // FL_ERR_INVALID_ARGUMENT, as fl_taskgraph_run answers, and leaves the running one's
  // exception to it.
  void run(int64_t threads = -1) {
    if (!calls_) {  // moved from or default-constructed
      check(fl_taskgraph_run(g_, threads));  // throws FL_ERR_INVALID_HANDLE
      return;
    }
    if (calls_->running.exchange(true))
      throw error(FL_ERR_INVALID_ARGUMENT, "taskgraph::run: the graph is already running");
    fl_status_t st = fl_taskgraph_run(g_, threads);
    std::exception_ptr e = calls_->first.take();
    calls_->running = false;
    if (e) std::rethrow_exception(e);
    check(st);
  }

  // Destroys the graph now. Returns false, and leaves the graph as it was, when the C API
  // refuses: the graph is running (reset from one of its nodes).
  bool reset() noexcept {
    if (g_ != nullptr && fl_taskgraph_destroy(g_) != FL_OK) return false;
    g_ = nullptr;
    calls_.reset();
    return true;
  }

 private:
  // The destructor's (and a move's) reset: a graph whose destroy is refused is running,
  // so it and its nodes' callables are left behind, never freed under the run.
  void drop() noexcept {
    if (!reset()) (void)calls_.release();
    g_ = nullptr;
  }
  struct Node {
    virtual ~Node() = default;
  };
  struct Calls {
    std::vector<std::unique_ptr<Node>> nodes;
    detail::first_exception first;  // of the one run in progress
    std::atomic<bool> running{false};
  };
  fl_taskgraph_t* g_ = nullptr;
  std::unique_ptr<Calls> calls_;  // stable: the graph holds pointers to its nodes
};

// ---- pinned host memory (EXPERIMENTAL, CUDA builds) ---------------------------------------

// `count` Ts of page-locked host memory (fl_host_alloc_pinned), for copies to and from a
// device; freed on destruction. Elements are value-initialized. Move-only.
template <class T>
class pinned_buffer {
  static_assert(std::is_trivially_copyable_v<T>, "pinned_buffer holds bytes a device copies: T must be trivially copyable");

 public:
  pinned_buffer() = default;
  explicit pinned_buffer(size_t count) : n_(count) {
    if (count > SIZE_MAX / sizeof(T))  // count * sizeof(T) would wrap to a smaller size
      throw error(FL_ERR_OUT_OF_RANGE, "pinned_buffer: " + std::to_string(count) + " elements of " +
                                           std::to_string(sizeof(T)) + " bytes do not fit in a size_t");
    void* p = nullptr;
    check(fl_host_alloc_pinned(uint64_t(count) * sizeof(T), &p));
    p_ = static_cast<T*>(p);
    std::fill(p_, p_ + n_, T{});
  }
  pinned_buffer(pinned_buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  pinned_buffer& operator=(pinned_buffer&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  ~pinned_buffer() { reset(); }

  T* data() const noexcept { return p_; }
  size_t size() const noexcept { return n_; }
  size_t bytes() const noexcept { return n_ * sizeof(T); }
  T& operator[](size_t i) const noexcept { return p_[i]; }
  T* begin() const noexcept { return p_; }
  T* end() const noexcept { return p_ + n_; }

  void reset() noexcept {
    if (p_ != nullptr) fl_host_free_pinned(p_);
    p_ = nullptr;
    n_ = 0;
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// EXPERIMENTAL (CUDA builds): CUDA devices visible; throws FL_ERR_UNSUPPORTED in a
// CPU-only build or where the CUDA runtime cannot be loaded.
inline int32_t cuda_device_count() {
  int32_t n = 0;
  check(fl_cuda_device_count(&n));
  return n;
}

// EXPERIMENTAL: CUDA's stream priority range of `device` as {least, greatest} (a lower
// number is a higher priority).
inline std::pair<int32_t, int32_t> cuda_priority_range(int32_t device) {
  std::pair<int32_t, int32_t> r{0, 0};
  check(fl_cuda_priority_range(device, &r.first, &r.second));
  return r;
}

// ---- communicators (EXPERIMENTAL) ----------------------------------------------------------

// A fresh unique id for `backend`, made by one rank and shared with the others.
inline fl_comm_unique_id_t comm_unique_id(fl_comm_backend_t backend) {
  fl_comm_unique_id_t id{};
  check(fl_comm_get_unique_id(backend, &id));
  return id;
}

namespace detail {
template <class T>
constexpr fl_dtype_t dtype_of() {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool> && !std::is_same_v<T, long double>,
                "collective elements are 8-, 32- or 64-bit integers, float or double (for FL_DTYPE_FLOAT16 "
                "or FL_DTYPE_BFLOAT16, fill the fl_coll_part_t fields directly)");
  if constexpr (std::is_floating_point_v<T>) {
    return sizeof(T) == 4 ? FL_DTYPE_FLOAT32 : FL_DTYPE_FLOAT64;
  } else {
    static_assert(sizeof(T) == 1 || sizeof(T) == 4 || sizeof(T) == 8, "no collective dtype of this size");
    if constexpr (sizeof(T) == 1) return std::is_signed_v<T> ? FL_DTYPE_INT8 : FL_DTYPE_UINT8;
    if constexpr (sizeof(T) == 4) return std::is_signed_v<T> ? FL_DTYPE_INT32 : FL_DTYPE_UINT32;
    return std::is_signed_v<T> ? FL_DTYPE_INT64 : FL_DTYPE_UINT64;
  }
}
template <class T>
fl_coll_part_t coll_part(fl_coll_op_t op, const T* send, T* recv, uint64_t count, fl_redop_t redop, uint32_t peer) {
  fl_coll_part_t p{};
  p.op = op;
  p.dtype = dtype_of<T>();
  p.redop = redop;
  p.peer = peer;
  p.sendbuf = send;
  p.recvbuf = recv;
  p.count = count;
  return p;
}
}  // namespace detail

// Parts of a collective (communicator::submit), the element type giving the dtype;
// `count` is the elements per rank.
template <class T>
fl_coll_part_t all_reduce(const T* send, T* recv, uint64_t count, fl_redop_t redop = FL_REDOP_SUM) {
  return detail::coll_part(FL_COLL_ALL_REDUCE, send, recv, count, redop, 0);
}
template <class T>
fl_coll_part_t all_gather(const T* send, T* recv, uint64_t count) {
  return detail::coll_part(FL_COLL_ALL_GATHER, send, recv, count, FL_REDOP_SUM, 0);
}
template <class T>
fl_coll_part_t reduce_scatter(const T* send, T* recv, uint64_t count, fl_redop_t redop = FL_REDOP_SUM) {
  return detail::coll_part(FL_COLL_REDUCE_SCATTER, send, recv, count, redop, 0);
}
template <class T>
fl_coll_part_t broadcast(const T* send, T* recv, uint64_t count, uint32_t root) {
  return detail::coll_part(FL_COLL_BROADCAST, send, recv, count, FL_REDOP_SUM, root);
}
template <class T>
fl_coll_part_t send_to(const T* buf, uint64_t count, uint32_t peer) {
  return detail::coll_part<T>(FL_COLL_SEND, buf, nullptr, count, FL_REDOP_SUM, peer);
}
template <class T>
fl_coll_part_t recv_from(T* buf, uint64_t count, uint32_t peer) {
  return detail::coll_part<T>(FL_COLL_RECV, nullptr, buf, count, FL_REDOP_SUM, peer);
}

// Where an engine joins a communicator (fl_comm_desc_t).
struct comm_options {
  uint64_t nranks = 1;
  uint64_t rank = 0;
  uint32_t lane = 0;                          // the lane whose COLLECTIVE stream issues them
  int32_t device = 0;                         // CUDA device (NCCL)
  fl_comm_backend_t backend = FL_COMM_NCCL;
  bool unordered = false;                     // FL_COMM_UNORDERED
};

// An engine's rank in a communicator (fl_comm_create); leaves it on destruction. Move-only.
class communicator {
 public:
  communicator() = default;
  communicator(fl_engine_t* e, const comm_options& o, const fl_comm_unique_id_t& id) : e_(e), o_(o) {
    fl_comm_desc_t d = FL_COMM_DESC_INIT;
    d.nranks = o.nranks;
    d.rank = o.rank;
    d.device = uint64_t(o.device);
    d.lane = o.lane;
    d.backend = uint64_t(o.backend);
    d.flags = o.unordered ? FL_COMM_UNORDERED : 0;
    check(fl_comm_create(e, &d, &id, &c_));
  }
  // A rank whose collectives move through `t` (fl_comm_create_transport, EXPERIMENTAL):
  // o.backend and o.device are not read; its collectives go through lane o.lane's host
  // COLLECTIVE stream.
  communicator(fl_engine_t* e, const comm_options& o, const fl_comm_transport_t& t) : e_(e), o_(o), transport_(true) {
    fl_comm_desc_t d = FL_COMM_DESC_INIT;
    d.nranks = o.nranks;
    d.rank = o.rank;
    d.lane = o.lane;
    d.flags = o.unordered ? FL_COMM_UNORDERED : 0;
    check(fl_comm_create_transport(e, &d, &t, &c_));
  }
  communicator(communicator&& o) noexcept
      : c_(std::exchange(o.c_, nullptr)), e_(o.e_), o_(o.o_), transport_(o.transport_) {}
  communicator& operator=(communicator&& o) noexcept {
    if (this != &o) {
      reset();
      c_ = std::exchange(o.c_, nullptr);
      e_ = o.e_;
      o_ = o.o_;
      transport_ = o.transport_;
    }
    return *this;
  }
  ~communicator() { reset(); }
  fl_comm_t* get() const noexcept { return c_; }

  // The COLLECTIVE stream its collectives go through.
  stream collective_stream() const {
    const fl_device_t dev = transport_ || o_.backend == FL_COMM_HOST_FAKE ? fl_device_t{FL_DEVICE_CPU, 0}
                                                            : fl_device_t{FL_DEVICE_CUDA, o_.device};
    fl_stream_t* s = nullptr;
    check(fl_stream_get(e_, o_.lane, dev, FL_STREAM_COLLECTIVE, &s));
    return stream(s);
  }
  // Submits one collective (its parts issued as one group). Every buffer must stay valid
  // until it completes: order that through the operands.
  fl_instr_id submit(std::initializer_list<fl_coll_part_t> parts, std::initializer_list<operand> ops = {},
                     const char* name = nullptr, uint64_t flags = 0) const {
    std::vector<fl_coll_part_t> p(parts.begin(), parts.end());
    std::vector<fl_operand_t> c = detail::c_operands(ops);
    fl_collective_instr_t in = FL_COLLECTIVE_INSTR_INIT;
    in.parts = p.empty() ? nullptr : p.data();
    in.num_parts = p.size();
    in.operands = c.empty() ? nullptr : c.data();
    in.num_operands = c.size();
    in.name = name;
    in.flags = flags;
    fl_instr_id id = 0;
    check(fl_submit_collective(collective_stream().get(), c_, &in, &id));
    return id;
  }
  // Writes the communicator dump of this rank (fl_comm_dump): to `path`, or with nullptr to
  // its file in FLOWLANE_COMM_DUMP_DIR.
  void dump(const char* path = nullptr) const { check(fl_comm_dump(c_, path)); }
  // The collective timeout in ms (0: none), replacing FLOWLANE_COMM_TIMEOUT_MS's
  // (fl_comm_set_timeout): a collective waiting longer fails with FL_ERR_TIMEOUT.
  void set_timeout(uint64_t ms) const { check(fl_comm_set_timeout(c_, ms)); }

  void reset() noexcept {
    if (c_ != nullptr) fl_comm_destroy(c_);
    c_ = nullptr;
  }

 private:
  fl_comm_t* c_ = nullptr;
  fl_engine_t* e_ = nullptr;
  comm_options o_;
  bool transport_ = false;
};

// This process's rank from the launcher's environment (fl_comm_get_env, EXPERIMENTAL).
inline fl_comm_env_t comm_env() {
  fl_comm_env_t env = FL_COMM_ENV_INIT;
  check(fl_comm_get_env(&env));
  return env;
}

// Shares rank 0's unique id through files in `dir` (fl_comm_rendezvous_file, EXPERIMENTAL):
// rank 0 passes its id in `id`, the others receive it there.
inline void comm_rendezvous_file(const char* dir, const char* key, uint64_t rank, uint64_t nranks,
                                 uint64_t timeout_ms, fl_comm_unique_id_t& id) {
  check(fl_comm_rendezvous_file(dir, key, rank, nranks, timeout_ms, &id));
}

// Sets this thread's last error message and returns `st` (fl_set_last_error_message): for
// libraries on flowlane that report as it does.
inline fl_status_t set_last_error_message(fl_status_t st, const char* message) noexcept {
  return fl_set_last_error_message(st, message);
}

// ---- the engine --------------------------------------------------------------------------

// ---- capture and replay (EXPERIMENTAL; see flowlane.h, "Capture and replay") ----------------

// A captured program (fl_program_t): the instructions a capture recorded, with their
// dependencies precomputed, launched as one instruction. Move-only; the destructor destroys
// it (launches in flight still run; the captured callables are destroyed once the program
// is freed).
class program {
 public:
  program() = default;
  explicit program(fl_program_t* p) noexcept : p_(p) {}
  program(program&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  program& operator=(program&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  ~program() { reset(); }
  fl_program_t* get() const noexcept { return p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }

  // Launches the program as one instruction of `s` (a host stream; a CUDA stream of its
  // device for a program with device work only); returns the launch's id, which s.wait()
  // waits for (rethrowing the exception of a callable that failed inside it).
  fl_instr_id launch(const stream& s, uint64_t flags = 0) const {
    fl_instr_id id = 0;
    check(fl_program_launch(p_, s.get(), flags, &id));
    return id;
  }
  fl_program_info_t info() const {
    fl_program_info_t in = FL_PROGRAM_INFO_INIT;
    check(fl_program_info(p_, &in));
    return in;
  }
  // fl_program_destroy now (the destructor then does nothing).
  void reset() noexcept {
    if (p_ != nullptr) (void)fl_program_destroy(p_);
    p_ = nullptr;
  }

 private:
  fl_program_t* p_ = nullptr;
};

// A capture of the calling thread's submissions to an engine (fl_capture_begin): while it
// is open they are recorded, not run, and end() makes them a program. A capture destroyed
// without end() is discarded (fl_capture_end with no program: the captured callables are
// destroyed). Use it on the thread that made it.
class capture {
 public:
  capture(fl_engine_t* e, const char* name) : e_(e) {
    fl_capture_desc_t d = FL_CAPTURE_DESC_INIT;
    d.name = name;
    check(fl_capture_begin(e_, &d));
  }
  capture(capture&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  capture& operator=(capture&&) = delete;
  capture(const capture&) = delete;
  ~capture() {
    if (e_ != nullptr) (void)fl_capture_end(e_, nullptr);
  }
  program end() {
    fl_program_t* p = nullptr;
    fl_engine_t* e = std::exchange(e_, nullptr);
    check(fl_capture_end(e, &p));
    return program(p);
  }

 private:
  fl_engine_t* e_ = nullptr;
};

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
    watchdog_ = std::make_unique<watchdog_state>();
    check(fl_engine_create(&d, &e_));
    try {
      spread_ = std::make_shared<detail::spread>(e_);
    } catch (...) {
      fl_engine_destroy(e_);
      throw;
    }
  }
  engine(engine&& o) noexcept
      : e_(std::exchange(o.e_, nullptr)), watchdog_(std::move(o.watchdog_)), spread_(std::move(o.spread_)) {}
  engine& operator=(engine&& o) noexcept {
    if (this != &o) {
      drop();
      e_ = std::exchange(o.e_, nullptr);
      watchdog_ = std::move(o.watchdog_);
      spread_ = std::move(o.spread_);
    }
    return *this;
  }
  ~engine() { drop(); }
  fl_engine_t* get() const noexcept { return e_; }

  uint32_t lane_count() const { return fl_engine_lane_count(e_); }
  uint32_t worker_count() const { return fl_engine_worker_count(e_); }

  // A fresh lane (the smallest free id >= 1), released when the returned lane goes;
  // throws FL_ERR_EXHAUSTED when every lane is held. The default host stream does not
  // spread to it while it is held.
  lane acquire_lane() const {
    lane l;
    check(fl_lane_acquire(e_, &l.id_));
    l.e_ = e_;
    l.spread_ = spread_;
    if (spread_) spread_->hold(l.id_, +1);
    return l;
  }

  // The default host stream: submit() of an instruction without operands runs it on a lane
  // the engine picks, side by side with others, as a thread pool would (ordered against
  // nothing); with operands, on lane 0 in order (see stream::submit).
  stream host() const { return stream(lane_stream(0, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST), spread_); }
  // The host stream of `lane` (in order; never spread to by host()).
  stream host(uint32_t lane) const { return stream_of(lane, fl_device_t{FL_DEVICE_CPU, 0}, FL_STREAM_HOST); }
  stream stream_of(uint32_t lane, fl_device_t device, fl_stream_kind_t kind) const {
    fl_stream_t* s = lane_stream(lane, device, kind);
    if (spread_) spread_->named(lane);
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

  // EXPERIMENTAL: captures this thread's submissions to the engine until end() (see
  // capture): `auto c = e.begin_capture("step"); ...submit...; program p = c.end();`.
  capture begin_capture(const char* name = nullptr) const { return capture(e_, name); }

  task_group make_task_group() const { return task_group(e_); }
  taskgraph make_taskgraph() const { return taskgraph(e_); }
  // EXPERIMENTAL: this engine's rank in the communicator named by `id`.
  communicator make_communicator(const comm_options& o, const fl_comm_unique_id_t& id) const {
    return communicator(e_, o, id);
  }

  // fl_parallel_for over [begin, end): body(lo, hi) on disjoint chunks (grain 0: chosen by
  // the engine). The first exception a body throws is rethrown here.
  template <class F>
  void parallel_for(uint64_t begin, uint64_t end, F&& body, uint64_t grain = 0) const {
    struct Ctx {
      std::remove_reference_t<F>* body;
      detail::first_exception first;
    } ctx{&body, {}};
    fl_status_t st = fl_parallel_for(
        e_, begin, end, grain,
        [](uint64_t lo, uint64_t hi, void* p) -> fl_status_t {
          auto* c = static_cast<Ctx*>(p);
          return c->first.run(*c->body, lo, hi);
        },
        &ctx);
    ctx.first.rethrow_or_check(st);
  }

  // Waits for every instruction; throws a failure (check_wait: an instruction's exception
  // is rethrown).
  void synchronize() const { check_wait(fl_engine_synchronize(e_)); }
  bool synchronize_for(std::chrono::nanoseconds timeout) const {
    return check_wait_timed(fl_engine_synchronize_for(e_, to_ns(timeout)));
  }
  void cancel() const { check(fl_engine_cancel(e_)); }
  // fl_engine_drain: false on a timeout.
  bool drain(std::chrono::nanoseconds timeout = std::chrono::nanoseconds::max()) const {
    return check_wait_timed(
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

  // ---- the watchdog ----
  // When nothing completes for `timeout` while work is in flight, on_stall(dump) runs on
  // the watchdog's thread with the state dump (once per stall). on_stall may call any
  // method of this engine, set_watchdog included; an exception it throws is dropped.
  // Calls from several threads take effect one after the other, each whole: a timeout
  // always runs its own call's callable. A replaced callable is destroyed once it cannot
  // run any more (a running one when its run returns, on the watchdog's thread); after
  // calls that overlapped in time, one may instead live until the next set_watchdog or
  // the engine's end. timeout 0 turns it off.
  template <class F, std::enable_if_t<std::is_invocable_v<F&, std::string_view>, int> = 0>
  void set_watchdog(std::chrono::milliseconds timeout, F&& on_stall) {
    configure_watchdog(timeout, watchdog_fn(std::forward<F>(on_stall)), "");
  }
  // Writes the dump to `path` (empty: stderr) instead.
  void set_watchdog(std::chrono::milliseconds timeout, const std::string& path = "") {
    configure_watchdog(timeout, nullptr, path);
  }

  // ---- traces (EXPERIMENTAL) ----
  // Records a timeline into a bounded buffer, written to `path` (Chrome trace-event JSON)
  // by trace_stop() or when the engine is destroyed.
  void trace_start(const std::string& path) const { check(fl_trace_start(e_, path.c_str())); }
  void trace_stop() const { check(fl_trace_stop(e_)); }

  // Destroys the engine now (drains first; the destructor then does nothing). Returns
  // false, and leaves the engine as it was, when the C API refuses: called from code the
  // engine runs (a callback would wait for itself; fl_last_error_message() says so).
  bool reset() noexcept {
    if (e_ != nullptr && fl_engine_destroy(e_) != FL_OK) return false;  // joins the watchdog's thread
    e_ = nullptr;
    watchdog_.reset();  // no run can start any more: every callable goes
    return true;
  }

 private:
  fl_stream_t* lane_stream(uint32_t lane, fl_device_t device, fl_stream_kind_t kind) const {
    fl_stream_t* s = nullptr;
    check(fl_stream_get(e_, lane, device, kind, &s));
    return s;
  }

  // The destructor's (and a move's) reset: when the C API refuses the destroy (the last
  // owner went inside one of the engine's callbacks), the engine keeps running and its
  // watchdog may still run a callable, so the records are left behind, never freed under it.
  void drop() noexcept {
    if (!reset()) (void)watchdog_.release();
    e_ = nullptr;
  }

  using watchdog_fn = std::function<void(std::string_view)>;
  struct watchdog_registry;
  // One set_watchdog call: its callable (empty: the dump goes to a path or stderr). The C
  // watchdog gets the record's token as its user_data, not its address: a call from code
  // the engine runs does not wait for a running callback, so a dump may reach a token
  // whose record is gone, and its run is skipped (that configuration was replaced). A run
  // holds its record: a callable lives until its last run has returned.
  struct watchdog_record {
    watchdog_fn fn;
    watchdog_registry* registry = nullptr;
    uintptr_t token = 0;
    // Under watchdog_state::mu: the epochs at which its last C call began and returned.
    uint64_t begun = 0, ended = 0;
    bool in_flight = false;
    ~watchdog_record() {
      if (registry == nullptr) return;
      std::lock_guard<std::mutex> lock(registry->mu);
      registry->records.erase(token);
    }  // fn is destroyed after this, with no lock held
  };
  // The records of every engine by token (each engine's state owns its own). Never freed:
  // an engine left running at exit may still look a token up.
  struct watchdog_registry {
    std::mutex mu;
    uintptr_t next = 0;
    std::unordered_map<uintptr_t, std::weak_ptr<watchdog_record>> records;
  };
  static watchdog_registry& registry() {
    static watchdog_registry* r = new watchdog_registry;
    return *r;
  }
  // The records the C watchdog may still run: the one in force and those being installed
  // or that may have been installed after it. No lock is held across a C call or while a
  // callable runs or is destroyed: a call from a program thread waits for a running
  // callback, and that callback may wait for code that reconfigures the watchdog too.
  struct watchdog_state {
    std::mutex mu;
    uint64_t epoch = 0;
    std::vector<std::shared_ptr<watchdog_record>> records;
  };
  static void watchdog_trampoline(const char* dump, void* token) {
    std::shared_ptr<watchdog_record> r;
    {
      watchdog_registry& reg = registry();
      std::lock_guard<std::mutex> lock(reg.mu);
      auto it = reg.records.find(reinterpret_cast<uintptr_t>(token));
      if (it != reg.records.end()) r = it->second.lock();
    }
    if (!r || !r->fn) return;
    try {
      r->fn(std::string_view(dump != nullptr ? dump : ""));
    } catch (...) {  // nowhere to report it: the watchdog's thread is the library's
    }
  }  // a record replaced meanwhile is destroyed here
  // Which of two calls was installed last is known only when one returned before the other
  // began (epochs). A record is dropped once a call begun after it returned has succeeded;
  // a call that returns last while an overlapping one remains installs its record once
  // more, so that the configuration in force is known again: the one that returned last.
  void configure_watchdog(std::chrono::milliseconds timeout, watchdog_fn fn, const std::string& path) {
    if (!watchdog_) watchdog_ = std::make_unique<watchdog_state>();  // a moved-from engine
    watchdog_state* w = watchdog_.get();
    auto r = std::make_shared<watchdog_record>();
    r->fn = std::move(fn);
    {
      watchdog_registry& reg = registry();
      std::lock_guard<std::mutex> lock(reg.mu);
      uintptr_t t = 0;
      do t = ++reg.next;
      while (t == 0 || reg.records.count(t) != 0);
      reg.records.emplace(t, r);
      r->token = t;
      r->registry = &reg;
    }
    fl_watchdog_desc_t d = FL_WATCHDOG_DESC_INIT;
    d.timeout_ms = timeout.count() < 0 ? 0 : uint64_t(timeout.count());
    d.callback = r->fn ? &engine::watchdog_trampoline : nullptr;
    d.user_data = reinterpret_cast<void*>(r->token);
    d.path = path.empty() ? nullptr : path.c_str();
    {
      std::lock_guard<std::mutex> lock(w->mu);
      w->records.push_back(r);
      r->begun = ++w->epoch;
      r->in_flight = true;
    }
    const fl_status_t st = fl_engine_set_watchdog(e_, &d);
    // Read now: a replaced callable's destructor may call into the engine.
    const std::string message = st == FL_OK ? std::string() : std::string(fl_last_error_message());
    std::vector<std::shared_ptr<watchdog_record>> replaced;
    for (bool reinstalled = false, ok = st == FL_OK;;) {
      bool again = false;
      {
        std::lock_guard<std::mutex> lock(w->mu);
        r->ended = ++w->epoch;
        r->in_flight = false;
        auto& rs = w->records;
        for (size_t i = 0; i < rs.size();) {
          const watchdog_record* q = rs[i].get();
          // Refused (nothing changed): r goes. Installed: so do those installed before it.
          const bool gone = st != FL_OK ? q == r.get() : ok && q != r.get() && !q->in_flight && q->ended < r->begun;
          if (gone) {
            replaced.push_back(std::move(rs[i]));
            rs[i] = std::move(rs.back());
            rs.pop_back();
          } else {
            ++i;
          }
        }
        bool others_in_flight = false;
        for (const auto& q : rs) others_in_flight = others_in_flight || q->in_flight;
        if (ok && !reinstalled && rs.size() > 1 && !others_in_flight) {
          again = true;
          r->begun = ++w->epoch;
          r->in_flight = true;
        }
      }
      if (!again) break;
      reinstalled = true;
      ok = fl_engine_set_watchdog(e_, &d) == FL_OK;  // refused only if the engine went meanwhile
    }
    // Destroyed here (one that runs, when its run returns), with no lock held: a destructor
    // may call into the engine, set_watchdog included, after this call took effect.
    replaced.clear();
    if (st != FL_OK) throw error(st, message);
  }

  fl_engine_t* e_ = nullptr;
  std::unique_ptr<watchdog_state> watchdog_;  // null in a moved-from engine until set_watchdog
  std::shared_ptr<detail::spread> spread_;    // where host() spreads; shared with pending instructions
};

}  // namespace flowlane

#endif  // FLOWLANE_FLOWLANE_HPP
