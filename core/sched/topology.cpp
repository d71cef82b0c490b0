// CPU topology from sched_getaffinity and sysfs.
#include "sched/topology.hpp"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <thread>
#include <utility>

namespace flowlane::sched {

namespace {

bool read_int(const std::string& path, long* out) {
  std::ifstream in(path);
  long v = 0;
  if (!(in >> v)) return false;
  *out = v;
  return true;
}

}  // namespace

unsigned logical_core_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return unsigned(n);
  }
  unsigned n = std::thread::hardware_concurrency();
  return n ? n : 1;
}

unsigned physical_core_count(const std::string& sysfs_cpu_dir) {
  // The real sysfs is filtered by this process's affinity mask; a test directory is not.
  cpu_set_t set;
  CPU_ZERO(&set);
  bool have_mask = sysfs_cpu_dir == kSysfsCpuDir && sched_getaffinity(0, sizeof(set), &set) == 0;
  std::set<std::pair<long, long>> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (have_mask && !CPU_ISSET(cpu, &set)) continue;
    std::string base = sysfs_cpu_dir + "/cpu" + std::to_string(cpu) + "/topology/";
    long core = 0, package = 0;
    if (!read_int(base + "core_id", &core)) continue;
    if (!read_int(base + "physical_package_id", &package)) package = 0;
    cores.insert({package, core});
  }
  if (cores.empty()) return logical_core_count();
  return unsigned(cores.size());
}

unsigned resolve_thread_count(long long num_threads, unsigned engine_workers) {
  if (num_threads == -1) return logical_core_count();
  if (num_threads == 0) {
    static const unsigned physical = physical_core_count();  // sysfs is read once
    return physical;
  }
  unsigned cap = std::max(logical_core_count(), std::max(engine_workers, 1u));
  if (num_threads < 0) return cap;  // rejected by the caller; defensive
  return unsigned(std::min<long long>(num_threads, cap));
}

}  // namespace flowlane::sched
