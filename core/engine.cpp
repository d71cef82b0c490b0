// Engine lifetime, lanes, interned streams, the in-flight window, synchronisation and the
// failure ledger.
#include "core/engine.hpp"

#include <algorithm>
#include <thread>

#include "core/error.hpp"
#include "core/handles.hpp"
#include "core/watchdog.hpp"
#include "gpu/backend.hpp"

namespace flowlane {
HandleTable<core::Stream>& stream_table();
HandleTable<core::Object>& object_table();
}

namespace flowlane::core {

// ---------------------------------------------------------------------------------------
// Streams

void Stream::advance_completed() {
  // seq_cst: everything the instruction did (cleanup, release callbacks, failure record)
  // happens-before a waiter that sees the count; and with the waiter's seq_cst store of
  // wake_at and load of completed (wait_completed) a store–load pattern: either the
  // waiter sees this count or we see its target.
  uint64_t now = completed.fetch_add(1, std::memory_order_seq_cst) + 1;
  if (now < wake_at.load(std::memory_order_seq_cst)) return;
  std::lock_guard<std::mutex> lock(wait_mu);
  auto it = targets.upper_bound(now);  // waiters still short of their target stay registered
  wake_at.store(it == targets.end() ? UINT64_MAX : *it, std::memory_order_seq_cst);
  wait_cv.notify_all();
}

void Stream::wait_completed(uint64_t target) {
  if (completed.load(std::memory_order_acquire) >= target) return;
  std::unique_lock<std::mutex> lock(wait_mu);
  auto it = targets.insert(target);
  if (target < wake_at.load(std::memory_order_relaxed)) wake_at.store(target, std::memory_order_seq_cst);
  while (completed.load(std::memory_order_seq_cst) < target) wait_cv.wait(lock);
  targets.erase(it);
}

std::string Stream::describe() const {
  static const char* kKinds[] = {"host", "compute", "h2d", "d2h", "collective"};
  std::string s = "lane " + std::to_string(lane ? lane->id : 0) + ", ";
  if (device.type == FL_DEVICE_CUDA) s += "cuda:" + std::to_string(device.index) + " ";
  s += kKinds[kind];
  return s;
}

// ---------------------------------------------------------------------------------------
// Engine

Engine::Engine(const fl_engine_desc_t& desc) {
  unsigned workers = desc.num_workers ? unsigned(desc.num_workers) : std::max(1u, std::thread::hardware_concurrency());
  uint32_t lanes = desc.max_lanes ? uint32_t(desc.max_lanes) : 8;
  inflight_limit_ = desc.inflight_limit ? desc.inflight_limit : 4096;
  pool_ = std::make_unique<Pool>(workers);
  lanes_.reserve(lanes);
  for (uint32_t l = 0; l < lanes; ++l) {
    auto lane = std::make_unique<Lane>();
    lane->engine = this;
    lane->id = l;
    lanes_.push_back(std::move(lane));
  }
  lane_held_.assign(lanes, false);
  lane_held_[0] = true;  // lane 0 is the default lane and is never handed out
  device_slots_ = 1 + uint32_t(gpu::device_count());  // slot 0: CPU; 1 + i: CUDA device i
  size_t nstreams = size_t(lanes) * device_slots_ * kStreamKinds;
  streams_ = std::make_unique<std::atomic<Stream*>[]>(nstreams);
  for (size_t k = 0; k < nstreams; ++k) streams_[k].store(nullptr, std::memory_order_relaxed);
  diag_ = diagnostics_create(this);  // watchdog, communicators, trace (FLOWLANE_TRACE)
}

Engine::~Engine() { shutdown(); }

void Engine::shutdown() {
  if (stopped_) return;
  stopped_ = true;
  drain_and_stop();
}

void Engine::drain_and_stop() {
  // 0. Diagnostics first: abort communicators (blocked collectives fail with
  //    FL_ERR_CANCELLED) and watch the drain for wait cycles (core/watchdog.hpp).
  diagnostics_begin_shutdown(this);
  // 1. Refuse new work. Passing through every lane's submit lock after raising the flag
  //    guarantees each submission either completed its queueing before or sees the flag.
  shutdown_.store(true, std::memory_order_release);  // pairs with acquire in submit()
  for (auto& lane : lanes_) {
    lane->submit_lock.lock();
    lane->submit_lock.unlock();
  }
  // 2. Drain. Errors are dropped here (synchronize first to see them).
  for (Stream* s : all_streams()) {
    uint64_t target = s->submitted.load(std::memory_order_acquire);
    wait_stream(s, target);
  }
  // 3. Wait for every lane task to finish its tail: the last instruction completing does
  //    not mean its lane has gone idle (it may still be popping or re-queueing itself).
  //    acquire pairs with the runner's seq_cst store of 0 in Lane::run_task().
  for (auto& lane : lanes_)
    while (lane->scheduled.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  diagnostics_end_shutdown(this);  // joins the watchdog thread, writes the trace
  // The GPU poller completed every launched instruction during the drain; stop it now.
  gpu::engine_stop(this);
  // 4. Join workers.
  {
    std::lock_guard<std::mutex> lock(pools_mu_);
    extra_pools_.clear();
  }
  pool_.reset();
  // 5. Run every pending release callback: objects the caller still holds.
  for (;;) {
    Object* o;
    {
      std::lock_guard<std::mutex> lock(objects_mu_);
      o = objects_head_;
    }
    if (o == nullptr) break;
    object_table().erase(o->handle);  // the caller's handle is stale from now on
    destroy_object(o);
  }
  {
    std::lock_guard<std::mutex> lock(failures_mu_);
    for (FailureRecord& f : failures_)
      if (f.instr->unref()) recycle(f.instr);
    failures_.clear();
  }
  size_t nstreams = size_t(lanes_.size()) * device_slots_ * kStreamKinds;
  for (size_t k = 0; k < nstreams; ++k) {
    Stream* s = streams_[k].load(std::memory_order_acquire);
    if (s == nullptr) continue;
    stream_table().erase(s->handle);
    gpu::stream_state_destroy(s);  // the CUDA stream, if one was created
    delete s;
  }
  diagnostics_destroy(diag_);
  diag_ = nullptr;
}

void Engine::set_observer(std::unique_ptr<Observer> o) {
  std::lock_guard<std::mutex> lock(observers_mu_);
  observer_.store(o.get(), std::memory_order_release);  // pairs with acquire in observer()
  observers_.push_back(std::move(o));
}

void Engine::clear_observer() { observer_.store(nullptr, std::memory_order_release); }

Pool& Engine::pool_for_threads(unsigned n) {
  if (n == 0 || n == pool_->size()) return *pool_;
  std::lock_guard<std::mutex> lock(pools_mu_);
  auto& p = extra_pools_[n];
  if (!p) p = std::make_unique<Pool>(n);
  return *p;
}

// ---------------------------------------------------------------------------------------
// Lanes

uint32_t Engine::acquire_lane() {
  std::lock_guard<std::mutex> lock(lanes_mu_);
  for (uint32_t l = 1; l < lane_held_.size(); ++l) {
    if (!lane_held_[l]) {
      lane_held_[l] = true;
      return l;
    }
  }
  fail(FL_ERR_EXHAUSTED, "fl_lane_acquire: all " + std::to_string(lane_held_.size() - 1) +
                             " acquirable lanes (1.." + std::to_string(lane_held_.size() - 1) +
                             ") are held; release one with fl_lane_release or create the engine with a larger max_lanes");
}

void Engine::release_lane(uint32_t l) {
  if (l >= lane_held_.size())
    fail(FL_ERR_OUT_OF_RANGE, "fl_lane_release: lane " + std::to_string(l) + " is out of range: this engine has " +
                                  std::to_string(lane_held_.size()) + " lanes");
  if (l == 0) fail(FL_ERR_INVALID_ARGUMENT, "fl_lane_release: lane 0 is the default lane and cannot be released");
  std::lock_guard<std::mutex> lock(lanes_mu_);
  if (!lane_held_[l])
    fail(FL_ERR_INVALID_ARGUMENT, "fl_lane_release: lane " + std::to_string(l) + " is not held (released twice?)");
  lane_held_[l] = false;
}

// ---------------------------------------------------------------------------------------
// Streams

Stream* Engine::stream(uint32_t l, fl_device_t device, fl_stream_kind_t kind) {
  uint32_t slot = device.type == FL_DEVICE_CPU ? 0 : 1 + uint32_t(device.index);
  size_t index = (size_t(l) * device_slots_ + slot) * kStreamKinds + uint32_t(kind);
  Stream* s = streams_[index].load(std::memory_order_acquire);  // pairs with release below
  if (s != nullptr) return s;
  std::lock_guard<std::mutex> lock(streams_mu_);
  s = streams_[index].load(std::memory_order_relaxed);
  if (s != nullptr) return s;
  auto fresh = std::make_unique<Stream>();
  fresh->engine = this;
  fresh->lane = lanes_[l].get();
  fresh->device = device;
  fresh->kind = kind;
  if (device.type == FL_DEVICE_CUDA) fresh->backend = gpu::stream_state_create(fresh.get());
  fresh->handle = stream_table().insert(fresh.get());
  if (fresh->handle == 0) fail(FL_ERR_NO_MEMORY, "fl_stream_get: the process-wide stream table is full");
  s = fresh.release();
  streams_[index].store(s, std::memory_order_release);  // publishes the initialised stream
  return s;
}

std::vector<Stream*> Engine::all_streams() const {
  std::vector<Stream*> out;
  size_t nstreams = size_t(lanes_.size()) * device_slots_ * kStreamKinds;
  for (size_t k = 0; k < nstreams; ++k)
    if (Stream* s = streams_[k].load(std::memory_order_acquire)) out.push_back(s);
  return out;
}

// ---------------------------------------------------------------------------------------
// Instructions and the window

Instr* Engine::new_instr() {
  Instr* i = InstrPool::get();
  i->engine = this;
  return i;
}

namespace {
FL_TLS thread_local const Engine* t_completion_engine = nullptr;
}  // namespace

void set_completion_thread(Engine* e) { t_completion_engine = e; }

void Engine::admit(bool nonblocking) {
  if (pool_->on_worker() || t_completion_engine == this) {
    // A callback submitting follow-up work is never blocked (it could be the very work
    // that must finish to open the window): admitted over the limit.
    inflight_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const int64_t limit = int64_t(inflight_limit_);
  int64_t cur = inflight_.load(std::memory_order_relaxed);
  for (;;) {
    if (cur < limit) {
      if (inflight_.compare_exchange_weak(cur, cur + 1, std::memory_order_relaxed)) return;
      continue;
    }
    if (nonblocking)
      fail(FL_ERR_WOULD_BLOCK, "the in-flight window is full (" + std::to_string(limit) +
                                   " instructions submitted and not completed); retry later or submit without "
                                   "FL_SUBMIT_NONBLOCKING to wait");
    window_stalls_.fetch_add(1, std::memory_order_relaxed);
    Observer* ob = observer();
    if (ob) ob->on_window_stall(true);
    // Sleep until the window has drained to its low-water mark, not just until one slot
    // frees: the completer wakes parked submitters once per crossing of the mark instead
    // of once per completion (see retire_window_slot()).
    const int64_t low = low_water();
    // seq_cst on both sides (here and in retire_window_slot) is a store–load pattern:
    // either the retiring thread sees us registered, or we see its decrement.
    window_waiters_.fetch_add(1, std::memory_order_seq_cst);
    cur = inflight_.load(std::memory_order_seq_cst);
    while (cur > low) {
      inflight_.wait(cur, std::memory_order_relaxed);
      cur = inflight_.load(std::memory_order_relaxed);
    }
    window_waiters_.fetch_sub(1, std::memory_order_relaxed);
    if (ob) ob->on_window_stall(false);
  }
}

int64_t Engine::low_water() const {
  const int64_t limit = int64_t(inflight_limit_);
  return limit - 1 - std::min<int64_t>(limit / 4, 256);
}

void Engine::retire_window_slot() {
  // To go from above the low-water mark to below it, the count must be decremented to
  // exactly the mark (it moves by one), so notifying on that transition alone never
  // strands a submitter parked above the mark.
  int64_t now = inflight_.fetch_sub(1, std::memory_order_seq_cst) - 1;
  if (now == low_water() && window_waiters_.load(std::memory_order_seq_cst) != 0) inflight_.notify_all();
}

// ---------------------------------------------------------------------------------------
// Waits and failures

void Engine::record_failure(Instr* i) {
  i->ref();
  std::lock_guard<std::mutex> lock(failures_mu_);
  failures_.push_back(FailureRecord{i});
}

fl_status_t Engine::collect_failure(const std::vector<std::pair<Stream*, uint64_t>>& upto) {
  Instr* first = nullptr;
  std::vector<Instr*> drop;
  {
    std::lock_guard<std::mutex> lock(failures_mu_);
    for (auto it = failures_.begin(); it != failures_.end();) {
      Instr* f = it->instr;
      if (f->reported.load(std::memory_order_relaxed)) {  // returned already: forget it
        drop.push_back(f);
        it = failures_.erase(it);
        continue;
      }
      bool covered = std::any_of(upto.begin(), upto.end(), [f](const auto& p) {
        return p.first == f->stream && f->seq <= p.second;
      });
      if (covered && (first == nullptr || f->id < first->id)) first = f;
      ++it;
    }
    if (first != nullptr) first->reported.store(true, std::memory_order_relaxed);
  }
  fl_status_t st = FL_OK;
  std::string msg;
  if (first != nullptr) {
    st = first->status;
    msg = first->error;
  }
  for (Instr* f : drop)
    if (f->unref()) recycle(f);
  if (st != FL_OK) return report(st, msg);
  return FL_OK;
}

void Engine::wait_stream(Stream* s, uint64_t target) {
  if (pool_->on_worker())
    pool_->help_until([s, target] { return s->completed.load(std::memory_order_acquire) >= target; });
  else
    s->wait_completed(target);
}

fl_status_t Engine::synchronize() {
  if (current_instr() != nullptr)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_engine_synchronize called from inside instruction " +
                                      current_instr()->describe() + ": it would wait for itself");
  std::vector<std::pair<Stream*, uint64_t>> upto;
  for (Stream* s : all_streams()) upto.emplace_back(s, s->submitted.load(std::memory_order_acquire));
  Observer* ob = observer();
  if (ob) ob->on_wait(true, "fl_engine_synchronize");
  for (auto& [s, target] : upto) {
    Stream* st = s;
    uint64_t t = target;
    wait_stream(st, t);
  }
  if (ob) ob->on_wait(false, "fl_engine_synchronize");
  return collect_failure(upto);
}

fl_status_t Engine::synchronize(Stream* s) {
  Instr* self = current_instr();
  // Any stream of the caller's own lane: its instructions submitted after the caller (a
  // host stream's, or a CUDA stream's, which launch only once the caller finished) would
  // be waited for by the instruction they queue behind.
  if (self != nullptr && self->stream->lane == s->lane)
    fail(FL_ERR_INVALID_ARGUMENT, "fl_stream_synchronize called from inside instruction " + self->describe() +
                                      " on a stream of its own lane (" + s->describe() +
                                      "): it would wait for instructions queued behind itself; "
                                      "depend on the objects you need instead");
  uint64_t target = s->submitted.load(std::memory_order_acquire);
  Observer* ob = observer();
  if (ob) ob->on_wait(true, "fl_stream_synchronize");
  wait_stream(s, target);
  if (ob) ob->on_wait(false, "fl_stream_synchronize");
  return collect_failure({{s, target}});
}

fl_engine_stats_t Engine::stats() const {
  fl_engine_stats_t st{};
  st.struct_size = sizeof(st);
  for (const auto& lane : lanes_) {
    st.submitted += lane->submitted.load(std::memory_order_relaxed);
    st.completed += lane->completed.load(std::memory_order_relaxed);
    st.failed += lane->failed.load(std::memory_order_relaxed);
  }
  int64_t inflight = inflight_.load(std::memory_order_relaxed);
  st.in_flight = inflight > 0 ? uint64_t(inflight) : 0;
  st.window_stalls = window_stalls_.load(std::memory_order_relaxed);
  PoolStats ps = pool_->stats();
  st.steals = ps.steals;
  st.parks = ps.parks;
  return st;
}

}  // namespace flowlane::core
