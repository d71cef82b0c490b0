// Waits from a callback for device work that waits for the caller, against the fake CUDA
// runtime (public API only; the host cases are tests/capi/test_waits_on_the_caller*.cpp).
// Waits::find_waiter walks what waits for the calling instruction; here the walk goes
// through device instructions: issue edges (a device instruction of another lane waits
// for a device predecessor to be *issued*), completion edges from a device instruction to
// a host one, lane order behind a device instruction not yet issued, and callers that are
// themselves device instructions (their fn on the lane runner, their cleanup on the
// poller after the GPU work, or on the lane runner when they were skipped). A refused wait
// answers FL_ERR_INVALID_ARGUMENT naming the chain; waits for device work that does not
// wait for the caller still wait and succeed.
//
// Every wait has a timeout (kWait) that a passing run never reaches: an engine that misses
// the cycle returns FL_ERR_TIMEOUT and the test fails on it.
#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "capi/capi_test_util.hpp"

extern "C" long fake_cudart_event_records();

namespace {

constexpr uint64_t kWait = 30ull * 1'000'000'000ull;
constexpr fl_device_t kGpu{FL_DEVICE_CUDA, 0};

fl_status_t noop() { return FL_OK; }
void nothing() {}

// A wait's status and message, as the callback that made it saw them.
struct Seen {
  std::atomic<bool> done{false};
  fl_status_t st = FL_ERR_INTERNAL;
  std::string msg;
  void set(fl_status_t s) {
    st = s;
    msg = s == FL_OK ? "" : fl_last_error_message();
    done.store(true);
  }
};

// Whether `msg` names the chain 'names[0]' -> 'names[1]' -> ..., in that order.
bool names_chain(const std::string& msg, std::initializer_list<const char*> names) {
  size_t at = 0;
  bool first = true;
  for (const char* n : names) {
    at = msg.find((first ? "'" : "-> '") + std::string(n) + "' (", at);
    if (at == std::string::npos) return false;
    first = false;
  }
  return true;
}

// The wait `seen` was refused by `call`, naming the chain of names given.
#define EXPECT_REFUSED(seen, call, ...)                                                              \
  do {                                                                                               \
    EXPECT_TRUE((seen).done.load());                                                                 \
    EXPECT_EQ((seen).st, FL_ERR_INVALID_ARGUMENT) << fl_status_name((seen).st) << ": " << (seen).msg; \
    EXPECT_TRUE(has((seen).msg, call) && names_chain((seen).msg, {__VA_ARGS__})) << (seen).msg;        \
  } while (0)

#define EXPECT_WAITED(seen)                                                         \
  do {                                                                             \
    EXPECT_TRUE((seen).done.load());                                               \
    EXPECT_EQ((seen).st, FL_OK) << fl_status_name((seen).st) << ": " << (seen).msg; \
  } while (0)

// Lambdas as a device instruction's fn and cleanup (fl_submit_device); the fn enqueues
// nothing: the instruction still issues, is covered by an event and completes on the
// poller, which then runs the cleanup.
template <class F, class C>
struct DeviceClosure {
  F fn;
  C cleanup;
  static fl_status_t call(fl_instr_ctx_t*, void*, void* ud) { return static_cast<DeviceClosure*>(ud)->fn(); }
  static void destroy(void* ud) {
    auto* c = static_cast<DeviceClosure*>(ud);
    c->cleanup();
    delete c;
  }
};

template <class F = fl_status_t (*)(), class C = void (*)()>
fl_instr_id submit_device(fl_stream_t* s, std::vector<fl_operand_t> ops, const char* name, F fn = noop,
                          C cleanup = nothing) {
  auto* c = new DeviceClosure<F, C>{std::move(fn), std::move(cleanup)};
  fl_device_instr_t d = FL_DEVICE_INSTR_INIT;
  d.fn = &DeviceClosure<F, C>::call;
  d.cleanup = &DeviceClosure<F, C>::destroy;
  d.user_data = c;
  d.operands = ops.empty() ? nullptr : ops.data();
  d.num_operands = ops.size();
  d.name = name;
  fl_instr_id id = 0;
  fl_status_t st = fl_submit_device(s, &d, &id);
  EXPECT_EQ(st, FL_OK) << fl_last_error_message();
  if (st != FL_OK) delete c;
  return id;
}

// An engine (8 lanes unless told); the objects it made are released before it is destroyed.
struct Rig {
  fl_engine_t* e;
  std::vector<fl_object_t*> objects;
  explicit Rig(uint64_t lanes = 8) : e(make_engine(4, lanes)) {}
  fl_stream_t* host(uint32_t lane) { return host_stream(e, lane); }
  fl_stream_t* gpu(uint32_t lane, fl_stream_kind_t kind = FL_STREAM_COMPUTE) {
    fl_stream_t* s = nullptr;
    EXPECT_EQ(fl_stream_get(e, lane, kGpu, kind, &s), FL_OK) << fl_last_error_message();
    return s;
  }
  fl_object_t* obj() { return objects.emplace_back(fltest::make_obj(e)); }
  ~Rig() {
    for (fl_object_t* o : objects) fl_object_release(o);
    fl_engine_destroy(e);
  }
};

// A host caller on lane 1 with `ops` that, once `go` opens, makes `waits` from its fn.
fl_instr_id submit_host_caller(fl_stream_t* s, std::vector<fl_operand_t> ops, Gate& go, std::function<void()> waits) {
  return submit(
      s,
      [&go, waits] {
        if (!go.wait()) return FL_ERR_TIMEOUT;
        waits();
        return FL_OK;
      },
      std::move(ops), "caller");
}

// caller (host, lane 1) writes X; D (device, lane 2) reads X and writes Y; G (host, lane 3)
// reads Y; D2 (device, lane 4) reads Y: an issue edge D -> D2. U (device, lane 5) writes V,
// an object nobody else uses, and R (device, lane 6) only reads Q, which the caller reads
// too: neither waits for the caller.
struct MixedChain {
  Rig r;
  fl_object_t* x = r.obj();
  fl_object_t* y = r.obj();
  fl_object_t* v = r.obj();
  fl_object_t* q = r.obj();
  Gate go;
  fl_stream_t* d_stream = r.gpu(2);
  fl_stream_t* g_stream = r.host(3);
  fl_stream_t* d2_stream = r.gpu(4);
  fl_stream_t* u_stream = r.gpu(5);
  fl_stream_t* r_stream = r.gpu(6);
  std::atomic<fl_instr_id> d{0}, g{0}, d2{0}, u{0}, rd{0};
  const long events_before = fake_cudart_event_records();
  explicit MixedChain(std::function<void(MixedChain&)> waits) {
    submit_host_caller(r.host(1), {W(x), R(q)}, go, [this, waits] { waits(*this); });
    d = submit_device(d_stream, {R(x), W(y)}, "D");
    g = submit(g_stream, noop, {R(y)}, "G");
    d2 = submit_device(d2_stream, {R(y)}, "D2");
    u = submit_device(u_stream, {W(v)}, "U");
    rd = submit_device(r_stream, {R(q)}, "R");
    go.open = true;
  }
  void finish() {
    ASSERT_FL_OK(fl_engine_synchronize(r.e));
    EXPECT_GT(fake_cudart_event_records(), events_before);  // D, D2, U and R ran as device work
  }
};

TEST(FakeWaitsOnTheCaller, WaitForADeviceReaderOfTheCallersOutputIsRefused) {
  HangGuard guard("WaitForADeviceReaderOfTheCallersOutputIsRefused");
  Seen instr, sync;
  MixedChain ch([&](MixedChain& c) {
    instr.set(fl_instr_wait_for(c.d_stream, c.d.load(), kWait));
    sync.set(fl_stream_synchronize_for(c.d_stream, kWait));
  });
  ch.finish();
  EXPECT_REFUSED(instr, "fl_instr_wait_for", "caller", "D");
  EXPECT_REFUSED(sync, "fl_stream_synchronize", "caller", "D");
  uint32_t state = 0;
  ASSERT_FL_OK(fl_instr_query(ch.d_stream, ch.d, &state));
  EXPECT_EQ(state, uint32_t(FL_INSTR_DONE));  // the refusals changed nothing
}

TEST(FakeWaitsOnTheCaller, WaitForADeviceInstructionBehindAnIssueEdgeIsRefused) {
  HangGuard guard("WaitForADeviceInstructionBehindAnIssueEdgeIsRefused");
  Seen instr, sync;
  MixedChain ch([&](MixedChain& c) {
    instr.set(fl_instr_wait_for(c.d2_stream, c.d2.load(), kWait));
    sync.set(fl_stream_synchronize_for(c.d2_stream, kWait));
  });
  ch.finish();
  EXPECT_REFUSED(instr, "fl_instr_wait_for", "caller", "D", "D2");
  EXPECT_REFUSED(sync, "fl_stream_synchronize", "caller", "D", "D2");
}

TEST(FakeWaitsOnTheCaller, HostDeviceHostChainIsRefusedByEveryWait) {
  HangGuard guard("HostDeviceHostChainIsRefusedByEveryWait");
  Seen instr, host_sync, dev_sync, obj_y, obj_y_write;
  MixedChain ch([&](MixedChain& c) {
    instr.set(fl_instr_wait_for(c.g_stream, c.g.load(), kWait));
    host_sync.set(fl_stream_synchronize_for(c.g_stream, kWait));
    dev_sync.set(fl_stream_synchronize_for(c.d_stream, kWait));
    obj_y.set(fl_object_wait_for(c.y, FL_READ, kWait));          // Y's writer D
    obj_y_write.set(fl_object_wait_for(c.y, FL_WRITE, kWait));   // and its readers G, D2
  });
  ch.finish();
  EXPECT_REFUSED(instr, "fl_instr_wait_for", "caller", "D", "G");
  EXPECT_REFUSED(host_sync, "fl_stream_synchronize", "caller", "D", "G");
  EXPECT_REFUSED(dev_sync, "fl_stream_synchronize", "caller", "D");
  EXPECT_REFUSED(obj_y, "fl_object_wait", "caller", "D");
  EXPECT_REFUSED(obj_y_write, "fl_object_wait", "caller", "D");
}

TEST(FakeWaitsOnTheCaller, WaitsForDeviceWorkThatDoesNotWaitForTheCallerSucceed) {
  HangGuard guard("WaitsForDeviceWorkThatDoesNotWaitForTheCallerSucceed");
  Seen instr_u, sync_u, obj_v, instr_r, sync_r, obj_q;
  MixedChain ch([&](MixedChain& c) {
    instr_u.set(fl_instr_wait_for(c.u_stream, c.u.load(), kWait));  // an unrelated object
    sync_u.set(fl_stream_synchronize_for(c.u_stream, kWait));
    obj_v.set(fl_object_wait_for(c.v, FL_WRITE, kWait));
    instr_r.set(fl_instr_wait_for(c.r_stream, c.rd.load(), kWait));  // readers never wait for readers
    sync_r.set(fl_stream_synchronize_for(c.r_stream, kWait));
    obj_q.set(fl_object_wait_for(c.q, FL_READ, kWait));
  });
  ch.finish();
  for (Seen* s : {&instr_u, &sync_u, &obj_v, &instr_r, &sync_r, &obj_q}) EXPECT_WAITED(*s);
}

// Lane order behind a device instruction that waits for the caller: D (lane 2, COMPUTE)
// reads X; E, behind it on lane 2's H2D stream, writes Z; F (device, lane 3) reads Z.
// E is issued only after D, which waits for the caller, though E shares nothing with it.
TEST(FakeWaitsOnTheCaller, WaitForWorkQueuedBehindADeviceDependentIsRefused) {
  HangGuard guard("WaitForWorkQueuedBehindADeviceDependentIsRefused");
  Rig r;
  fl_object_t* x = r.obj();
  fl_object_t* z = r.obj();
  Gate go;
  Seen instr, sync;
  fl_stream_t* e_stream = r.gpu(2, FL_STREAM_H2D);
  fl_stream_t* f_stream = r.gpu(3);
  std::atomic<fl_instr_id> f{0};
  submit_host_caller(r.host(1), {W(x)}, go, [&] {
    instr.set(fl_instr_wait_for(f_stream, f.load(), kWait));
    sync.set(fl_stream_synchronize_for(e_stream, kWait));
  });
  submit_device(r.gpu(2), {R(x)}, "D");
  submit_device(e_stream, {W(z)}, "E");
  f = submit_device(f_stream, {R(z)}, "F");
  go.open = true;
  ASSERT_FL_OK(fl_engine_synchronize(r.e));
  EXPECT_REFUSED(instr, "fl_instr_wait_for", "caller", "D", "E", "F");
  EXPECT_REFUSED(sync, "fl_stream_synchronize", "caller", "D", "E");
}

// The caller is a device instruction (lane 1) writing X whose fn waits: D2 (device, lane 2)
// waits for its issue (the caller's own issue list), H (host, lane 3) for its completion;
// E (device, lane 1's H2D stream) queues behind it and writes Z, which F (host, lane 4)
// reads. U (device, lane 5) is unrelated.
TEST(FakeWaitsOnTheCaller, DeviceCallersFnIsRefusedWaitsForItsIssueAndCompletionDependents) {
  HangGuard guard("DeviceCallersFnIsRefusedWaitsForItsIssueAndCompletionDependents");
  Rig r;
  fl_object_t* x = r.obj();
  fl_object_t* z = r.obj();
  fl_object_t* v = r.obj();
  Gate go;
  Seen on_d2, on_h, on_f, sync_d2, unrelated;
  fl_stream_t* d2_stream = r.gpu(2);
  fl_stream_t* h_stream = r.host(3);
  fl_stream_t* f_stream = r.host(4);
  fl_stream_t* u_stream = r.gpu(5);
  std::atomic<fl_instr_id> d2{0}, h{0}, f{0}, u{0};
  submit_device(r.gpu(1), {W(x)}, "caller", [&] {
    if (!go.wait()) return FL_ERR_TIMEOUT;
    on_d2.set(fl_instr_wait_for(d2_stream, d2.load(), kWait));
    sync_d2.set(fl_stream_synchronize_for(d2_stream, kWait));
    on_h.set(fl_instr_wait_for(h_stream, h.load(), kWait));
    on_f.set(fl_instr_wait_for(f_stream, f.load(), kWait));
    unrelated.set(fl_instr_wait_for(u_stream, u.load(), kWait));
    return FL_OK;
  });
  d2 = submit_device(d2_stream, {R(x)}, "D2");
  h = submit(h_stream, noop, {R(x)}, "H");
  submit_device(r.gpu(1, FL_STREAM_H2D), {W(z)}, "E");
  f = submit(f_stream, noop, {R(z)}, "F");
  u = submit_device(u_stream, {W(v)}, "U");
  go.open = true;
  ASSERT_FL_OK(fl_engine_synchronize(r.e));
  EXPECT_REFUSED(on_d2, "fl_instr_wait_for", "caller", "D2");
  EXPECT_REFUSED(sync_d2, "fl_stream_synchronize", "caller", "D2");
  EXPECT_REFUSED(on_h, "fl_instr_wait_for", "caller", "H");
  EXPECT_REFUSED(on_f, "fl_instr_wait_for", "caller", "E", "F");
  EXPECT_WAITED(unrelated);
}

// The caller is a device instruction's cleanup, which runs on the poller once its GPU work
// completed: its issue dependents no longer wait for it, its completion dependents do.
// H (host, lane 2) reads X and writes Y; G (device, lane 3) reads Y. K (host, lane 4) is
// unrelated. (A wait there for device work would stall the poller: gpu/README.md.)
TEST(FakeWaitsOnTheCaller, DeviceCallersCleanupIsRefusedWaitsForItsCompletionDependents) {
  HangGuard guard("DeviceCallersCleanupIsRefusedWaitsForItsCompletionDependents");
  Rig r;
  fl_object_t* x = r.obj();
  fl_object_t* y = r.obj();
  Gate go;
  Seen on_h, on_g, sync_h, obj_y, unrelated;
  fl_stream_t* h_stream = r.host(2);
  fl_stream_t* g_stream = r.gpu(3);
  fl_stream_t* k_stream = r.host(4);
  std::atomic<fl_instr_id> h{0}, g{0}, k{0};
  submit_device(r.gpu(1), {W(x)}, "caller", noop, [&] {
    if (!go.wait()) return;
    on_h.set(fl_instr_wait_for(h_stream, h.load(), kWait));
    sync_h.set(fl_stream_synchronize_for(h_stream, kWait));
    on_g.set(fl_instr_wait_for(g_stream, g.load(), kWait));
    obj_y.set(fl_object_wait_for(y, FL_READ, kWait));
    unrelated.set(fl_instr_wait_for(k_stream, k.load(), kWait));
  });
  h = submit(h_stream, noop, {R(x), W(y)}, "H");
  g = submit_device(g_stream, {R(y)}, "G");
  k = submit(k_stream, noop, {}, "K");
  go.open = true;
  ASSERT_FL_OK(fl_engine_synchronize(r.e));
  EXPECT_REFUSED(on_h, "fl_instr_wait_for", "caller", "H");
  EXPECT_REFUSED(sync_h, "fl_stream_synchronize", "caller", "H");
  EXPECT_REFUSED(on_g, "fl_instr_wait_for", "caller", "H", "G");
  EXPECT_REFUSED(obj_y, "fl_object_wait", "caller", "H");
  EXPECT_WAITED(unrelated);
}

// A device instruction skipped because its input is poisoned, on a stream with nothing in
// flight, has its cleanup run by its lane runner: the lane does not move on until that
// cleanup returns. B (host, lane 1) queues behind it and writes Z; C (host, lane 2) reads Z.
TEST(FakeWaitsOnTheCaller, SkippedDeviceCallersCleanupOnItsLaneIsRefusedWaitsForWorkBehindIt) {
  HangGuard guard("SkippedDeviceCallersCleanupOnItsLaneIsRefusedWaitsForWorkBehindIt");
  Rig r;
  fl_object_t* p = r.obj();
  fl_object_t* z = r.obj();
  Gate go;
  Seen on_c, sync_c;
  fl_stream_t* c_stream = r.host(2);
  std::atomic<fl_instr_id> c{0};
  submit(r.host(3), [] { return FL_ERR_INSTRUCTION_FAILED; }, {W(p)}, "fails");
  submit_device(r.gpu(1), {R(p)}, "caller", noop, [&] {
    if (!go.wait()) return;
    on_c.set(fl_instr_wait_for(c_stream, c.load(), kWait));
    sync_c.set(fl_stream_synchronize_for(c_stream, kWait));
  });
  submit(r.host(1), noop, {W(z)}, "B");
  c = submit(c_stream, noop, {R(z)}, "C");
  go.open = true;
  EXPECT_EQ(fl_engine_synchronize(r.e), FL_ERR_INSTRUCTION_FAILED) << fl_last_error_message();
  EXPECT_REFUSED(on_c, "fl_instr_wait_for", "caller", "B", "C");
  EXPECT_REFUSED(sync_c, "fl_stream_synchronize", "caller", "B", "C");
}

// Two threads submit device and host dependents of the caller (and unrelated device work)
// while the caller's fn walks them: every wait for a dependent is refused, every wait for
// unrelated work succeeds. For ThreadSanitizer: the walk reads successor lists and lane
// links the submitters are publishing.
TEST(FakeWaitsOnTheCaller, WalksRaceWithSubmittersOfDeviceAndHostDependents) {
  HangGuard guard("WalksRaceWithSubmittersOfDeviceAndHostDependents");
  Rig r(10);
  fl_object_t* x = r.obj();
  constexpr int kThreads = 2;
  const int rounds = int(fl_scaled(200, 40));
  struct Lanes {
    fl_stream_t* dev;       // D: reads X, writes Y
    fl_stream_t* host;      // G: reads Y (a completion edge from D)
    fl_stream_t* dev2;      // D2: reads Y (an issue edge from D)
    fl_stream_t* free_dev;  // U: unrelated
    fl_object_t* y;
    fl_object_t* v;
    std::atomic<fl_instr_id> last_g{0}, last_d{0}, last_d2{0}, last_u{0};
  };
  Lanes lanes[kThreads] = {{r.gpu(2), r.host(3), r.gpu(4), r.gpu(5), r.obj(), r.obj()},
                           {r.gpu(6), r.host(7), r.gpu(8), r.gpu(9), r.obj(), r.obj()}};
  Gate go;
  std::atomic<int> finished{0};
  std::atomic<int> refused{0}, waited{0}, wrong{0};
  std::string wrong_msg;  // the first wrong answer, written by the caller only
  submit_host_caller(r.host(1), {W(x)}, go, [&] {
    auto check = [&](fl_status_t st, fl_status_t want) {
      if (st == want) {
        (want == FL_OK ? waited : refused)++;
      } else if (wrong++ == 0) {
        wrong_msg = std::string(fl_status_name(st)) + ": " + fl_last_error_message();
      }
    };
    for (;;) {
      const bool last = finished.load() == kThreads;  // one more pass after the submitters
      for (Lanes& l : lanes) {
        if (fl_instr_id g = l.last_g.load()) check(fl_instr_wait_for(l.host, g, kWait), FL_ERR_INVALID_ARGUMENT);
        if (l.last_d.load() != 0) check(fl_stream_synchronize_for(l.dev, kWait), FL_ERR_INVALID_ARGUMENT);
        if (fl_instr_id d2 = l.last_d2.load()) check(fl_instr_wait_for(l.dev2, d2, kWait), FL_ERR_INVALID_ARGUMENT);
        if (fl_instr_id u = l.last_u.load()) check(fl_instr_wait_for(l.free_dev, u, kWait), FL_OK);
      }
      if (last) return;
    }
  });
  go.open = true;  // the caller walks while the threads submit
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      Lanes& l = lanes[t];
      for (int k = 0; k < rounds; ++k) {
        l.last_d = submit_device(l.dev, {R(x), W(l.y)}, "D");
        l.last_g = submit(l.host, noop, {R(l.y)}, "G");
        l.last_d2 = submit_device(l.dev2, {R(l.y)}, "D2");
        l.last_u = submit_device(l.free_dev, {W(l.v)}, "U");
      }
      finished++;
    });
  for (std::thread& t : threads) t.join();
  ASSERT_FL_OK(fl_engine_synchronize(r.e));
  EXPECT_EQ(wrong.load(), 0) << wrong_msg;
  EXPECT_GT(refused.load(), 0);
  EXPECT_GT(waited.load(), 0);
}

}  // namespace
