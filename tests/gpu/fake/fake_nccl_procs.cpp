// One rank of a multi-process run without MPI, started by tests/gpu/fake/run_procs.py with
// a launcher's variables set (torchrun's, Open MPI's or Slurm's): fl_comm_get_env gives the
// rank, fl_comm_rendezvous_file shares rank 0's NCCL unique id through DIR, and the NCCL
// communicator runs on the fake NCCL in cross-process mode (FAKE_NCCL_SHARED_DIR).
// Built a second time with FL_PROCS_REAL_CUDA as flowlane_nccl_procs, for a GPU host
// (scripts/dev/gpu-dist-check.sh): the real CUDA runtime and NCCL, buffers in device memory,
// each rank on device LOCAL_RANK modulo the devices it sees.
//
//   flowlane_fake_nccl_procs MODE DIR [RANK]
//
//   ops        every op and several dtypes, checked (fake_nccl_ops.hpp)
//   die RANK   RANK kills itself before the rendezvous; every other rank fails with
//              FL_ERR_TIMEOUT: in the rendezvous (rank 0, or everyone when RANK is 0), or in
//              the NCCL init (FLOWLANE_NCCL_INIT_TIMEOUT_MS) when it passed the rendezvous
//   stall      the last rank makes its communicator and leaves without its collective: the
//              others' collective fails with FL_ERR_TIMEOUT (fl_comm_set_timeout aborts the
//              communicator, and the fake's wait returns)
//   mismatch   rank 1 all-reduces 8 elements, the others 4: every rank's fails (FL_ERR_NCCL)
//   dup        (real NCCL before 2.30, several ranks on one GPU) every rank's fl_comm_create
//              fails with FL_ERR_NCCL: NCCL refuses two ranks of a communicator on one device
//
// Exit status 0 when every check passed; each failure is printed.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "fake_nccl_ops.hpp"

#ifdef FL_PROCS_REAL_CUDA
#include <cuda_runtime_api.h>
#else
extern "C" long fake_nccl_counter(const char* name);  // (also links the fakes in: libflowlane finds them)
#endif

using namespace fake_procs;

namespace {

constexpr uint64_t kRendezvousMs = 3000;

#ifdef FL_PROCS_REAL_CUDA
void* to_device(const void* host, size_t bytes) {
  void* d = nullptr;
  check(cudaMalloc(&d, bytes) == cudaSuccess && cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess,
        "cudaMalloc + cudaMemcpy to the device");
  return d;
}
void to_host(void* host, void* device, size_t bytes) {
  check(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost) == cudaSuccess, "cudaMemcpy to the host");
  cudaFree(device);
}
#endif

// The device this rank uses: 0 on the fake; LOCAL_RANK modulo the devices seen on a GPU.
int pick_device(const fl_comm_env_t& env) {
#ifdef FL_PROCS_REAL_CUDA
  int count = 0;
  check(cudaGetDeviceCount(&count) == cudaSuccess && count > 0, "a CUDA device");
  const int d = count > 0 ? int(env.local_rank % uint64_t(count)) : 0;
  cudaSetDevice(d);
  device_memory().to_device = to_device;
  device_memory().to_host = to_host;
  return d;
#else
  (void)env;
  return 0;
#endif
}

int finish(const char* mode, const fl_comm_env_t& env) {
  if (failures() == 0) std::printf("rank %d of %d (%s): %s ok\n", int(env.rank), int(env.size), env.launcher, mode);
  return failures() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s ops|die|stall|mismatch|dup DIR [RANK]\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1], dir = argv[2];
  fl_comm_env_t env = FL_COMM_ENV_INIT;
  if (fl_comm_get_env(&env) != FL_OK) {
    std::fprintf(stderr, "fl_comm_get_env: %s\n", fl_last_error_message());
    return 1;
  }
  my_rank() = int(env.rank);
  const int r = int(env.rank), n = int(env.size);
  if (mode == "die" && argc > 3 && r == std::atoi(argv[3])) {
    std::fprintf(stderr, "rank %d: dying before the rendezvous\n", r);
    ::kill(::getpid(), SIGKILL);
  }

  fl_comm_unique_id_t id{};
  if (r == 0) check_ok(fl_comm_get_unique_id(FL_COMM_NCCL, &id), "fl_comm_get_unique_id");
  if (failures() > 0) return 1;
  const fl_status_t met = fl_comm_rendezvous_file(dir.c_str(), "nccl", env.rank, env.size, kRendezvousMs, &id);
  if (mode == "die" && met != FL_OK) {
    check_err(met, FL_ERR_TIMEOUT, "fl_comm_rendezvous_file", "the rendezvous");
    return finish("die", env);
  }
  check_ok(met, "fl_comm_rendezvous_file");
  if (met != FL_OK) return 1;
  fl_engine_t* e = make_engine();
  fl_comm_t* c = nullptr;
  fl_comm_desc_t d = nccl_desc(env.size, env.rank);
  d.device = uint64_t(pick_device(env));
  const fl_status_t made = fl_comm_create(e, &d, &id, &c);
  if (mode == "dup") {
    check_err(made, FL_ERR_NCCL, "NCCL", "two ranks of one communicator on one GPU");
    if (c != nullptr) fl_comm_destroy(c);
    fl_engine_destroy(e);
    return finish("dup", env);
  }
  if (mode == "die") {
    check_err(made, FL_ERR_TIMEOUT, "not every rank joined", "the NCCL init");
    fl_engine_destroy(e);
    return finish("die", env);
  }
  check_ok(made, "fl_comm_create");
  if (c == nullptr) return 1;

  if (mode == "ops") {
    run_ops(e, c, r, n);
  } else if (mode == "stall" && r == n - 1) {
    // Leaves without its collective (its communicator made, so the others' init passed).
  } else if (mode == "stall" || mode == "mismatch") {
    if (mode == "stall") check_ok(fl_comm_set_timeout(c, 1000), "fl_comm_set_timeout");
    std::vector<float> s(8, 1), out(8);
    float* sd = s.data();
    float* outd = out.data();
    if (device_memory().to_device != nullptr) {
      sd = static_cast<float*>(device_memory().to_device(s.data(), 8 * sizeof(float)));
      outd = static_cast<float*>(device_memory().to_device(out.data(), 8 * sizeof(float)));
    }
    fl_object_t* o = nullptr;
    check_ok(fl_object_create(e, nullptr, nullptr, &o), "fl_object_create");
    const uint64_t count = mode == "mismatch" && r == 1 ? 8 : 4;
    check_ok(coll(e, c, {part(FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, sd, outd, count)}, o), "submit");
    if (mode == "stall")
      check_err(fl_object_wait_for(o, FL_READ, kWaitNs), FL_ERR_TIMEOUT, "timed out", "a collective the last rank skips");
    else
      check_err(fl_object_wait_for(o, FL_READ, kWaitNs), FL_ERR_NCCL, "NCCL", "a mismatched collective");
    fl_object_release(o);
    (void)fl_engine_synchronize(e);
    // (device buffers of a failed collective are left allocated: its kernel may have been cut)
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  check_ok(fl_comm_destroy(c), "fl_comm_destroy");
  fl_engine_destroy(e);
#ifndef FL_PROCS_REAL_CUDA
  const long mismatches = fake_nccl_counter("mismatches");
  check(mode == "mismatch" ? mismatches >= 1 : mismatches == 0,
        "the fake NCCL counted " + std::to_string(mismatches) + " mismatch(es)");
#endif
  return finish(mode.c_str(), env);
}
