// The C++ header in one program: instructions as lambdas ordered by their operands, a
// parallel quicksort through task groups, parallel_for, and a failure as an exception.
//
//   build/examples/cpp_tasks/cpp_tasks
#include <flowlane/flowlane.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <vector>

namespace {

// Sorts [lo, hi): one half in a spawned task, the other on this thread, then waits.
void quicksort(const flowlane::engine& e, int* lo, int* hi) {
  if (hi - lo <= 2048) {
    std::sort(lo, hi);
    return;
  }
  const int pivot = lo[(hi - lo) / 2];
  int* mid1 = std::partition(lo, hi, [pivot](int v) { return v < pivot; });
  int* mid2 = std::partition(mid1, hi, [pivot](int v) { return v == pivot; });
  flowlane::task_group g = e.make_task_group();
  g.spawn([&e, lo, mid1] { quicksort(e, lo, mid1); });
  quicksort(e, mid2, hi);
  g.wait();
}

}  // namespace

int main() {
  try {
    flowlane::engine e;
    auto data = e.make_object<std::vector<int>>();
    auto stats = e.make_object<std::pair<long long, int>>();  // (sum, max)
    const flowlane::engine* ep = &e;

    // Lane 1 loads, lane 2 sorts, lane 3 summarises: each waits only for the objects it reads.
    e.host(1).submit([&data] {
      std::mt19937 rng(42);
      data.value().resize(1 << 20);
      for (int& v : data.value()) v = int(rng() % 1000000);
    }, {flowlane::write(data)}, "load");
    e.host(2).submit([&data, ep] {
      std::vector<int>& v = data.value();
      quicksort(*ep, v.data(), v.data() + v.size());
    }, {flowlane::read_write(data)}, "sort");
    e.host(3).submit([&data, &stats, ep] {
      const std::vector<int>& v = data.value();
      std::atomic<long long> sum{0};
      ep->parallel_for(0, v.size(), [&](uint64_t lo, uint64_t hi) {
        long long s = 0;
        for (uint64_t i = lo; i < hi; ++i) s += v[i];
        sum += s;
      });
      stats.value() = {sum.load(), v.back()};
    }, {flowlane::read(data), flowlane::write(stats)}, "summarise");

    stats.wait(FL_READ);
    const std::vector<int>& v = data.value();
    std::printf("sorted %zu values: %s; sum %lld, max %d\n", v.size(),
                std::is_sorted(v.begin(), v.end()) ? "in order" : "NOT IN ORDER", stats.value().first,
                stats.value().second);

    // A failure: the wait rethrows the callable's own exception; its dependents are skipped.
    e.host(1).submit([] { throw std::runtime_error("disk full"); }, {flowlane::write(data)}, "save");
    try {
      data.wait(FL_READ);
    } catch (const std::runtime_error& err) {
      std::printf("save failed as expected: %s\n", err.what());
    }
    e.synchronize_for(std::chrono::seconds(0));  // the failure was returned once already
    return std::is_sorted(v.begin(), v.end()) ? 0 : 1;
  } catch (const std::exception& x) {
    std::fprintf(stderr, "cpp_tasks: %s\n", x.what());
    return 1;
  }
}
