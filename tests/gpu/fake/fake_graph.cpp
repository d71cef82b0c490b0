// CUDA graphs for the fake CUDA runtime (fake_cudart.cpp), linked into the same library: a
// graph is a list of nodes (kernels with their argument bytes copied, 1-D copies, memsets,
// empty nodes) with dependencies; an instantiated graph launches its nodes in an order that
// respects them (the order they were added in, every dependency being added first), through
// the fake's own stream calls (cudaLaunchKernel, cudaMemcpyAsync, cudaMemsetAsync), so, as on
// a GPU, a launch runs after what its stream had before and before what comes after it. It
// does not model the concurrency of a graph's branches; it checks flowlane's side: which
// nodes, which edges, one launch per replay, what is destroyed.
//
// Counters and failure injection for the tests (extern "C", as the fake's own):
//   fake_cudart_graph_launches()        cudaGraphLaunch calls that succeeded
//   fake_cudart_graph_nodes_launched()  nodes they ran
//   fake_cudart_graphs_alive()          graphs and instances created and not destroyed
//   fake_cudart_fail_graph_launches(n)  the next n cudaGraphLaunch calls fail
//   fake_cudart_last_graph_edges()      edges of the graph instantiated last
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "fake_kernel.hpp"

struct CUgraphNode_st {
  enum Kind { kKernel, kMemcpy, kMemset, kEmpty } kind = kEmpty;
  const void* func = nullptr;
  dim3 grid, block;
  size_t shared = 0;
  std::vector<std::vector<unsigned char>> args;
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
  cudaMemcpyKind copy = cudaMemcpyDefault;
  int value = 0;
  struct CUgraph_st* owner = nullptr;
  std::vector<CUgraphNode_st*> deps;
};

struct CUgraph_st {
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;
};

struct CUgraphExec_st {
  std::vector<CUgraphNode_st> nodes;  // copies, in launch order
};

namespace {
std::atomic<long> g_launches{0};
std::atomic<long> g_nodes_launched{0};
std::atomic<long> g_alive{0};
std::atomic<int> g_fail_launches{0};
std::atomic<long> g_last_edges{0};

cudaError_t add(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n,
                std::unique_ptr<CUgraphNode_st> node) {
  if (out == nullptr || g == nullptr || (n > 0 && deps == nullptr)) return cudaErrorInvalidValue;
  for (size_t k = 0; k < n; ++k)
    if (deps[k] == nullptr || deps[k]->owner != g) return cudaErrorInvalidValue;  // not a node of g
  node->owner = g;
  node->deps.assign(deps, deps + n);
  *out = node.get();
  g->nodes.push_back(std::move(node));
  return cudaSuccess;
}
}  // namespace

extern "C" {

long fake_cudart_graph_launches() { return g_launches.load(); }
long fake_cudart_graph_nodes_launched() { return g_nodes_launched.load(); }
long fake_cudart_graphs_alive() { return g_alive.load(); }
void fake_cudart_fail_graph_launches(int n) { g_fail_launches.store(n); }
long fake_cudart_last_graph_edges() { return g_last_edges.load(); }

cudaError_t cudaGraphCreate(cudaGraph_t* g, unsigned int flags) {
  if (g == nullptr || flags != 0) return cudaErrorInvalidValue;
  *g = new CUgraph_st();
  g_alive.fetch_add(1);
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  if (g == nullptr) return cudaErrorInvalidValue;
  delete g;
  g_alive.fetch_sub(1);
  return cudaSuccess;
}

cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n,
                                   const cudaKernelNodeParams* p) {
  if (p == nullptr || p->func == nullptr) return cudaErrorInvalidValue;
  auto node = std::make_unique<CUgraphNode_st>();
  node->kind = CUgraphNode_st::kKernel;
  node->func = p->func;
  node->grid = p->gridDim;
  node->block = p->blockDim;
  node->shared = p->sharedMemBytes;
  const auto* k = static_cast<const fake::Kernel*>(p->func);
  for (int a = 0; a < k->nargs; ++a) {  // the argument values are copied now, as CUDA does
    const auto* b = static_cast<const unsigned char*>(p->kernelParams[a]);
    node->args.emplace_back(b, b + k->sizes[a]);
  }
  return add(out, g, deps, n, std::move(node));
}

cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n,
                                     void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (dst == nullptr || src == nullptr || bytes == 0) return cudaErrorInvalidValue;
  auto node = std::make_unique<CUgraphNode_st>();
  node->kind = CUgraphNode_st::kMemcpy;
  node->dst = dst;
  node->src = src;
  node->bytes = bytes;
  node->copy = kind;
  return add(out, g, deps, n, std::move(node));
}

cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n,
                                   const cudaMemsetParams* p) {
  if (p == nullptr || p->dst == nullptr || p->elementSize != 1 || p->height != 1) return cudaErrorInvalidValue;
  auto node = std::make_unique<CUgraphNode_st>();
  node->kind = CUgraphNode_st::kMemset;
  node->dst = p->dst;
  node->value = int(p->value);
  node->bytes = p->width;
  return add(out, g, deps, n, std::move(node));
}

cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n) {
  return add(out, g, deps, n, std::make_unique<CUgraphNode_st>());
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t g, unsigned long long) {
  if (exec == nullptr || g == nullptr) return cudaErrorInvalidValue;
  auto* e = new CUgraphExec_st();
  long edges = 0;
  for (const auto& node : g->nodes) {
    e->nodes.push_back(*node);  // every dependency was added before: this order respects them
    edges += long(node->deps.size());
  }
  g_last_edges.store(edges);
  *exec = e;
  g_alive.fetch_add(1);
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
  if (e == nullptr) return cudaErrorInvalidValue;
  delete e;
  g_alive.fetch_sub(1);
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
  if (e == nullptr || s == nullptr) return cudaErrorInvalidValue;
  for (int n = g_fail_launches.load(); n > 0;)
    if (g_fail_launches.compare_exchange_weak(n, n - 1)) return cudaErrorLaunchFailure;
  for (const CUgraphNode_st& node : e->nodes) {
    cudaError_t r = cudaSuccess;
    switch (node.kind) {
      case CUgraphNode_st::kKernel: {
        std::vector<void*> args;
        for (const auto& a : node.args) args.push_back(const_cast<unsigned char*>(a.data()));
        r = cudaLaunchKernel(node.func, node.grid, node.block, args.data(), node.shared, s);
        break;
      }
      case CUgraphNode_st::kMemcpy: r = cudaMemcpyAsync(node.dst, node.src, node.bytes, node.copy, s); break;
      case CUgraphNode_st::kMemset: r = cudaMemsetAsync(node.dst, node.value, node.bytes, s); break;
      case CUgraphNode_st::kEmpty: break;
    }
    if (r != cudaSuccess) return r;
  }
  g_launches.fetch_add(1);
  g_nodes_launched.fetch_add(long(e->nodes.size()));
  return cudaSuccess;
}

}  // extern "C"
