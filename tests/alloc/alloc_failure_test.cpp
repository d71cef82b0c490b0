// Allocation-failure injection on the submit path. This binary replaces the global operator
// new: while injection is armed on the calling thread, the N-th allocation throws
// std::bad_alloc. For N = 0, 1, 2, ... each API call on the submit path (fl_submit_host with
// operands that create dependencies, edges and reader entries; fl_object_create; a task
// graph) must either succeed or answer FL_ERR_NO_MEMORY without side effects: a refused
// submission never calls fn or cleanup, a successful one calls each exactly once, no lock
// stays held (the next submissions and synchronize go through, under a hang guard), the
// order of everything else is intact, and nothing leaks (checked by the ASan build).
#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "capi/capi_test_util.hpp"
#include "flowlane/flowlane.hpp"

namespace {

thread_local bool t_armed = false;
thread_local long t_countdown = -1;  // allocations left before the failing one
thread_local bool t_hit = false;     // the armed failure happened

void* allocate(std::size_t n, std::size_t align) {
  if (t_armed && !t_hit && t_countdown-- == 0) {
    t_hit = true;
    throw std::bad_alloc();
  }
  if (n == 0) n = 1;
  void* p = align <= alignof(std::max_align_t) ? std::malloc(n) : std::aligned_alloc(align, (n + align - 1) / align * align);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void* allocate_nothrow(std::size_t n, std::size_t align) noexcept {
  try {
    return allocate(n, align);
  } catch (...) {
    return nullptr;
  }
}

// Arms the injector on this thread: the `nth` allocation from now fails.
struct Armed {
  explicit Armed(long nth) {
    t_countdown = nth;
    t_hit = false;
    t_armed = true;
  }
  ~Armed() { t_armed = false; }
  bool hit() const { return t_hit; }
};

}  // namespace

void* operator new(std::size_t n) { return allocate(n, 0); }
void* operator new[](std::size_t n) { return allocate(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return allocate(n, std::size_t(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return allocate(n, std::size_t(a)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return allocate_nothrow(n, 0); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return allocate_nothrow(n, 0); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate_nothrow(n, std::size_t(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate_nothrow(n, std::size_t(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace {

struct Counts {
  std::atomic<int> fn{0};
  std::atomic<int> cleanup{0};
};

fl_status_t count_fn(fl_instr_ctx_t*, void* ud) {
  static_cast<Counts*>(ud)->fn.fetch_add(1);
  return FL_OK;
}
void count_cleanup(void* ud) { static_cast<Counts*>(ud)->cleanup.fetch_add(1); }

}  // namespace

TEST(AllocationFailure, EverySubmitPathAllocationFailsCleanly) {
  flguard::HangGuard guard("allocation-failure injection on the submit path");
  fl_engine_t* e = flguard::make_engine(2, 4);
  ASSERT_NE(e, nullptr);
  fl_object_t* a = fltest::make_obj(e);
  fl_object_t* b = fltest::make_obj(e);
  fl_object_t* c = fltest::make_obj(e);
  fl_stream_t* s1 = flguard::host_stream(e, 1);
  fl_stream_t* s2 = flguard::host_stream(e, 2);
  int ok = 0, refused = 0;
  long n = 0;
  std::vector<Counts> counts(4000);
  for (; n < long(counts.size()); ++n) {
    // Pending users of a, b and c (held by a gate) so the submission records dependencies,
    // edges and a reader entry.
    fltest::Gate gate;
    fltest::submit(s2, [&] { return gate.wait() ? FL_OK : FL_ERR_TIMEOUT; }, {fltest::W(a), fltest::R(b)}, "holder");
    fl_operand_t ops[3] = {{a, FL_READ, 0}, {b, FL_READ_WRITE, 0}, {c, FL_READ, 0}};
    Counts& k = counts[size_t(n)];
    fl_status_t st;
    bool hit;
    {
      Armed armed(n);
      st = flguard::submit_raw(n % 2 ? s1 : s2, &count_fn, &k, ops, 3, "injected", &count_cleanup);
      hit = armed.hit();
    }
    gate.open = true;
    if (st == FL_OK) {
      ++ok;
    } else {
      ++refused;
      EXPECT_EQ(st, FL_ERR_NO_MEMORY) << "allocation #" << n << ": " << fl_last_error_message();
      EXPECT_TRUE(hit) << "allocation #" << n << ": refused without an injected failure";
    }
    // The engine is usable at once: more work on the same objects goes through, in order.
    std::atomic<int> after{0};
    fltest::submit(s1, [&] { after.fetch_add(1); return FL_OK; }, {fltest::RW(a), fltest::RW(b), fltest::W(c)});
    ASSERT_EQ(fl_engine_synchronize(e), FL_OK) << "allocation #" << n << ": " << fl_last_error_message();
    EXPECT_EQ(after.load(), 1);
    EXPECT_EQ(k.fn.load(), st == FL_OK ? 1 : 0) << "allocation #" << n;
    EXPECT_EQ(k.cleanup.load(), st == FL_OK ? 1 : 0) << "allocation #" << n;
    if (!hit) break;  // the call made fewer than n+1 allocations: every point was covered
  }
  EXPECT_LT(n, long(counts.size())) << "the submit path never completed without hitting the injected failure";
  EXPECT_GT(ok, 0);
  std::printf("submit path: %ld allocation points, %d refused with FL_ERR_NO_MEMORY, %d succeeded\n", n, refused, ok);
  for (auto* o : {a, b, c}) EXPECT_FL_OK(fl_object_release(o));
  EXPECT_FL_OK(fl_engine_destroy(e));
}

TEST(AllocationFailure, ObjectCreationAndTaskGraphsFailCleanly) {
  flguard::HangGuard guard("allocation-failure injection on object and graph creation");
  fl_engine_t* e = flguard::make_engine(2, 4);
  ASSERT_NE(e, nullptr);
  long n = 0;
  for (; n < 2000; ++n) {
    fl_object_t* o = nullptr;
    fl_taskgraph_t* g = nullptr;
    uint64_t node = 0;
    fl_status_t so, sg = FL_OK, sa = FL_OK, sr = FL_OK;
    bool hit;
    {
      Armed armed(n);
      so = fl_object_create(e, nullptr, nullptr, &o);
      if (so == FL_OK) sg = fl_taskgraph_create(e, &g);
      if (so == FL_OK && sg == FL_OK) sa = fl_taskgraph_add(g, [](void*) { return FL_OK; }, nullptr, "task", &node);
      if (so == FL_OK && sg == FL_OK && sa == FL_OK) sr = fl_taskgraph_run(g, -1);
      hit = armed.hit();
    }
    for (fl_status_t st : {so, sg, sa, sr})
      EXPECT_TRUE(st == FL_OK || st == FL_ERR_NO_MEMORY) << "allocation #" << n << ": " << fl_status_name(st);
    if (so == FL_OK) {
      EXPECT_EQ(o != nullptr, true);
      std::atomic<int> ran{0};
      fltest::submit(flguard::host_stream(e, 1), [&] { ran = 1; return FL_OK; }, {fltest::W(o)});
      EXPECT_FL_OK(fl_object_wait(o, FL_READ));
      EXPECT_EQ(ran.load(), 1);
      EXPECT_FL_OK(fl_object_release(o));
    }
    if (g != nullptr) {
      EXPECT_FL_OK(fl_taskgraph_run(g, -1));  // a failed add or run leaves a usable graph
      EXPECT_FL_OK(fl_taskgraph_destroy(g));
    }
    if (!hit) break;
  }
  EXPECT_LT(n, 2000);
  std::printf("object and graph creation: %ld allocation points\n", n);
  EXPECT_FL_OK(fl_engine_synchronize(e));
  EXPECT_FL_OK(fl_engine_destroy(e));
}

// The C++ task graph (flowlane.hpp): an add that fails, wherever its allocation fails,
// leaves no node behind, in the C graph or in the wrapper; the nodes that were added all run.
TEST(AllocationFailure, CppTaskGraphAddsANodeOrNothing) {
  flguard::HangGuard guard("allocation-failure injection on taskgraph::add");
  flowlane::engine e([] {
    flowlane::engine_options o;
    o.workers = 2;
    return o;
  }());
  long n = 0;
  for (; n < 2000; ++n) {
    flowlane::taskgraph g = e.make_taskgraph();
    std::atomic<int> ran{0};
    int added = 0;
    for (; added < 8; ++added) g.add([&] { ran.fetch_add(1); });  // the vector's capacity is 8
    bool hit, refused = false;
    {
      Armed armed(n);
      try {
        g.add([&] { ran.fetch_add(1); }, "injected");
        ++added;
      } catch (const std::bad_alloc&) {
        refused = true;
      } catch (const flowlane::error& x) {
        refused = true;
        EXPECT_EQ(x.status(), FL_ERR_NO_MEMORY) << x.what();
      }
      hit = armed.hit();
    }
    EXPECT_EQ(refused, hit && added == 8) << "allocation #" << n;
    g.run(2);
    EXPECT_EQ(ran.load(), added) << "allocation #" << n << ": a refused node ran, or an added one did not";
    if (!hit) break;
  }
  EXPECT_LT(n, 2000);
  std::printf("taskgraph::add: %ld allocation points\n", n);
}
