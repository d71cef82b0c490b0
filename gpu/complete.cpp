// Completion in stream order by whoever is there (gpu/complete.hpp; gpu/README.md,
// "Completion").
#if FLOWLANE_HAVE_CUDA  // (gpu/complete.hpp needs the CUDA headers: nothing here without them)

#include "gpu/complete.hpp"

#include <mutex>
#include <string>

#include "gpu/hops.hpp"
#include "gpu/poller.hpp"
#include "gpu/value_edges.hpp"

namespace flowlane::gpu {

namespace {

// The event that tells whether `i` (queued) has completed: its own, or the one recorded
// after it on the same stream (DeviceRecord::cover).
cudaEvent_t completion_event(Instr* i) {
  DeviceRecord& r = record_of(i);
  return r.event != nullptr ? r.event : record_of(r.cover).event;
}

Instr* front(StreamState* ss) {
  std::lock_guard<SpinLock> lock(ss->fifo_lock);
  return ss->launched.empty() ? nullptr : ss->launched.front();
}

void pop_front(StreamState* ss) {
  std::lock_guard<SpinLock> lock(ss->fifo_lock);
  ss->launched.pop_front();
  ss->queued.fetch_sub(1, std::memory_order_relaxed);  // a hint (see StreamState)
}

// Whether `who` may complete `i` now: user code runs only on the poller, and a value
// edge's consumer waits for its producers' completion.
bool may_complete(Instr* i, Completer who) {
  const DeviceRecord& r = record_of(i);
  if (r.needs_poller && who != Completer::kPoller) return false;
  return !r.check_preds || preds_completed(i);
}

// Completes `i`, whose GPU work finished with `r` (`detail`: CUDA's message for an error).
void finish(core::Engine* e, StreamState* ss, Instr* i, cudaError_t r, const std::string& detail, Completer who,
            int64_t t_seen) {
  DeviceRecord& rec = record_of(i);
  const bool heavy = rec.needs_poller;
  HopTimes hop;
  if (hops_on()) hop = hop_times(i, rec, t_seen);
  core::Executor& run = e->executor();
  if (rec.deferred) {
    run.complete_async(i, FL_OK, std::string());  // its outcome was decided at issue
  } else if (r == cudaSuccess && rec.hook != nullptr) {
    std::string why;  // e.g. an NCCL collective cut short by an abort completes on the GPU too
    fl_status_t st = rec.hook(i, &why);
    run.complete_async(i, st, why);
  } else if (r == cudaSuccess && rec.check_preds) {
    if (const Instr* p = poisoned_pred(i))
      run.complete_async_poisoned(i, p);  // its kernel ran on a poisoned input: skipped
    else
      run.complete_async(i, FL_OK, std::string());
  } else {
    run.complete_async(i, r == cudaSuccess ? FL_OK : FL_ERR_CUDA, detail);
  }
  // i may be recycled from here on.
  if (heavy) ss->heavy.fetch_sub(1, std::memory_order_relaxed);  // a hint, as `queued`
  // release pairs with the acquire load in defer_completion: i's completion first.
  ss->inflight.fetch_sub(1, std::memory_order_release);
  count_completion(ss->poller, who);
  if (hops_on()) hop_done(hop, who);
}

}  // namespace

bool needs_poller(Instr* i) {
  if (i->cleanup != nullptr || record_of(i).hook != nullptr) return true;
  for (const core::Operand& op : i->operands)
    if (op.obj->release != nullptr) return true;  // its last reference may be this completion's
  return false;
}

void append_run(StreamState* ss, Instr* const* run, size_t n) {
  uint64_t heavy = 0;
  for (size_t k = 0; k < n; ++k) {
    DeviceRecord& r = record_of(run[k]);
    r.needs_poller = needs_poller(run[k]);
    heavy += r.needs_poller ? 1 : 0;
  }
  {
    std::lock_guard<SpinLock> lock(ss->fifo_lock);
    ss->launched.insert(ss->launched.end(), run, run + n);
  }
  // seq_cst: the counts are read by the poller after it clears `registered` and by
  // lane_leave after it clears `watched` (store-load pairs, see StreamState).
  if (heavy != 0) ss->heavy.fetch_add(heavy, std::memory_order_seq_cst);
  ss->queued.fetch_add(n, std::memory_order_seq_cst);
}

bool complete_ready(StreamState* ss, Completer who) {
  // acquire pairs with append_run's seq_cst increment; a hint only: what is queued is read
  // under fifo_lock.
  if (ss->queued.load(std::memory_order_acquire) == 0) return false;
  if (!ss->completing.try_lock()) return false;  // somebody else completes this stream now
  core::Engine* e = ss->stream->engine;
  bool progress = false;
  for (bool more = true; more;) {
    Instr* head = front(ss);
    if (head == nullptr || !may_complete(head, who)) break;
    // The head and the instructions up to its covering event complete together.
    cudaError_t r = cu().cudaEventQuery(completion_event(head));
    count_query(ss->poller, who);
    if (r == cudaErrorNotReady) {
      (void)cu().cudaGetLastError();  // the runtime also keeps it as this thread's last error
      break;
    }
    const int64_t t_seen = hops_on() ? hop_now() : 0;
    std::string detail;
    if (r != cudaSuccess) {
      (void)cu().cudaGetLastError();  // a sticky error stays; a non-sticky one is reported once
      detail = cuda_message(r, "the GPU work (asynchronous fault, seen by cudaEventQuery on the event recorded "
                               "after this instruction's run of its stream)") +
               note_fault(ss->device, r, head);
    }
    for (;;) {
      Instr* i = front(ss);
      const bool owner = record_of(i).event != nullptr;  // read before completion may recycle i
      pop_front(ss);
      finish(e, ss, i, r, detail, who, t_seen);
      progress = true;
      if (owner) break;
      // The rest of the run: the same event answers for it next time.
      if (!may_complete(front(ss), who)) {
        more = false;
        break;
      }
    }
  }
  ss->completing.unlock();
  return progress;
}

void lane_watch(StreamState* ss) {
  // seq_cst: a store-load pair with the poller, which clears `registered` and then loads
  // `watched` (Poller::keep): it drops the stream, or it still sees the stream unwatched
  // and completes it too, under the try-lock.
  ss->watched.store(true, std::memory_order_seq_cst);
}

void lane_leave(StreamState* ss) {
  // seq_cst store, then load: a store-load pair with Poller::keep (clear `registered`,
  // then load `queued` and `watched`): either the poller sees `watched` cleared when it
  // drops the stream (and keeps it), or this load sees what is queued and hands it over.
  ss->watched.store(false, std::memory_order_seq_cst);
  if (ss->queued.load(std::memory_order_seq_cst) != 0) hand_to_poller(ss);  // the load half of that store-load pair
}

bool help_complete(core::Engine* e, core::Stream* s) {
  // acquire pairs with the release store in poller_of(): no poller, no device work yet.
  Poller* p = static_cast<Poller*>(e->device_state.load(std::memory_order_acquire));
  if (p == nullptr || !settings_of(p).waiter_completes) return false;
  auto help_one = [](StreamState* ss) {
    // seq_cst is not needed here: a stale view only makes this thread skip or try in vain.
    if (ss == nullptr || ss->queued.load(std::memory_order_relaxed) == 0 ||
        ss->watched.load(std::memory_order_relaxed))
      return false;
    return complete_ready(ss, Completer::kWaiter);
  };
  // The caller's own pending CUDA error is not ours to clear (queries that find work not
  // ready leave cudaErrorNotReady, which complete_ready consumes): leave it all to the poller.
  auto peek = cu_optional().cudaPeekAtLastError;
  if (peek == nullptr || peek() != cudaSuccess) return false;
  if (s != nullptr && !s->is_host_executed()) return help_one(state_of(s));
  bool progress = false;
  for (StreamState* ss = all_streams(p); ss != nullptr; ss = ss->next_of_engine) progress |= help_one(ss);
  return progress;
}

}  // namespace flowlane::gpu

#endif  // FLOWLANE_HAVE_CUDA
