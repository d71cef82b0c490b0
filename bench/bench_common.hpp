// What every engine benchmark shares, whatever runtime it measures (flowlane, StarPU,
// libgomp, libomp): the batch sizes and the per-instruction counter. Google Benchmark only,
// so that the libomp peer (built by clang, without flowlane) includes it too.
#pragma once

#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdint>
#include <thread>

namespace flbench {

// Instructions (tasks) submitted per benchmark iteration, then waited for.
constexpr int kBatch = 10000;
// Width of the fan-out/in shape: 1 producer, kFan middle instructions, 1 join per round.
constexpr int kFan = 64;

// items_per_second = instructions per second, and `counter` (ns per instruction by default)
// = 1e9 / that, from the iteration time the benchmark uses (real or manual).
inline void finish(benchmark::State& state, int per_iter, const char* counter = "ns_per_instr") {
  state.SetItemsProcessed(int64_t(state.iterations()) * per_iter);
  state.counters[counter] = benchmark::Counter(double(state.iterations()) * per_iter,
                                               benchmark::Counter::kIsRate | benchmark::Counter::kInvert,
                                               benchmark::Counter::kIs1000);
}

// Holds threads (flowlane workers, OpenMP team members) inside a task or instruction until
// released, so that a batch can be submitted with nothing running: hold() in the held
// thread, wait_held(n) in the submitter, then release(). A blocking gate sleeps on a futex
// (for callgrind: a held thread executes nothing); a spinning one yields in a loop (for
// timings: no wake-up latency after release()).
class Gate {
 public:
  explicit Gate(bool spin) : spin_(spin) {}
  void hold() {
    entered_.fetch_add(1, std::memory_order_acq_rel);
    entered_.notify_all();
    if (spin_) {
      while (!open_.load(std::memory_order_acquire)) std::this_thread::yield();
    } else {
      open_.wait(false, std::memory_order_acquire);
    }
  }
  void wait_held(int n) {
    for (int e = entered_.load(std::memory_order_acquire); e < n; e = entered_.load(std::memory_order_acquire))
      entered_.wait(e, std::memory_order_acquire);
  }
  void release() {
    open_.store(true, std::memory_order_release);
    open_.notify_all();
  }
  void reset() {
    entered_.store(0, std::memory_order_relaxed);
    open_.store(false, std::memory_order_relaxed);
  }

 private:
  const bool spin_;
  std::atomic<int> entered_{0};
  std::atomic<bool> open_{false};
};

}  // namespace flbench
