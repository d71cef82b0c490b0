// The CUDA DeviceBackend: streams, the event pool, issuing an instruction on the lane
// runner, and covering a run of launches with one event (gpu/README.md, "Events"). The
// poller that completes them is in gpu/poller.cpp. In a CPU-only build only the trivial
// answers at the end are compiled.
#include "gpu/backend.hpp"

#if FLOWLANE_HAVE_CUDA

#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

#include "gpu/complete.hpp"
#include "gpu/cuda.hpp"
#include "gpu/hops.hpp"
#include "gpu/poller.hpp"
#include "gpu/value_edges.hpp"

namespace flowlane::gpu {

using core::InstrState;

namespace {

// At most this many instructions of one CUDA stream are launched before an event is
// recorded after them: one cudaEventRecord per run instead of one per instruction, and a
// bound on how late a successor that arrived after a launch learns about it.
constexpr size_t kMaxUncovered = 8;

// The backend's state of one lane (core::Lane::device_state). Lane runner only.
struct LaneState {
  // The instructions this lane launched on one CUDA stream since that stream last
  // recorded an event, in launch order.
  std::vector<Instr*> run;
  // Instructions of this lane that were skipped, cancelled or failed at issue and whose
  // completion was deferred (defer_completion), each with a reference: until they
  // complete, a later reader on this lane (lane order, no edge) sees their poison here.
  std::vector<Instr*> deferred;
  // The stream this lane goes on launching on and completes itself between launches
  // (gpu/complete.hpp, lane_watch), or null. Set only by a flush that stays, so the
  // engine's `unflushed` is set meanwhile and the lane flushes (leaving) before it leaves.
  StreamState* watching = nullptr;
};

LaneState& lane_state(core::Lane* lane) {
  if (lane->device_state == nullptr) lane->device_state = new LaneState();
  return *static_cast<LaneState*>(lane->device_state);
}

std::vector<Instr*>& run_of(core::Lane* lane) { return lane_state(lane).run; }

// Drops the deferred instructions that have completed (poisoned_input sees them now).
void prune_deferred(LaneState& ls) {
  size_t out = 0;
  for (Instr* x : ls.deferred) {
    // acquire pairs with complete()'s store of the final state.
    if (core::is_terminal(x->load_state(std::memory_order_acquire))) {
      if (x->unref()) x->engine->recycle(x);
    } else {
      ls.deferred[out++] = x;
    }
  }
  ls.deferred.resize(out);
}

// Records the event covering the lane's run and queues the run on its stream for
// completion (gpu/complete.hpp).
void cover(core::Lane* lane) {
  std::vector<Instr*>& run = run_of(lane);
  if (run.empty()) return;
  Instr* last = run.back();
  core::Engine* e = last->engine;
  StreamState* ss = state_of(last->stream);
  cudaEvent_t ev = nullptr;
  cudaError_t r = make_current(ss->device);  // a device function may have switched devices
  const char* call = "cudaSetDevice";
  if (r == cudaSuccess) {
    call = "cudaEventCreateWithFlags";
    r = event_get(ss->poller, ss->device, &ev);
  }
  if (r == cudaSuccess) {
    call = "cudaEventRecord";
    r = cu().cudaEventRecord(ev, ss->cs);
    if (r != cudaSuccess) event_put(ss->poller, ss->device, ev);
  }
  if (r != cudaSuccess) {
    (void)cu().cudaGetLastError();  // not to be blamed on the next launch of this thread
    // The work is on the GPU but its completion can never be observed (a broken context):
    // fail the run, naming CUDA's error, rather than wait forever.
    // A fault of this run's own kernels is the likeliest cause: noted as the first one
    // unless an earlier fault was.
    std::string detail = cuda_message(r, call) + note_fault(ss->device, r, run.front());
    std::vector<Instr*> failed;
    failed.swap(run);
    for (Instr* x : failed) {
      const bool deferred = record_of(x).deferred;  // its outcome stands
      e->executor().complete_async(x, deferred ? FL_OK : FL_ERR_CUDA, deferred ? std::string() : detail);
      ss->inflight.fetch_sub(1, std::memory_order_release);  // pairs with defer_completion's acquire
    }
    return;
  }
  record_of(last).event = ev;
  const int64_t t = hops_on() ? hop_now() : 0;
  for (Instr* x : run) {
    DeviceRecord& xr = record_of(x);
    if (x != last) {
      last->ref();  // dropped when x is recycled
      xr.cover = last;
    }
    xr.t_covered = t;
    // A deferred one (skipped or failed) is never kIssued: its successors wait for its
    // completion and then see its outcome.
    if (!xr.deferred) e->executor().mark_issued(x);
  }
  append_run(ss, run.data(), run.size());  // anyone may complete and recycle them from here on
  run.clear();
}

// The lane stops watching the stream it launched on: the poller takes what is queued.
void leave(LaneState& ls) {
  if (ls.watching == nullptr) return;
  lane_leave(ls.watching);
  ls.watching = nullptr;
}

// True when `i` has a successor that waits for its issue (an edge holding one of its units;
// a value edge's entry does not wait).
bool issue_successor_waits(const Instr* i) {
  // acquire: pairs with the release CAS in push_edge() (the entries are read).
  for (const core::Edge* e = i->issue_succ_head.load(std::memory_order_acquire); e != nullptr; e = e->next)
    if (e->holds_unit) return true;
  return false;
}

void free_record(void* p) { delete static_cast<DeviceRecord*>(p); }

// The first instruction whose GPU work faulted with an error that breaks the CUDA context
// (an illegal address and the like: every later call of the process on that device fails
// with it), per device, so that later failures name it rather than blame themselves.
struct FaultLedger {
  std::mutex mu;
  std::vector<std::string> first;  // per device: "instruction 'x' (#id, ...)" or empty
};
FaultLedger& fault_ledger() {
  static FaultLedger* l = new FaultLedger();  // never destroyed: pollers may outlive statics
  return *l;
}

class CudaBackend final : public core::DeviceBackend {
 public:
  int device_count() override { return gpu::device_count(); }

  void stream_created(core::Stream* s) override {
    auto* ss = new StreamState();
    ss->stream = s;
    ss->device = s->device.index;
    ss->poller = poller_of(s->engine);
    stream_attached(ss->poller);
    value_stream_created(ss);
    stream_listed(ss->poller, ss);  // waiting threads may look at it from here on
    s->device_state = ss;
  }

  void stream_destroyed(core::Stream* s) override {
    StreamState* ss = state_of(s);
    if (ss == nullptr) return;
    value_stream_destroyed(ss);
    if (ss->cs != nullptr) release_cuda_stream(ss->poller, ss->device, ss->cs);  // drained: nothing pending
    stream_detached(ss->poller);  // the last one frees the engine's poller and its pools
    delete ss;
    s->device_state = nullptr;
  }

  fl_status_t issue(Instr* i, bool* flush_now) override {
    core::Stream* s = i->stream;
    StreamState* ss = state_of(s);
    DeviceRecord& rec = record_of(i);
    if (hops_on()) rec.t_issue = hop_now();
    const int dev = ss->device;
    cudaError_t r = make_current(dev);
    if (r != cudaSuccess) {
      i->error = cuda_message(r, "cudaSetDevice");
      return r == cudaErrorInvalidDevice || r == cudaErrorNoDevice ? FL_ERR_NO_DEVICE : FL_ERR_CUDA;
    }
    if (ss->cs == nullptr) {
      r = acquire_cuda_stream(ss->poller, dev, uint32_t(s->kind), ss->priority, &ss->cs);
      if (r != cudaSuccess) {
        ss->cs = nullptr;
        (void)cu().cudaGetLastError();
        i->error = cuda_message(r, "cudaStreamCreateWithPriority");
        return FL_ERR_CUDA;
      }
    }
    // Cross-stream device predecessors: ordered on the GPU (their events, or values), never
    // by a host wait (gpu/value_edges.hpp).
    if (order_after_preds(ss, i) != cudaSuccess) {
      (void)cu().cudaGetLastError();
      return FL_ERR_CUDA;
    }
    LaneState& ls = lane_state(s->lane);
    fl_status_t st;
    if (internal_launch(i->fn)) {
      // A kernel or a copy: the launch call's own status is checked and consumed by the
      // launch function, so the thread's last error is neither cleared before nor read after.
      st = i->fn(reinterpret_cast<fl_instr_ctx_t*>(i), i->user_data);
    } else {
      // User code (a device function) or a collective may block or wait: the lane stops
      // watching its stream first. This thread's last CUDA error belongs to whoever left it
      // (a user callback's cudaStreamQuery, an earlier failure): cleared before, checked
      // after the launch.
      leave(ls);
      (void)cu().cudaGetLastError();
      st = i->fn(reinterpret_cast<fl_instr_ctx_t*>(i), i->user_data);
      cudaError_t last = cu().cudaGetLastError();
      if (st == FL_OK && last != cudaSuccess) {
        if (i->error.empty()) i->error = cuda_message(last, "the launch") + note_fault(dev, last, i);
        st = FL_ERR_CUDA;
      }
    }
    if (st != FL_OK) return st;
    if (after_launch(ss, i) != cudaSuccess) {
      rec.may_enqueue = true;  // its work is enqueued: its failure completes after an event
      return FL_ERR_CUDA;
    }
    if (hops_on()) rec.t_launched = hop_now();
    ss->inflight.fetch_add(1, std::memory_order_relaxed);  // lane runner only; see StreamState
    // On its CUDA stream. It becomes kIssued once an event is recorded after it: at once
    // when a cross-stream successor already waits for its issue, else with a later
    // instruction of the run.
    std::vector<Instr*>& run = ls.run;
    if (!run.empty() && run.back()->stream != s) cover(s->lane);  // one stream per run
    run.push_back(i);
    // With value edges, every instruction gets its own event (gpu/value_edges.hpp: an event
    // covering later launches could make a wait for this one wait for work that waits, by
    // value, for that very wait).
    *flush_now = run.size() >= kMaxUncovered || settings_of(ss->poller).value_edges || issue_successor_waits(i);
    return FL_OK;
  }

  bool defer_completion(Instr* i) override {
    StreamState* ss = state_of(i->stream);
    DeviceRecord& rec = record_of(i);
    if (ss == nullptr) return false;
    // A value edge's consumer waits for i's value: written all the same, in stream order,
    // and i completes after that write.
    const bool may_enqueue = release(ss, i) || rec.may_enqueue;
    rec.may_enqueue = false;
    if (ss->cs == nullptr) return false;  // nothing was ever issued on its stream
    // acquire pairs with the poller's release decrement: 0 means every earlier instruction
    // of the stream has completed, so completing i now keeps stream order.
    if (!may_enqueue && ss->inflight.load(std::memory_order_acquire) == 0) return false;
    rec.deferred = true;
    ss->inflight.fetch_add(1, std::memory_order_relaxed);
    core::Lane* lane = i->stream->lane;
    LaneState& ls = lane_state(lane);
    prune_deferred(ls);
    i->ref();  // dropped by prune_deferred once i completed
    ls.deferred.push_back(i);
    std::vector<Instr*>& run = ls.run;
    if (!run.empty() && run.back()->stream != i->stream) cover(lane);  // one stream per run
    run.push_back(i);
    cover(lane);  // an event after everything before it (and its own leftovers): rare path
    if (ls.watching != state_of(i->stream)) hand_to_poller(state_of(i->stream));
    return true;
  }

  Instr* deferred_poison(const Instr* i) override {
    core::Lane* lane = i->stream->lane;
    if (lane->device_state == nullptr) return nullptr;
    LaneState& ls = lane_state(lane);
    if (ls.deferred.empty()) return nullptr;
    prune_deferred(ls);
    for (const Instr::Dep& d : i->deps) {
      if ((d.flags & Instr::Dep::kReads) == 0) continue;
      for (Instr* x : ls.deferred)
        if (x == d.pred) return x;  // referenced: never a recycled record
    }
    return nullptr;
  }

  void flush(core::Lane* lane, bool leaving) override {
    LaneState& ls = lane_state(lane);
    StreamState* ss = ls.run.empty() ? nullptr : state_of(ls.run.back()->stream);
    cover(lane);
    if (ss == nullptr) ss = ls.watching;
    if (ss == nullptr) return;
    if (leaving || !settings_of(ss->poller).lane_completes) {
      // Queries of work just launched would find it running: the poller (or a waiting
      // thread) takes it from here.
      if (ls.watching != nullptr && ls.watching != ss) leave(ls);
      ls.watching = ss;
      leave(ls);
      return;
    }
    // The lane goes on launching on ss: it completes what has finished there itself, and
    // the poller keeps out of the driver for it — unless something queued runs user code.
    if (ls.watching != ss) {
      leave(ls);
      ls.watching = ss;
      lane_watch(ss);
    }
    // acquire pairs with append_run's seq_cst increment (a hint: the count is exact under fifo_lock).
    if (ss->heavy.load(std::memory_order_acquire) != 0) hand_to_poller(ss);
    // Between launches, about once per kMaxUncovered of them: a query finds most of it done
    // on a launch-bound stream, and costs the launches little.
    if (ss->queued.load(std::memory_order_relaxed) >= kMaxUncovered) (void)complete_ready(ss, Completer::kLane);
  }

  bool help(core::Engine* e, core::Stream* s) override { return help_complete(e, s); }

  bool value_edge(Instr* pred, Instr* succ) override { return gpu::value_edge(pred, succ); }

  void engine_stopped(core::Engine* e) override {
    stop_poller(e);
    for (const auto& lane : e->lanes()) {
      auto* ls = static_cast<LaneState*>(lane->device_state);
      if (ls == nullptr) continue;
      prune_deferred(*ls);  // drained: every one has completed
      delete ls;
      lane->device_state = nullptr;
    }
  }

  void recycle(Instr* i) override {
    auto* rec = static_cast<DeviceRecord*>(i->device);
    rec->hook = nullptr;
    rec->deferred = false;
    rec->may_enqueue = false;
    rec->needs_poller = false;
    rec->check_preds = false;
    rec->value_gate.store(DeviceRecord::kValueOpen, std::memory_order_relaxed);  // nobody else holds it now
    rec->t_submit = rec->t_issue = rec->t_launched = rec->t_covered = 0;
    if (rec->event != nullptr) {  // every dependent that could wait on it has completed
      StreamState* ss = state_of(i->stream);
      event_put(ss->poller, ss->device, rec->event);
      rec->event = nullptr;
    }
    if (Instr* c = rec->cover) {
      rec->cover = nullptr;
      if (c->unref()) c->engine->recycle(c);
    }
  }
};

}  // namespace

DeviceRecord& record_of(Instr* i) {
  if (i->device == nullptr) {
    i->device = new DeviceRecord();
    i->device_free = &free_record;
  }
  return *static_cast<DeviceRecord*>(i->device);
}

std::string cuda_message(cudaError_t e, const char* call) {
  return std::string("CUDA error ") + cu().cudaGetErrorName(e) + " (" + cu().cudaGetErrorString(e) + ") from " + call;
}

core::DeviceBackend* backend() {
  // Null where the CUDA runtime cannot be loaded (gpu/runtime.hpp): engines then have no
  // device streams, and the C API's CUDA calls answer FL_ERR_UNSUPPORTED with the reason.
  static CudaBackend* b = cuda_loaded() ? new CudaBackend() : nullptr;  // never destroyed
  return b;
}

std::string unavailable(const char* fn) {
  if (cuda_loaded()) return std::string();
  return std::string(fn) + ": the CUDA backend is not available: " + cuda_unavailable();
}

int device_count() {
  static const int n = [] {
    if (!cuda_loaded()) return 0;
    int count = 0;
    if (cu().cudaGetDeviceCount(&count) != cudaSuccess) {
      (void)cu().cudaGetLastError();  // clear the (non-sticky) error: no driver or no device
      count = 0;
    }
    return count;
  }();
  return n;
}

void on_completion(Instr* i, CompletionHook hook) { record_of(i).hook = hook; }

bool breaks_context(cudaError_t r) {
  switch (r) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

std::string note_fault(int device, cudaError_t r, Instr* i) {
  if (!breaks_context(r)) return std::string();
  FaultLedger& l = fault_ledger();
  std::lock_guard<std::mutex> lock(l.mu);
  if (device < 0) device = 0;
  if (l.first.size() <= size_t(device)) l.first.resize(size_t(device) + 1);
  if (l.first[size_t(device)].empty()) {
    l.first[size_t(device)] = i->describe();
    return std::string();  // the first: its own fault
  }
  return "; the CUDA context of device " + std::to_string(device) +
         " was broken by an earlier fault in instruction " + l.first[size_t(device)];
}


void* cuda_stream(core::Stream* s) { return state_of(s)->cs; }

}  // namespace flowlane::gpu

#else  // CPU-only build: no CUDA stream can exist.

namespace flowlane::gpu {
core::DeviceBackend* backend() { return nullptr; }
std::string unavailable(const char* fn) {
  return std::string(fn) + ": this libflowlane was built without CUDA (FLOWLANE_WITH_CUDA=OFF or no toolkit at "
                           "build time)";
}
int device_count() { return 0; }
void on_completion(core::Instr*, CompletionHook) {}
void* cuda_stream(core::Stream*) { return nullptr; }
}  // namespace flowlane::gpu

#endif
