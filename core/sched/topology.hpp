// CPU topology for choosing thread counts: logical CPUs this process may run on, and
// physical cores among them (SMT siblings counted once).
#pragma once

#include <string>

namespace flowlane::sched {

// Logical CPUs in this process's affinity mask (sched_getaffinity), at least 1.
unsigned logical_core_count();

// Physical cores among the CPUs this process may run on: distinct
// (physical_package_id, core_id) pairs read from
// <sysfs_cpu_dir>/cpu<N>/topology/. Falls back to logical_core_count() when sysfs is
// unreadable. `sysfs_cpu_dir` is a parameter for tests (a directory other than the real
// one is read without the affinity filter, cpu0 .. cpu<CPU_SETSIZE-1>).
inline constexpr const char* kSysfsCpuDir = "/sys/devices/system/cpu";
unsigned physical_core_count(const std::string& sysfs_cpu_dir = kSysfsCpuDir);

// The thread count a task graph runs with for the C API's num_threads
// (-1: logical cores, 0: physical cores, N > 0: at most N), given the engine's worker
// count: N is capped at max(logical cores, engine_workers). Always >= 1.
unsigned resolve_thread_count(long long num_threads, unsigned engine_workers);

}  // namespace flowlane::sched
