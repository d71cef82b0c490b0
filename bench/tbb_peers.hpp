// oneTBB versions of the benchmarks' recursive workloads, shared by the executables that put
// flowlane next to oneTBB (bench_pool, bench_capi_forkjoin). Only with FL_HAVE_TBB.
#pragma once

#ifdef FL_HAVE_TBB
#include <tbb/task_group.h>

namespace flbench {

// fib(n) with one tbb::task_group per call and no cutoff, as the flowlane rows do it.
inline long fib_tbb(long n) {
  if (n < 2) return n;
  long a = 0;
  tbb::task_group tg;
  tg.run([&] { a = fib_tbb(n - 1); });
  long b = fib_tbb(n - 2);
  tg.wait();
  return a + b;
}

}  // namespace flbench
#endif
