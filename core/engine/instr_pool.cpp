// Instruction records: their pool (per-thread caches and a process-wide depot) and their
// reuse once the last reference is gone.
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.hpp"

namespace flowlane::core {

namespace {
// A record that once needed more room than this gives it back when recycled, so that one
// instruction with a huge reader list does not pin that memory in the pool forever.
constexpr size_t kKeptCapacity = 1024;
}  // namespace

Instr* Engine::new_instr() {
  Instr* i = InstrPool::get();
  i->engine = this;
  return i;
}

void Engine::recycle(Instr* i) {
  // Every dependent that could read the device record has completed (they held references).
  if (i->device != nullptr) services_.device->recycle(i);
  i->state.store(uint32_t(InstrState::kFree), std::memory_order_relaxed);
  i->outcome = InstrState::kDone;
  i->succ_head.store(nullptr, std::memory_order_relaxed);
  i->issue_succ_head.store(nullptr, std::memory_order_relaxed);
  i->edges.clear();
  if (i->edges.capacity() > kKeptCapacity) std::vector<Edge>().swap(i->edges);
  if (i->deps.capacity() > kKeptCapacity) std::vector<Instr::Dep>().swap(i->deps);
  i->error.clear();
  i->status = FL_OK;
  if (i->root != nullptr && i->root != i && i->root->unref()) recycle(i->root);  // a skipped one's family
  i->root = nullptr;
  i->skipped = 0;
  i->returned = false;
  InstrPool::put(i);
}

std::string Instr::describe() const {
  std::string s = "'";
  s += name.empty() ? std::string("<unnamed>") : name;
  s += "' (#" + std::to_string(id) + ", " + (stream ? stream->describe() : std::string("?")) + ")";
  return s;
}

// ---------------------------------------------------------------------------------------

namespace {

struct Depot {
  std::mutex mu;
  std::vector<std::vector<Instr*>> batches;  // full batches of InstrPool::kBatch records
};

Depot& depot() {
  static Depot* d = new Depot();  // never destroyed: thread caches may flush at exit
  return *d;
}

struct ThreadCache {
  std::vector<Instr*> free;
  ~ThreadCache();
};

// The fast path reads a trivial initial-exec pointer; the owning thread_local (whose
// destructor flushes the cache at thread exit) is touched only when a thread first
// allocates its cache.
FL_TLS thread_local ThreadCache* t_cache_ptr = nullptr;
thread_local std::unique_ptr<ThreadCache> t_cache_owner;

ThreadCache& cache() {
  if (t_cache_ptr == nullptr) {
    t_cache_owner = std::make_unique<ThreadCache>();
    t_cache_ptr = t_cache_owner.get();
  }
  return *t_cache_ptr;
}

ThreadCache::~ThreadCache() {  // thread exit: hand the records to the depot in batches
  t_cache_ptr = nullptr;
  while (free.size() >= InstrPool::kBatch) {
    std::vector<Instr*> batch(free.end() - InstrPool::kBatch, free.end());
    free.resize(free.size() - InstrPool::kBatch);
    std::lock_guard<std::mutex> lock(depot().mu);
    depot().batches.push_back(std::move(batch));
  }
  for (Instr* i : free) delete i;
}

}  // namespace

Instr* InstrPool::get() {
  auto& c = cache().free;
  if (c.empty()) {
    Depot& d = depot();
    std::unique_lock<std::mutex> lock(d.mu);
    if (!d.batches.empty()) {
      c.swap(d.batches.back());
      d.batches.pop_back();
    }
  }
  if (c.empty()) return new Instr();
  Instr* i = c.back();
  c.pop_back();
  return i;
}

void InstrPool::put(Instr* i) noexcept {
  // Never throws: recycling runs on paths that have published state (completion, the
  // submit path's reader pruning). Out of memory, the record is freed instead of kept.
  std::vector<Instr*>* c = nullptr;
  try {
    c = &cache().free;
    c->push_back(i);
  } catch (...) {
    delete i;
    return;
  }
  if (c->size() >= 2 * kBatch) {  // keep kBatch locally, give a batch away
    try {
      std::vector<Instr*> batch(c->end() - kBatch, c->end());
      std::lock_guard<std::mutex> lock(depot().mu);
      depot().batches.push_back(std::move(batch));
      c->resize(c->size() - kBatch);
    } catch (...) {
      // Out of memory: the records stay in this thread's cache.
    }
  }
}

}  // namespace flowlane::core
