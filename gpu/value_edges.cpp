// Device edges by stream memory operations (gpu/value_edges.hpp; gpu/README.md, "Value edges").
#if FLOWLANE_HAVE_CUDA  // (gpu/value_edges.hpp needs the CUDA headers: nothing here without them)

#include "gpu/value_edges.hpp"

#include <cuda.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "base/env.hpp"
#include "gpu/hops.hpp"
#include "gpu/poller.hpp"

namespace flowlane::gpu {

namespace {

using core::InstrState;

// cuStreamWaitValue64 / cuStreamWriteValue64 (the v2 semantics of CUDA 12 and later).
using MemOpFn = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
struct MemOps {
  MemOpFn wait = nullptr;
  MemOpFn write = nullptr;
};

const MemOps& memops() {
  static const MemOps m = [] {
    MemOps out;
    const CudaOptionalApi& opt = cu_optional();
    if (opt.cudaGetDriverEntryPointByVersion == nullptr || opt.cudaHostGetDevicePointer == nullptr) return out;
    void* wait = nullptr;
    void* write = nullptr;
    cudaDriverEntryPointQueryResult st1 = cudaDriverEntryPointSymbolNotFound, st2 = cudaDriverEntryPointSymbolNotFound;
    if (opt.cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", &wait, 12000, cudaEnableDefault, &st1) != cudaSuccess ||
        opt.cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &write, 12000, cudaEnableDefault, &st2) != cudaSuccess ||
        st1 != cudaDriverEntryPointSuccess || st2 != cudaDriverEntryPointSuccess || wait == nullptr || write == nullptr) {
      (void)cu().cudaGetLastError();
      return out;
    }
    out.wait = reinterpret_cast<MemOpFn>(wait);
    out.write = reinterpret_cast<MemOpFn>(write);
    return out;
  }();
  return m;
}

// The hardware queues of a device (CUDA_DEVICE_MAX_CONNECTIONS; CUDA's default is 8).
int hw_queues() {
  static const int n = [] {
    const int64_t x = env_count("CUDA_DEVICE_MAX_CONNECTIONS", 0, 1024);
    return x > 0 ? int(x) : 8;
  }();
  return n;
}

// The process's value slots: per device, one slab of mapped pinned host memory (the host
// can read a slot, the GPU writes and waits on it), kSlots slots of 8 bytes, one per device
// stream state that has one. Never freed (like the event pools: engines may outlive
// statics). Under mu, except `streams`, read without it by value_edge().
constexpr int kSlots = 4096;
constexpr int kMaxDevices = 64;
struct Slab {
  uint64_t* host = nullptr;
  CUdeviceptr dev = 0;
  bool failed = false;
  std::vector<int> free;
  int next = 0;
};
struct Slabs {
  std::mutex mu;
  Slab dev[kMaxDevices];
  // Device stream states of every engine per device (the hardware-queue rule). seq_cst:
  // an edge recorded after a stream was created sees it (and Recorder takes ids acq_rel, so
  // an instruction of that stream with a smaller id than the edge's consumer was recorded
  // after the increment was visible: core/engine/deps.cpp).
  std::atomic<int> streams[kMaxDevices] = {};
};
Slabs& slabs() {
  static Slabs* s = new Slabs();
  return *s;
}

CUdeviceptr slot_dev(const StreamState* ss) {
  return slabs().dev[ss->device].dev + CUdeviceptr(ss->value_slot) * sizeof(uint64_t);
}
uint64_t* slot_host(const StreamState* ss) { return slabs().dev[ss->device].host + ss->value_slot; }

std::string memop_message(const char* call, CUresult r, const Instr* other) {
  return std::string("CUDA driver error ") + std::to_string(int(r)) + " from " + call +
         (other != nullptr ? " for " + other->describe() : std::string());
}

// The slab of `device`, allocated on first use (the caller's device is restored).
bool ensure_slab(int device) {
  Slab& s = slabs().dev[device];
  if (s.host != nullptr) return true;
  if (s.failed) return false;
  int saved = -1;
  (void)cu().cudaGetDevice(&saved);
  void* host = nullptr;
  void* dev = nullptr;
  bool ok = make_current(device) == cudaSuccess &&
            cu().cudaHostAlloc(&host, kSlots * sizeof(uint64_t), cudaHostAllocMapped | cudaHostAllocPortable) == cudaSuccess &&
            cu_optional().cudaHostGetDevicePointer(&dev, host, 0) == cudaSuccess;
  if (ok) {
    for (int k = 0; k < kSlots; ++k) static_cast<uint64_t*>(host)[k] = 0;
    s.dev = reinterpret_cast<CUdeviceptr>(dev);
    s.host = static_cast<uint64_t*>(host);
  } else {
    if (host != nullptr) (void)cu().cudaFreeHost(host);
    s.failed = true;
  }
  (void)cu().cudaGetLastError();
  if (saved >= 0 && saved != device) (void)cu().cudaSetDevice(saved);
  return ok;
}

bool collective(const StreamState* ss) { return ss->stream->kind == FL_STREAM_COLLECTIVE; }

// Whether an edge from a stream's instruction to another's may be a value edge (the rules
// of gpu/value_edges.hpp).
bool allowed(const StreamState* p, const StreamState* c) {
  if (memops().wait == nullptr || p->device != c->device || p->value_slot < 0 || collective(p) || collective(c))
    return false;
  // One CUDA stream per device stream (none shared: within every engine's budget) and one
  // hardware queue per CUDA stream. seq_cst: see Slabs::streams.
  const int queues = hw_queues();
  // seq_cst pairs with the increment in value_stream_created (see Slabs::streams).
  const int streams = slabs().streams[p->device].load(std::memory_order_seq_cst);
  return queues >= 2 && streams <= queues && streams <= cuda_stream_budget();
}

void write_value(StreamState* ss, uint64_t v, const char* call, std::string* error) {
  CUresult r = memops().write(ss->cs, slot_dev(ss), cuuint64_t(v), CU_STREAM_WRITE_VALUE_DEFAULT);
  if (r == CUDA_SUCCESS) return;
  (void)cu().cudaGetLastError();
  // The GPU write could not be enqueued: the host stores the value instead (whether that
  // releases a wait already on the GPU is the device's; the fake polls the slot). release
  // pairs with the device's (or the fake queue's) read of the slot.
  std::atomic_ref<uint64_t>(*slot_host(ss)).store(v, std::memory_order_release);
  if (error != nullptr) *error = memop_message(call, r, nullptr);
}

}  // namespace

bool memops_available() { return memops().wait != nullptr; }

void value_stream_created(StreamState* ss) {
  if (!settings_of(ss->poller).value_edges || ss->device < 0 || ss->device >= kMaxDevices) return;
  Slabs& s = slabs();
  s.streams[ss->device].fetch_add(1, std::memory_order_seq_cst);  // pairs with allowed()'s load (Slabs::streams)
  if (!memops_available()) return;
  std::lock_guard<std::mutex> lock(s.mu);
  if (!ensure_slab(ss->device)) return;
  Slab& slab = s.dev[ss->device];
  if (!slab.free.empty()) {
    ss->value_slot = slab.free.back();
    slab.free.pop_back();
  } else if (slab.next < kSlots) {
    ss->value_slot = slab.next++;
  }
}

void value_stream_destroyed(StreamState* ss) {
  if (!settings_of(ss->poller).value_edges || ss->device < 0 || ss->device >= kMaxDevices) return;
  Slabs& s = slabs();
  s.streams[ss->device].fetch_sub(1, std::memory_order_seq_cst);  // pairs with allowed()'s load
  if (ss->value_slot < 0) return;
  std::lock_guard<std::mutex> lock(s.mu);
  *slot_host(ss) = 0;  // drained: no wait on it is pending
  s.dev[ss->device].free.push_back(ss->value_slot);
  ss->value_slot = -1;
}

bool value_edge(Instr* pred, Instr* succ) {
  StreamState* p = state_of(pred->stream);
  if (!settings_of(p->poller).value_edges) return false;
  Counters& c = counters_of(p->poller);
  if (!allowed(p, state_of(succ->stream))) {
    count(c.value_fallbacks);
    return false;
  }
  // Ask pred's lane to write its value after launching it, unless it is past that point.
  // acq_rel on success and acquire on failure pair with the lane's exchange in
  // after_launch()/release(): either it sees `wanted`, or we see `closed`.
  DeviceRecord& r = record_of(pred);
  // acquire pairs with the lane's exchange in after_launch()/release().
  uint8_t g = r.value_gate.load(std::memory_order_acquire);
  while (g == DeviceRecord::kValueOpen &&
         !r.value_gate.compare_exchange_weak(g, DeviceRecord::kValueWanted, std::memory_order_acq_rel,
                                             std::memory_order_acquire)) {
  }
  if (g == DeviceRecord::kValueClosed) return false;  // launched already: its event will do
  count(c.value_edges);
  return true;
}

cudaError_t order_after_preds(StreamState* ss, Instr* i) {
  DeviceRecord& rec = record_of(i);
  rec.check_preds = false;
  for (const Instr::Dep& d : i->deps) {
    const bool reads = (d.flags & Instr::Dep::kReads) != 0;
    // acquire pairs with mark_issued's release store of kIssued (the predecessor's record,
    // its event and check_preds, was written before) and complete()'s store of its outcome.
    const InstrState st = d.pred->load_state(std::memory_order_acquire);
    if (core::is_terminal(st)) {  // completed: nothing to wait for
      // A value edge's producer may have completed failed (cancelled, skipped) after the lane
      // runner looked for poisoned inputs (Executor::execute_async) and before this load:
      // i is then skipped at completion (poisoned_pred), not completed as if it had run on a
      // valid input.
      if (reads && (st == InstrState::kFailed || st == InstrState::kSkipped)) rec.check_preds = true;
      continue;
    }
    // An input that may still turn out poisoned after its issue poisons i at completion.
    // (Its record is final once it is issued, or written by this lane runner before.)
    if (reads && (st == InstrState::kIssued || d.pred->stream->lane == i->stream->lane) &&
        record_of(d.pred).check_preds)
      rec.check_preds = true;
    if ((d.flags & Instr::Dep::kIssueWait) == 0) continue;  // same stream: stream order
    if (st == InstrState::kIssued) {
      // Ordered by its event on the GPU; the dep entry's reference keeps the predecessor,
      // and its reference keeps its cover, so the event stays ours while we wait on it.
      const DeviceRecord& pr = record_of(d.pred);
      cudaEvent_t ev = pr.event != nullptr ? pr.event : record_of(pr.cover).event;
      cudaError_t r = cu().cudaStreamWaitEvent(ss->cs, ev, 0);
      if (r != cudaSuccess) {
        i->error = cuda_message(r, "cudaStreamWaitEvent") + " waiting for " + d.pred->describe();
        return r;
      }
      continue;
    }
    // Not issued: issued by this very lane before (lane order; it was flushed before the
    // lane switched streams) or deferred, unless it is a value edge's producer.
    if ((d.flags & Instr::Dep::kValueWait) == 0) continue;
    const StreamState* ps = state_of(d.pred->stream);
    CUresult r = memops().wait(ss->cs, slot_dev(ps), cuuint64_t(d.pred->seq), CU_STREAM_WAIT_VALUE_GEQ);
    if (r != CUDA_SUCCESS) {
      (void)cu().cudaGetLastError();
      i->error = memop_message("cuStreamWaitValue64", r, d.pred);
      return cudaErrorUnknown;
    }
    count(counters_of(ss->poller).value_waits);
    rec.check_preds = true;  // its producer may still be skipped or fail at issue
  }
  return cudaSuccess;
}

cudaError_t after_launch(StreamState* ss, Instr* i) {
  if (!settings_of(ss->poller).value_edges) return cudaSuccess;
  // acq_rel: pairs with the consumers' CAS in value_edge().
  if (record_of(i).value_gate.exchange(DeviceRecord::kValueClosed, std::memory_order_acq_rel) !=
      DeviceRecord::kValueWanted)
    return cudaSuccess;
  count(counters_of(ss->poller).value_writes);
  std::string error;
  write_value(ss, i->seq, "cuStreamWriteValue64", &error);
  if (error.empty()) return cudaSuccess;
  i->error = error;
  return cudaErrorUnknown;
}

bool release(StreamState* ss, Instr* i) {
  if (!settings_of(ss->poller).value_edges) return false;
  // acq_rel: pairs with the consumers' CAS in value_edge().
  if (record_of(i).value_gate.exchange(DeviceRecord::kValueClosed, std::memory_order_acq_rel) !=
      DeviceRecord::kValueWanted)
    return false;
  count(counters_of(ss->poller).value_releases);
  if (make_current(ss->device) == cudaSuccess && ss->cs == nullptr &&
      acquire_cuda_stream(ss->poller, ss->device, uint32_t(ss->stream->kind), ss->priority, &ss->cs) != cudaSuccess)
    ss->cs = nullptr;
  (void)cu().cudaGetLastError();
  if (ss->cs != nullptr) {
    write_value(ss, i->seq, "cuStreamWriteValue64 (release)", nullptr);  // in stream order, after what came before
    return true;
  }
  // No CUDA stream for it: nothing of its stream was ever enqueued, so the host may store
  // it. release pairs with the device's (the fake queue's) read of the slot.
  std::atomic_ref<uint64_t>(*slot_host(ss)).store(i->seq, std::memory_order_release);
  return false;
}

bool preds_completed(Instr* i) {
  for (const Instr::Dep& d : i->deps) {
    if ((d.flags & Instr::Dep::kIssueWait) == 0) continue;  // same stream: completed before i
    // The end of its completion (Executor::complete stores last_completed_id last, after it
    // released its successor lists, which a value edge's entry lives in): acquire pairs
    // with that release store / CAS.
    if (d.pred->stream->last_completed_id.load(std::memory_order_acquire) < d.pred->id ||
        !core::is_terminal(d.pred->load_state(std::memory_order_acquire)))
      return false;
  }
  return true;
}

const Instr* poisoned_pred(Instr* i) {
  for (const Instr::Dep& d : i->deps) {
    if ((d.flags & Instr::Dep::kReads) == 0) continue;
    const InstrState st = d.pred->load_state(std::memory_order_acquire);  // pairs with complete()'s store
    if (st == InstrState::kFailed || st == InstrState::kSkipped) return d.pred;
  }
  return nullptr;
}

}  // namespace flowlane::gpu

#endif  // FLOWLANE_HAVE_CUDA
