// fl_parallel_for on the pool: dynamic claiming of fixed or guided ranges. See sched/parallel_for.hpp.
//
// The caller does not wait for helper tasks that have not started: a parked worker may take
// tens of microseconds (much more on a loaded machine) to wake up, and by then the caller
// may have run every chunk itself. So the shared state is on the heap, reference-counted by
// the caller and every helper, and the caller waits only until every chunk has been claimed
// (or the loop stopped) and no participant is inside a body:
//
//   done  <=>  (next >= chunks || stop) && active == 0
//
// A participant increments `active` before claiming and decrements it after its last
// chunk. All of these are seq_cst, so if the caller sees the loop done, a helper that
// enters later claims nothing (its claim returns >= chunks, or it sees stop) and runs no
// body; it only drops its reference.
#include "sched/parallel_for.hpp"

#include <algorithm>
#include <atomic>
#include <climits>
#include <memory>

#include "base/cpu.hpp"

namespace flowlane::sched {

namespace {

struct ForState;

struct Helper : Task {
  ForState* state = nullptr;
};

struct ForState {
  RangeFn body;
  void* user_data;
  const void* context;  // the caller's (current_context()): current while a helper runs bodies
  uint64_t begin;
  uint64_t end;
  uint64_t grain;   // fixed chunks: their size; guided: the smallest claim
  uint64_t chunks;  // fixed chunks: how many; guided: the number of indices
  uint64_t divisor = 0;  // guided (grain 0): a claim takes remaining / divisor; 0: fixed chunks
  alignas(64) std::atomic<uint64_t> next{0};  // fixed: the next unclaimed chunk; guided: index - begin
  std::atomic<bool> stop{false};               // a chunk failed: claim nothing more
  std::atomic<bool> failed{false};             // the first failure has been recorded
  ParallelForResult result;                    // written by the first failing chunk only
  alignas(64) std::atomic<uint32_t> active{0};  // participants between enter and leave
  std::atomic<uint32_t> wake{0};                // futex word: bumped when active drops to 0
  std::atomic<uint32_t> sleeping{0};            // the caller is (about to be) in futex_wait
  std::atomic<uint32_t> refs{1};                // the caller + every submitted helper
  std::unique_ptr<Helper[]> helpers;

  bool done() const {
    // seq_cst, see the header comment above: next pairs with claim(), stop with the store
    // in participate(), active with participate()'s fetch_add/fetch_sub (and store-load
    // with sleeping: block() stores it before calling us, participate() loads it after).
    bool finished = next.load(std::memory_order_seq_cst) >= chunks || stop.load(std::memory_order_seq_cst);
    return finished && active.load(std::memory_order_seq_cst) == 0;
  }

  // Claims the next range [lo, hi); false when every index has been claimed. Fixed chunks:
  // one fetch_add. Guided (grain 0): a CAS taking a share of what remains (remaining /
  // divisor, at least `grain`), so claims shrink towards the end and the participants
  // finish together even when one started late or ran slower. seq_cst: see the header
  // comment (a claim that sees the loop exhausted runs no body).
  bool claim(uint64_t& lo, uint64_t& hi) {
    if (divisor == 0) {
      // Pairs with the seq_cst load of next in done().
      uint64_t c = next.fetch_add(1, std::memory_order_seq_cst);
      if (c >= chunks) return false;
      lo = begin + c * grain;
      hi = end - lo > grain ? lo + grain : end;
      return true;
    }
    uint64_t at = next.load(std::memory_order_seq_cst);  // pairs with the claims of other participants
    for (;;) {
      if (at >= chunks) return false;
      uint64_t rest = chunks - at;
      uint64_t take = std::min(rest, std::max(grain, rest / divisor));
      // Pairs with the seq_cst load of next in done() and other participants' claims.
      if (next.compare_exchange_weak(at, at + take, std::memory_order_seq_cst, std::memory_order_seq_cst)) {
        lo = begin + at;
        hi = lo + take;
        return true;
      }
    }
  }

  // Claims and runs ranges until none is left or one failed.
  void participate() {
    // Pairs with the seq_cst load of active in done().
    active.fetch_add(1, std::memory_order_seq_cst);  // before any claim: see the header comment
    for (;;) {
      if (stop.load(std::memory_order_seq_cst)) break;  // pairs with the store of stop below
      uint64_t lo, hi;
      if (!claim(lo, hi)) break;
      fl_status_t st = body(lo, hi, user_data);
      if (st != FL_OK) {
        // The winner writes result; the caller reads it after seeing active == 0 (the
        // seq_cst decrement below orders it).
        if (!failed.exchange(true, std::memory_order_relaxed)) result = {st, lo, hi};
        stop.store(true, std::memory_order_seq_cst);  // pairs with the loads of stop above and in done()
        break;
      }
    }
    // Store-load (Dekker) pair with block(), described just below.
    if (active.fetch_sub(1, std::memory_order_seq_cst) == 1) {
      // Dekker pair with the caller's sleeping increment and its done() check: either it
      // sees active == 0, or we see it sleeping and wake it (the bump makes a futex_wait
      // that has not started yet return at once).
      wake.fetch_add(1, std::memory_order_seq_cst);  // pairs with the load of wake in block()
      // Pairs with the seq_cst store of sleeping in block() (the Dekker pair above).
      if (sleeping.load(std::memory_order_seq_cst) != 0) futex_wake(&wake, INT_MAX);
    }
  }

  void release() {
    // acq_rel: the last owner sees every other owner's accesses before freeing.
    // Pairs with the other owners' fetch_sub here.
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  static void run_helper(Task* t) {
    ForState* s = static_cast<Helper*>(t)->state;
    {
      // The caller's context is alive while any body runs: the caller waits until no
      // participant is inside one (a helper that starts later claims nothing).
      ContextScope context(s->context);
      s->participate();
    }
    s->release();
  }

  void wait() {
    if (Pool::current() == nullptr) {
      for (int i = 0; i < 256; ++i) {
        if (done()) return;
        cpu_relax();
      }
    }
    sched::wait([this] { return done(); }, [this](const Deadline&) { block(); });
  }

  void block() {
    // Store-load (Dekker) pair with participate(): we store sleeping, then load active in
    // done(); the last participant stores active, then loads sleeping.
    sleeping.store(1, std::memory_order_seq_cst);
    for (;;) {
      uint32_t w = wake.load(std::memory_order_seq_cst);  // pairs with the fetch_add of wake in participate()
      if (done()) break;
      futex_wait(&wake, w);
    }
    sleeping.store(0, std::memory_order_relaxed);
  }
};

// The loop without helpers: one chunk, or a one-worker pool.
ParallelForResult run_inline(uint64_t begin, uint64_t end, uint64_t grain, RangeFn body, void* user_data) {
  for (uint64_t lo = begin; lo < end;) {
    uint64_t hi = end - lo > grain ? lo + grain : end;
    fl_status_t st = body(lo, hi, user_data);
    if (st != FL_OK) return {st, lo, hi};
    lo = hi;
  }
  return {};
}

}  // namespace

uint64_t guided_min_claim(uint64_t count, unsigned workers) {
  uint64_t parts = uint64_t(std::max(1u, workers)) * 64;
  return std::max<uint64_t>(count / parts, 1);
}

ParallelForResult parallel_for(Pool& pool, uint64_t begin, uint64_t end, uint64_t grain, RangeFn body,
                               void* user_data) {
  if (begin >= end) return {};
  uint64_t count = end - begin;
  const bool guided = grain == 0;
  if (guided) grain = guided_min_claim(count, pool.size());
  uint64_t chunks = count / grain + (count % grain != 0);

  // The caller is always one of the participants (the C contract: "the calling thread
  // helps"), so at most size() threads run bodies: the caller and size() - 1 helpers.
  uint64_t helpers = std::min<uint64_t>(chunks, pool.size()) - 1;
  if (helpers == 0) return run_inline(begin, end, grain, body, user_data);

  auto* s = new ForState;
  s->body = body;
  s->user_data = user_data;
  s->context = current_context();
  s->begin = begin;
  s->end = end;
  s->grain = grain;
  s->chunks = guided ? count : chunks;
  s->divisor = guided ? 2 * (helpers + 1) : 0;
  s->helpers.reset(new Helper[helpers]);
  s->refs.store(uint32_t(helpers) + 1, std::memory_order_relaxed);
  for (uint64_t i = 0; i < helpers; ++i) {
    s->helpers[i].run = &ForState::run_helper;
    s->helpers[i].state = s;
    pool.submit(&s->helpers[i]);  // publishes the fields above
  }
  s->participate();
  s->wait();
  ParallelForResult r = s->result;
  s->release();
  return r;
}

}  // namespace flowlane::sched
