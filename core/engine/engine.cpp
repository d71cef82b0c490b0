// The engine façade (engine/engine.hpp): creation and destroy (core/engine/README.md,
// "Destroy"), the pools, lanes and interned streams the components share, the hooks of the
// layers above (observers, extensions) and the counters.
#include "engine/engine.hpp"

#include <algorithm>
#include <thread>

#include "sched/topology.hpp"

namespace flowlane::core {

Engine::Engine(const fl_engine_desc_t& desc, const EngineServices& services)
    : services_(services), window_(*this, desc.inflight_limit) {
  unsigned workers = desc.num_workers ? unsigned(desc.num_workers) : sched::logical_core_count();
  uint32_t lanes = desc.max_lanes ? uint32_t(desc.max_lanes) : 8;
  pool_ = std::make_unique<sched::Pool>(workers, this);
  lanes_.reserve(lanes);
  for (uint32_t l = 0; l < lanes; ++l) {
    auto lane = std::make_unique<Lane>();
    lane->engine = this;
    lane->id = l;
    lanes_.push_back(std::move(lane));
  }
  lane_held_.assign(lanes, false);
  lane_held_[0] = true;  // lane 0 is the default lane and is never handed out
  // Slot 0: the CPU; 1 + i: device i of the backend.
  device_slots_ = 1 + uint32_t(services_.device != nullptr ? std::max(0, services_.device->device_count()) : 0);
  size_t nstreams = size_t(lanes) * device_slots_ * kStreamKinds;
  streams_ = std::make_unique<std::atomic<Stream*>[]>(nstreams);
  for (size_t k = 0; k < nstreams; ++k) streams_[k].store(nullptr, std::memory_order_relaxed);
  if (services_.extend != nullptr) {
    try {
      services_.extend(*this, desc);
    } catch (...) {
      shutdown();  // the destructor does not run for a constructor that throws
      throw;
    }
  }
}

Engine::~Engine() {
  shutdown();
  size_t nstreams = size_t(lanes_.size()) * device_slots_ * kStreamKinds;
  for (size_t k = 0; k < nstreams; ++k) {
    Stream* s = streams_[k].load(std::memory_order_acquire);  // pairs with the release in stream()
    if (s == nullptr) continue;
    if (services_.forget_handle != nullptr) services_.forget_handle(s->handle);
    if (services_.device != nullptr && !s->is_host_executed()) services_.device->stream_destroyed(s);
    delete s;
  }
  // Extensions last: a dump or a late callback may still have looked at them.
  std::lock_guard<std::mutex> lock(extensions_mu_);
  while (!extensions_.empty()) extensions_.pop_back();
}

void Engine::check_destroy_allowed() const {
  if (in_engine_context(this))
    fail(FL_ERR_INVALID_ARGUMENT,
         "fl_engine_destroy called from code the engine runs (an instruction, cleanup or release callback, a "
         "task or loop body, the watchdog callback, or one of its threads): it would wait for itself; destroy "
         "the engine from a thread of your own once its work is done (the engine stays usable)");
}

void Engine::shutdown() {
  if (stopped_) return;
  stopped_ = true;
  // 0. Extensions first: communicators are aborted (blocked collectives fail with
  //    FL_ERR_CANCELLED) and diagnostics watch the drain for wait cycles.
  for (Extension* x : extensions()) x->begin_shutdown();
  stop_accepting();   // 1.
  wait_until_idle();  // 2., 3.
  for (Extension* x : extensions()) x->end_shutdown();
  stop_workers();     // 4., 5.
}

void Engine::stop_accepting() {
  // 1. Refuse new work. Passing through every lane's submit lock after raising the flag
  //    guarantees each submission either completed its queueing before or sees the flag.
  shutdown_.store(true, std::memory_order_release);  // pairs with acquire in enqueue()
  for (auto& lane : lanes_) {
    lane->submit_lock.lock();
    lane->submit_lock.unlock();
  }
}

void Engine::wait_until_idle() {
  // 2. Drain. Errors are dropped here (synchronize first to see them).
  for (Stream* s : all_streams()) {
    uint64_t target = s->submitted.load(std::memory_order_acquire);  // pairs with the release in enqueue()
    Waits::wait_stream(s, target);
  }
  // 3. Wait for every lane task to finish its tail: the last instruction completing does
  //    not mean its lane has gone idle (it may still be popping or re-queueing itself).
  //    acquire pairs with the runner's seq_cst store of 0 in Lane::give_up().
  for (auto& lane : lanes_)
    while (lane->scheduled.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  //    Likewise a thread that finished an asynchronous host instruction (a communicator's
  //    progress thread) still touches its stream after completing it: wait until it left.
  executor_.wait_finishers();
  // Fork-join work still in flight (task-group tasks, parallel_for helpers that had not
  //    started) finishes while the extensions still watch: a cycle of waits may run through
  //    task groups only.
  wait_pools_quiescent();
}

void Engine::wait_pools_quiescent() {
  pool_->wait_quiescent();
  std::lock_guard<std::mutex> lock(pools_mu_);
  for (auto& [n, p] : extra_pools_) p->wait_quiescent();
}

void Engine::stop_workers() {
  // The device backend completed every issued instruction during the drain; stop its threads.
  if (services_.device != nullptr) services_.device->engine_stopped(this);
  // Fork-join work started since (callbacks of the device backend's last completions) finishes
  // before the workers go.
  wait_pools_quiescent();
  // 4. Discard the captures still open and free the programs left (their cleanups run,
  //    their references on objects go), then run every pending release callback (objects
  //    the caller still holds) while the workers still exist: a release callback may call
  //    back in (stats, dumps, waits; a submission answers FL_ERR_SHUTDOWN).
  programs_.release_all();
  objects_.release_all();
  // 5. Join workers; drop the failures never returned and the outcome histories.
  {
    std::lock_guard<std::mutex> lock(pools_mu_);
    extra_pools_.clear();
  }
  pool_.reset();
  ledger_.clear(all_streams());
}

// ---------------------------------------------------------------------------------------
// Observers and extensions

std::atomic<bool> Engine::any_observer_{false};

void Engine::set_observer(std::unique_ptr<Observer> o) {
  any_observer_.store(true, std::memory_order_relaxed);  // see observed_anywhere()
  std::lock_guard<std::mutex> lock(observers_mu_);
  observer_.store(o.get(), std::memory_order_release);  // pairs with acquire in observer()
  observers_.push_back(std::move(o));
}

// Pairs with the acquire load in observer() (which calls nothing once it reads null).
void Engine::clear_observer() { observer_.store(nullptr, std::memory_order_release); }

void Engine::reinstate_observer(Observer* o) {
  std::lock_guard<std::mutex> lock(observers_mu_);
  auto owned = std::find_if(observers_.begin(), observers_.end(), [o](const auto& p) { return p.get() == o; });
  if (owned == observers_.end()) fail(FL_ERR_INTERNAL, "reinstate_observer: the engine does not own this observer");
  observer_.store(o, std::memory_order_release);  // pairs with acquire in observer()
}

size_t Engine::observers_kept() const {
  std::lock_guard<std::mutex> lock(observers_mu_);
  return observers_.size();
}

Extension* Engine::attach(const void* key, std::unique_ptr<Extension> x) {
  std::lock_guard<std::mutex> lock(extensions_mu_);
  for (auto& [k, ext] : extensions_)
    if (k == key) return ext.get();
  extensions_.emplace_back(key, std::move(x));
  return extensions_.back().second.get();
}

Extension* Engine::extension(const void* key) const {
  std::lock_guard<std::mutex> lock(extensions_mu_);
  for (auto& [k, ext] : extensions_)
    if (k == key) return ext.get();
  return nullptr;
}

std::vector<Extension*> Engine::extensions() const {
  std::lock_guard<std::mutex> lock(extensions_mu_);
  std::vector<Extension*> out;
  for (auto& [k, ext] : extensions_) out.push_back(ext.get());
  return out;
}

sched::Pool& Engine::pool_for_threads(unsigned n) {
  if (n == 0 || n == pool_->size()) return *pool_;
  std::lock_guard<std::mutex> lock(pools_mu_);
  auto& p = extra_pools_[n];
  if (!p) p = std::make_unique<sched::Pool>(n, this);
  return *p;
}

bool Engine::pools_quiescent() const {
  if (!pool_->quiescent()) return false;
  std::lock_guard<std::mutex> lock(pools_mu_);
  for (auto& [n, p] : extra_pools_)
    if (!p->quiescent()) return false;
  return true;
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
  if (lane_held_.size() == 1)
    fail(FL_ERR_EXHAUSTED, "fl_lane_acquire: this engine has lane 0 only (max_lanes 1), and lane 0 is the default "
                           "lane, never handed out; create the engine with a larger max_lanes");
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
  if (shutting_down()) fail(FL_ERR_SHUTDOWN, "fl_stream_get: the engine is being destroyed");
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
  fresh->async_completion = device.type == FL_DEVICE_CPU && kind == FL_STREAM_COLLECTIVE;
  if (!fresh->is_host_executed()) services_.device->stream_created(fresh.get());
  if (services_.register_stream != nullptr) fresh->handle = services_.register_stream(fresh.get());
  if (services_.register_stream != nullptr && fresh->handle == 0) {
    if (!fresh->is_host_executed()) services_.device->stream_destroyed(fresh.get());
    fail(FL_ERR_NO_MEMORY, "fl_stream_get: the process-wide stream table is full");
  }
  s = fresh.release();
  // Publishes the initialised stream: pairs with the acquire loads above, in all_streams()
  // and in ~Engine().
  streams_[index].store(s, std::memory_order_release);  // publishes the initialised stream
  return s;
}

std::vector<Stream*> Engine::all_streams() const {
  std::vector<Stream*> out;
  size_t nstreams = size_t(lanes_.size()) * device_slots_ * kStreamKinds;
  for (size_t k = 0; k < nstreams; ++k)
    if (Stream* s = streams_[k].load(std::memory_order_acquire)) out.push_back(s);  // pairs with stream()
  return out;
}

// ---------------------------------------------------------------------------------------
// Counters

fl_engine_stats_t Engine::stats() const {
  fl_engine_stats_t st{};
  st.struct_size = sizeof(st);
  // Each lane's counters are read in the reverse order of their increments (cancelled
  // after failed after completed in complete(), completed after submitted), so that a
  // snapshot never counts more completed than submitted, more failed than completed or more
  // cancelled than failed: acquire loads of cancelled, failed and completed pair with their
  // release increments in complete().
  for (const auto& lane : lanes_) {
    st.cancelled += lane->cancelled.load(std::memory_order_acquire);  // pairs with the release fetch_add in complete()
    st.failed += lane->failed.load(std::memory_order_acquire);  // pairs with the release fetch_add in complete()
    st.completed += lane->completed_count();
    st.submitted += lane->submitted.load(std::memory_order_relaxed);
  }
  int64_t inflight = window_.inflight();
  st.in_flight = inflight > 0 ? uint64_t(inflight) : 0;
  st.window_stalls = window_.stalls();
  sched::PoolStats ps = pool_->stats();
  st.steals = ps.steals;
  st.parks = ps.parks;
  st.tasks = ps.tasks;
  {
    std::lock_guard<std::mutex> lock(pools_mu_);
    for (auto& [n, p] : extra_pools_) st.tasks += p->stats().tasks;
  }
  return st;
}

}  // namespace flowlane::core
