// Cancel requests and fl_engine_drain (engine/cancel_drain.hpp).
#include "engine/cancel_drain.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/error.hpp"
#include "engine/engine.hpp"

namespace flowlane::core {

bool CancelDrain::requested_slow(Instr* i) {
  Lane* lane = i->stream->lane;
  // acquire: as in requested().
  // Pairs with the release CAS of cancel_upto in cancel_stream().
  bool hit = i->id <= i->stream->cancel_upto.load(std::memory_order_acquire);
  // Pairs with the release store of cancel_requests in cancel() (cancel_ids itself is read
  // under cancel_mu below).
  if (lane->cancel_requests.load(std::memory_order_acquire) != 0) {
    std::lock_guard<std::mutex> lock(lane->cancel_mu);
    auto& ids = lane->cancel_ids;  // sorted, no repeats (cancel())
    // Ids of a lane start in increasing order: a request below i's id is for an
    // instruction that has started already, and can never take effect.
    auto past = std::upper_bound(ids.begin(), ids.end(), i->id);
    if (past != ids.begin() && *(past - 1) == i->id) hit = true;
    ids.erase(ids.begin(), past);
    lane->cancel_requests.store(uint32_t(ids.size()), std::memory_order_relaxed);
  }
  if (hit) mark_cancelled(i);  // counted by Executor::complete(), after `failed`
  return hit;
}

void CancelDrain::cancel(Stream* s, fl_instr_id id) {
  s->check_submitted(id, "fl_instr_cancel");
  // Pairs with the release CAS of last_completed_id in Executor::complete().
  if (id <= s->last_completed_id.load(std::memory_order_acquire))
    fail(FL_ERR_INVALID_ARGUMENT, "fl_instr_cancel: instruction #" + std::to_string(id) + " of " + s->describe() +
                                      " has already completed");
  Lane* lane = s->lane;
  std::lock_guard<std::mutex> lock(lane->cancel_mu);
  // Sorted and without repeats: a caller that cancels the same id again and again (or
  // spins on fl_instr_cancel while the lane is busy) adds nothing, so the list stays
  // bounded by the lane's instructions not completed yet, and the runner's scan with it.
  auto& ids = lane->cancel_ids;
  auto at = std::lower_bound(ids.begin(), ids.end(), id);
  if (at != ids.end() && *at == id) return;
  ids.insert(at, id);
  // release pairs with the acquire load in requested().
  lane->cancel_requests.store(uint32_t(ids.size()), std::memory_order_release);
}

void CancelDrain::cancel_stream(Stream* s) {
  fl_instr_id upto = s->last_submitted_id.load(std::memory_order_acquire);  // pairs with the release in Engine::enqueue()
  fl_instr_id cur = s->cancel_upto.load(std::memory_order_relaxed);
  // release pairs with the acquire load in requested().
  while (cur < upto && !s->cancel_upto.compare_exchange_weak(cur, upto, std::memory_order_release,
                                                             std::memory_order_relaxed)) {
  }
}

void CancelDrain::cancel_all() {
  for (Stream* s : engine_.all_streams()) cancel_stream(s);
}

fl_status_t CancelDrain::drain(const Deadline& deadline) {
  if (in_engine_context(&engine_))
    fail(FL_ERR_INVALID_ARGUMENT, "fl_engine_drain called from code the engine runs: it would wait for itself");
  // Extensions watch the drain (diagnostics give up the callbacks' waits on a wait cycle,
  // which the drain would otherwise wait for forever), until it returns.
  struct Watched {
    std::vector<Extension*> xs;
    explicit Watched(const Engine* e) : xs(e->extensions()) {
      for (Extension* x : xs) x->begin_drain();
    }
    ~Watched() {
      for (Extension* x : xs) x->end_drain();
    }
  } watched(&engine_);
  // seq_cst: pairs with the acquire loads in Engine::submit() and, with the epoch bump of
  // refuse_parked() below, with a parked submitter's loads (Window::park).
  draining_.store(true, std::memory_order_seq_cst);
  // A submission parked on the full window is refused now, not once the window frees.
  engine_.window().refuse_parked();
  // An RMW of the window's admission count after that store, so that a submission from a
  // thread of the caller either sees draining_ after it was admitted (and is refused), or
  // its admission is seen by our loads below (and waited for): the two RMWs are ordered in
  // that counter's modification order (Window::fence_admissions() pairs with admit()).
  engine_.window().fence_admissions();
  // Pairs with the seq_cst fence in begin_outside_spawn(): a task spawn from a thread of the
  // caller either sees draining_ after it was counted (and is refused), or its count is seen
  // by our loads below (and waited for).
  full_fence();
  // Callbacks may still submit (their work is part of what is drained) and task-group tasks
  // may still run and submit: wait in rounds until one finds no instruction in flight and
  // every pool idle. The rounds only wait: a failure is taken once, after the last round,
  // so a drain that times out has consumed nothing, and one that returns a failure leaves
  // the others to later waits (each is returned once, as by fl_engine_synchronize).
  for (;;) {
    if (fl_status_t st = engine_.waits().wait_submitted(deadline, "fl_engine_drain"); st != FL_OK) return st;
    // inflight() acquires the window's retirements: an instruction seen retired has
    // completed, and what it submitted was admitted (counted) before. A spawn from outside
    // counted here may not have reached its pool yet: wait for it. Acquire pairs with the
    // release decrement in end_outside_spawn(): a spawn seen ended has handed its task to
    // the pool, which pools_quiescent() then counts.
    if (engine_.inflight() == 0 && outside_spawns_.load(std::memory_order_acquire) == 0 && engine_.pools_quiescent())
      break;
    if (deadline.passed())
      return report(FL_ERR_TIMEOUT, "fl_engine_drain: timed out with work that callbacks submitted still running "
                                    "(nothing was returned or consumed: call it again)");
    if (engine_.inflight() == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  // Everything submitted has completed: the oldest family not returned yet, as a
  // synchronize called now would return it.
  return engine_.ledger().take_oldest();
}

bool CancelDrain::begin_outside_spawn() {
  outside_spawns_.fetch_add(1, std::memory_order_relaxed);
  // Pairs with the seq_cst fence after the store of draining_ in drain(): either the drain's
  // later load of outside_spawns_ sees this count (and waits for the task), or this load
  // sees draining_ (and the spawn is refused).
  full_fence();
  if (!draining_.load(std::memory_order_relaxed)) return true;
  end_outside_spawn();
  return false;
}

void CancelDrain::end_outside_spawn() {
  // release pairs with the acquire load in drain(): the task's hand-over to the pool (its
  // count there) happens before a drain that reads the spawn ended.
  outside_spawns_.fetch_sub(1, std::memory_order_release);
}

}  // namespace flowlane::core
