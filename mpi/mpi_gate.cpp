// The gate every MPI call of the plugin passes, and MPI_Finalize's hook (mpi_internal.hpp).
//
// MPI_Finalize deletes MPI_COMM_SELF's attributes first (MPI 3.1, 8.7.1), so a delete
// callback on an attribute of MPI_COMM_SELF runs before MPI goes away: it takes the gate
// exclusive (waiting for a start or test under way) and marks MPI finalized. Collectives
// still in flight then report a failure and are forgotten; the duplicates are not freed.
#include <atomic>
#include <mutex>

#include "mpi_internal.hpp"

namespace flowlane::mpi {

namespace {

std::shared_mutex& gate() {
  static auto* g = new std::shared_mutex();  // never destroyed: the progress thread outlives statics
  return *g;
}
// Written under the gate held exclusive; read under it held (any mode). Atomic for the
// relaxed reads of GateLock's constructor.
std::atomic<bool> g_serialized{false};
bool g_finalized = false;
std::mutex g_hook_mu;
bool g_hooked = false;  // under g_hook_mu

int on_finalize(MPI_Comm, int, void*, void*) {
  std::unique_lock<std::shared_mutex> lk(gate());
  g_finalized = true;
  return MPI_SUCCESS;
}

}  // namespace

GateLock::GateLock() : exclusive_(g_serialized.load(std::memory_order_relaxed)) {
  if (exclusive_)
    gate().lock();
  else
    gate().lock_shared();
}

GateLock::~GateLock() {
  if (exclusive_)
    gate().unlock();
  else
    gate().unlock_shared();
}

void serialize_calls() {
  // Set while no call holds the gate: later locks take it exclusive. (The flag only ever
  // turns on: MPI's thread level is the process's.)
  std::unique_lock<std::shared_mutex> lk(gate());
  g_serialized.store(true, std::memory_order_relaxed);
}

bool finalized() { return g_finalized; }

void install_finalize_hook() {
  std::lock_guard<std::mutex> lk(g_hook_mu);
  if (g_hooked) return;
  int key = MPI_KEYVAL_INVALID;
  if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &on_finalize, &key, nullptr) != MPI_SUCCESS) return;
  if (MPI_Comm_set_attr(MPI_COMM_SELF, key, nullptr) == MPI_SUCCESS) g_hooked = true;
}

std::string mpi_error(int code, const char* call) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) text[0] = 0;
  return std::string(call) + ": " + text + " (MPI error " + std::to_string(code) + ")";
}

}  // namespace flowlane::mpi
