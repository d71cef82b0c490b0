// The CUDA runtime and NCCL, resolved at run time (CUDA builds only). libflowlane.so.0 has
// no load-time dependency on libcudart or libnccl: the first GPU use (the first engine)
// dlopens them and resolves every function the backend calls into one table. Where a
// library is missing, lacks a function or has another major version than the headers this
// libflowlane was built with, CPU work is unaffected and the GPU calls answer
// FL_ERR_UNSUPPORTED with the reason (gpu/README.md, "Loading CUDA").
//
// Search order, for each library:
//   1. FLOWLANE_CUDART_PATH / FLOWLANE_NCCL_PATH: that file only; `none` disables it.
//   2. A copy already loaded in the process, if its major version matches: by soname
//      (dlopen RTLD_NOLOAD), else the object that defines the version function in the
//      global scope (a program linked with it, LD_PRELOAD). A program and libflowlane thus
//      share one runtime instance: kernels registered by the program's runtime can only be
//      launched through that same instance (another one answers
//      cudaErrorInvalidDeviceFunction).
//   3. The soname (libcudart.so.13, libnccl.so.2) through the loader's search path.
//   4. The build-time toolkit's library folder.
#pragma once

#if !FLOWLANE_HAVE_CUDA
#error "gpu/runtime.hpp is for CUDA builds only"
#endif

#include <cuda_runtime_api.h>

#include <string>
#include <type_traits>

#if FLOWLANE_HAVE_NCCL
#include <nccl.h>
#endif

namespace flowlane::gpu {

// Every CUDA runtime function libflowlane calls: X(name) has the type of the header's
// declaration; XT(name, type) spells the C declaration's type out where cuda_runtime.h
// (which nccl.h includes) adds C++ template overloads of the name. runtime.cpp checks
// every member against the header's declaration with a static_assert.
#define FL_CUDA_FUNCTIONS(X, XT)                                                          \
  X(cudaRuntimeGetVersion)                                                                \
  X(cudaGetDeviceCount)                                                                   \
  X(cudaGetDevice)                                                                        \
  X(cudaSetDevice)                                                                        \
  X(cudaGetLastError)                                                                     \
  X(cudaGetErrorName)                                                                     \
  X(cudaGetErrorString)                                                                   \
  X(cudaDeviceGetStreamPriorityRange)                                                     \
  X(cudaStreamCreateWithPriority)                                                         \
  X(cudaStreamDestroy)                                                                    \
  X(cudaEventCreateWithFlags)                                                             \
  X(cudaEventDestroy)                                                                     \
  X(cudaEventRecord)                                                                      \
  X(cudaEventQuery)                                                                       \
  X(cudaStreamWaitEvent)                                                                  \
  XT(cudaLaunchKernel, cudaError_t (*)(const void*, dim3, dim3, void**, size_t, cudaStream_t)) \
  X(cudaMemcpyAsync)                                                                      \
  X(cudaMemsetAsync)                                                                      \
  XT(cudaHostAlloc, cudaError_t (*)(void**, size_t, unsigned int))                        \
  X(cudaFreeHost)                                                                         \
  X(cudaPointerGetAttributes)

#define FL_RT_MEMBER(f) decltype(&::f) f = nullptr;
#define FL_RT_MEMBER_T(f, T) std::type_identity_t<T> f = nullptr;

struct CudaApi {
  FL_CUDA_FUNCTIONS(FL_RT_MEMBER, FL_RT_MEMBER_T)
};

// ---- optional runtime entry points (completion by waiting threads, value edges) --------
// Resolved when the runtime has them; a missing one only turns off what needs it (its
// member stays null), never the runtime. cudaPeekAtLastError: a waiting program thread
// completes device work only when its own last CUDA error is clear (gpu/complete.cpp).
// cudaGetDriverEntryPointByVersion: the driver's stream memory operations (value edges,
// gpu/value_edges.hpp). cudaHostGetDevicePointer: the device address of their slots.
#define FL_CUDA_OPTIONAL_FUNCTIONS(X, XT)                                                   \
  X(cudaPeekAtLastError)                                                                    \
  X(cudaGetDriverEntryPointByVersion)                                                       \
  XT(cudaHostGetDevicePointer, cudaError_t (*)(void**, void*, unsigned int))

struct CudaOptionalApi {
  FL_CUDA_OPTIONAL_FUNCTIONS(FL_RT_MEMBER, FL_RT_MEMBER_T)
};
// ---- end of the optional entry points ---------------------------------------------------

// The loaded CUDA runtime's table; only valid where cuda_loaded() (backend() is non-null
// exactly then, and every CUDA path starts from the backend).
const CudaApi& cu();
// The optional entry points of the same runtime (null members where it lacks them).
const CudaOptionalApi& cu_optional();
bool cuda_loaded();
// Why the CUDA runtime is not usable (empty when it is): names the library, the symbol or
// version and dlerror's text.
const std::string& cuda_unavailable();
// The file the runtime was loaded from (for messages), or empty.
const std::string& cuda_library();

// ---- CUDA graphs (programs' device work: gpu/graph.cpp) ----------------------------------
// Resolved from the same runtime, but optionally: a runtime (or a fake) without them still
// loads, and programs then refuse device work, naming the missing function
// (cuda_graph_unavailable()).
#define FL_CUDA_GRAPH_FUNCTIONS(X, XT)                                                    \
  X(cudaGraphCreate)                                                                       \
  X(cudaGraphDestroy)                                                                      \
  XT(cudaGraphAddKernelNode, cudaError_t (*)(cudaGraphNode_t*, cudaGraph_t, const cudaGraphNode_t*, size_t, \
                                             const cudaKernelNodeParams*))                 \
  X(cudaGraphAddMemcpyNode1D)                                                              \
  X(cudaGraphAddMemsetNode)                                                                \
  X(cudaGraphAddEmptyNode)                                                                 \
  XT(cudaGraphInstantiate, cudaError_t (*)(cudaGraphExec_t*, cudaGraph_t, unsigned long long)) \
  X(cudaGraphExecDestroy)                                                                  \
  X(cudaGraphLaunch)

struct CudaGraphApi {
  FL_CUDA_GRAPH_FUNCTIONS(FL_RT_MEMBER, FL_RT_MEMBER_T)
};

// The graph calls of the loaded runtime; only valid where cuda_loaded() and
// cuda_graph_unavailable() is empty.
const CudaGraphApi& cu_graph();
// Why the loaded runtime cannot run graphs ("" when it can; the runtime's reason when it
// is not loaded at all).
const std::string& cuda_graph_unavailable();
// ---- end of CUDA graphs --------------------------------------------------------------------

#if FLOWLANE_HAVE_NCCL
#define FL_NCCL_FUNCTIONS(X)   \
  X(ncclGetVersion)            \
  X(ncclGetErrorString)        \
  X(ncclGetLastError)          \
  X(ncclGetUniqueId)           \
  X(ncclCommInitRank)          \
  X(ncclCommInitRankConfig)    \
  X(ncclCommGetAsyncError)     \
  X(ncclCommFinalize)          \
  X(ncclCommDestroy)           \
  X(ncclCommAbort)             \
  X(ncclGroupStart)            \
  X(ncclGroupEnd)              \
  X(ncclAllReduce)             \
  X(ncclAllGather)             \
  X(ncclReduceScatter)         \
  X(ncclBroadcast)             \
  X(ncclSend)                  \
  X(ncclRecv)

struct NcclApi {
  FL_NCCL_FUNCTIONS(FL_RT_MEMBER)
};

// The same for NCCL, loaded on first use (the first NCCL communicator or unique id).
const NcclApi& nccl();
bool nccl_loaded();
const std::string& nccl_unavailable();
#endif

#undef FL_RT_MEMBER
#undef FL_RT_MEMBER_T

}  // namespace flowlane::gpu
