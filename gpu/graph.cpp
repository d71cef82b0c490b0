// Programs' device work as CUDA graphs (gpu/graph.hpp; gpu/README.md, "Programs: CUDA
// graphs"): each unit of kernels, copies and memsets becomes one graph, built from the
// launch descriptions the submissions copied (launch.cpp) and instantiated once; a device
// function stays a call. A launch on a host stream issues the units on the program's own
// CUDA stream, an event after each; a launch on a CUDA stream issues them on that stream.
#include "gpu/graph.hpp"

#if FLOWLANE_HAVE_CUDA

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.hpp"
#include "gpu/cuda.hpp"
#include "gpu/poller.hpp"
#include "sched/pool.hpp"

namespace flowlane::gpu {

namespace {

// A program's device part.
struct Graphs {
  int device = 0;
  struct Unit {
    cudaGraph_t graph = nullptr;     // a graph unit's graph, and its instance
    cudaGraphExec_t exec = nullptr;
    fl_device_fn fn = nullptr;       // a device function unit's function, user data and node
    void* user_data = nullptr;
    uint32_t node = 0;
    cudaEvent_t event = nullptr;     // recorded after the unit on `stream` (host-stream launches)
  };
  std::vector<Unit> units;
  cudaStream_t stream = nullptr;  // the program's own CUDA stream (host-stream launches)
};

const DeviceRecord& record(const void* r) { return *static_cast<const DeviceRecord*>(r); }

Op op_of(const void* r) {
  Op op;
  std::memcpy(&op, record(r).payload.data(), sizeof op);
  return op;
}

[[noreturn]] void cuda_fail(cudaError_t r, const std::string& what) {
  (void)cu().cudaGetLastError();  // consumed: reported here
  fail(r == cudaErrorMemoryAllocation ? FL_ERR_NO_MEMORY : FL_ERR_CUDA, "fl_capture_end: " + cuda_message(r, what.c_str()));
}

void check(cudaError_t r, const char* call) {
  if (r != cudaSuccess) cuda_fail(r, call);
}

void free_graphs(Graphs* g) {
  if (g == nullptr) return;
  (void)make_current(g->device);
  for (Graphs::Unit& u : g->units) {
    if (u.exec != nullptr) (void)cu_graph().cudaGraphExecDestroy(u.exec);
    if (u.graph != nullptr) (void)cu_graph().cudaGraphDestroy(u.graph);
    if (u.event != nullptr) (void)cu().cudaEventDestroy(u.event);
  }
  if (g->stream != nullptr) (void)cu().cudaStreamDestroy(g->stream);
  (void)cu().cudaGetLastError();
  delete g;
}

// Adds node `rec` to `graph` after `deps`: a kernel (its copied arguments), a copy or a
// memset (an empty node for 0 bytes).
cudaGraphNode_t add_node(cudaGraph_t graph, const void* rec, const std::vector<cudaGraphNode_t>& deps) {
  const std::vector<unsigned char>& payload = record(rec).payload;
  cudaGraphNode_t node = nullptr;
  const cudaGraphNode_t* d = deps.empty() ? nullptr : deps.data();
  switch (op_of(rec)) {
    case Op::kKernel: {
      KernelHeader h;
      std::memcpy(&h, payload.data(), sizeof h);
      std::vector<void*> args(h.num_args);
      for (uint32_t k = 0; k < h.num_args; ++k) {
        uint32_t o;
        std::memcpy(&o, payload.data() + sizeof(KernelHeader) + k * sizeof(uint32_t), sizeof o);
        args[k] = const_cast<unsigned char*>(payload.data() + o);  // CUDA copies the values
      }
      cudaKernelNodeParams p{};
      p.func = const_cast<void*>(h.func);
      p.gridDim = dim3(h.grid[0], h.grid[1], h.grid[2]);
      p.blockDim = dim3(h.block[0], h.block[1], h.block[2]);
      p.sharedMemBytes = unsigned(h.shared_mem_bytes);
      p.kernelParams = args.empty() ? nullptr : args.data();
      check(cu_graph().cudaGraphAddKernelNode(&node, graph, d, deps.size(), &p), "cudaGraphAddKernelNode");
      return node;
    }
    case Op::kMemcpy: {
      MemcpyHeader h;
      std::memcpy(&h, payload.data(), sizeof h);
      if (h.bytes == 0) {
        check(cu_graph().cudaGraphAddEmptyNode(&node, graph, d, deps.size()), "cudaGraphAddEmptyNode");
      } else if (h.kind == FL_MEMSET) {
        cudaMemsetParams p{};
        p.dst = h.dst;
        p.value = h.value & 0xff;
        p.elementSize = 1;
        p.width = size_t(h.bytes);
        p.height = 1;
        check(cu_graph().cudaGraphAddMemsetNode(&node, graph, d, deps.size(), &p), "cudaGraphAddMemsetNode");
      } else {
        const cudaMemcpyKind kind = h.kind == FL_MEMCPY_H2D   ? cudaMemcpyHostToDevice
                                    : h.kind == FL_MEMCPY_D2H ? cudaMemcpyDeviceToHost
                                                              : cudaMemcpyDeviceToDevice;
        check(cu_graph().cudaGraphAddMemcpyNode1D(&node, graph, d, deps.size(), h.dst, h.src, size_t(h.bytes), kind),
              "cudaGraphAddMemcpyNode1D");
      }
      return node;
    }
    default:
      fail(FL_ERR_INTERNAL, "fl_capture_end: a device function cannot be a graph node");
  }
}

// The graph of a unit: its nodes in capture order (each after the nodes its edges name).
void build_unit(Graphs::Unit& u, const core::ProgramDeviceDesc& desc, const core::ProgramDeviceDesc::Unit& du) {
  check(cu_graph().cudaGraphCreate(&u.graph, 0), "cudaGraphCreate");
  std::vector<cudaGraphNode_t> nodes(du.nodes.size(), nullptr);
  // Edges point from earlier to later positions (capture order): add in order.
  std::vector<std::vector<uint32_t>> preds(du.nodes.size());
  for (const auto& [pred, succ] : du.edges) preds[succ].push_back(pred);
  for (size_t k = 0; k < du.nodes.size(); ++k) {
    std::vector<cudaGraphNode_t> d;
    d.reserve(preds[k].size());
    for (uint32_t p : preds[k]) d.push_back(nodes[p]);
    nodes[k] = add_node(u.graph, desc.nodes[du.nodes[k]].record, d);
  }
  check(cu_graph().cudaGraphInstantiate(&u.exec, u.graph, 0), "cudaGraphInstantiate");
}

class CudaGraphs final : public core::ProgramDevice {
 public:
  std::string unavailable() override { return cuda_graph_unavailable(); }

  bool is_graph_node(const void* rec) override { return op_of(rec) != Op::kDeviceFn; }

  void* build(const core::ProgramDeviceDesc& desc) override {
    auto g = std::unique_ptr<Graphs, void (*)(Graphs*)>(new Graphs(), &free_graphs);
    g->device = desc.device;
    check(make_current(desc.device), "cudaSetDevice");
    g->units.resize(desc.units.size());
    for (size_t u = 0; u < desc.units.size(); ++u) {
      const core::ProgramDeviceDesc::Unit& du = desc.units[u];
      Graphs::Unit& unit = g->units[u];
      if (du.graph) {
        build_unit(unit, desc, du);
      } else {
        DeviceFnHeader h;
        std::memcpy(&h, record(desc.nodes[du.nodes[0]].record).payload.data(), sizeof h);
        unit.fn = h.fn;
        unit.user_data = desc.nodes[du.nodes[0]].user_data;
        unit.node = desc.nodes[du.nodes[0]].node;
      }
      check(cu().cudaEventCreateWithFlags(&unit.event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    }
    check(cu().cudaStreamCreateWithPriority(&g->stream, cudaStreamNonBlocking, 0), "cudaStreamCreateWithPriority");
    return g.release();
  }

  void destroy(void* state) override { free_graphs(static_cast<Graphs*>(state)); }

  fl_status_t issue_unit(void* state, uint32_t unit, fl_instr_ctx_t* ctx, std::string* detail) override {
    auto* g = static_cast<Graphs*>(state);
    Graphs::Unit& u = g->units[unit];
    cudaError_t r = make_current(g->device);
    if (r == cudaSuccess) {
      (void)cu().cudaGetLastError();  // whoever left it: not this unit's
      fl_status_t st = issue(u, g->stream, ctx, detail);
      if (st != FL_OK) return st;
      r = cu().cudaEventRecord(u.event, g->stream);
    }
    if (r != cudaSuccess) {
      (void)cu().cudaGetLastError();
      *detail = cuda_message(r, "cudaEventRecord");
      return FL_ERR_CUDA;
    }
    return FL_OK;
  }

  fl_status_t wait_unit(void* state, uint32_t unit, std::string* detail) override {
    auto* g = static_cast<Graphs*>(state);
    cudaEvent_t ev = g->units[unit].event;
    cudaError_t last = cudaErrorNotReady;
    auto done = [&] {
      if (last != cudaErrorNotReady) return true;
      last = cu().cudaEventQuery(ev);
      if (last == cudaErrorNotReady) (void)cu().cudaGetLastError();  // a not-ready answer is the thread's last error
      return last != cudaErrorNotReady;
    };
    // A worker helps with its own work first; then it polls, yielding (a unit's kernels
    // are short; there is no completion to sleep on without a polling thread).
    sched::wait(done, [&](const Deadline&) {
      while (!done()) std::this_thread::yield();
    });
    if (last == cudaSuccess) return FL_OK;
    (void)cu().cudaGetLastError();
    *detail = cuda_message(last, "cudaEventQuery") + " (the program's device work failed)";
    return FL_ERR_CUDA;
  }

  fl_host_fn stream_launch_fn() override { return &launch_on_stream; }

  // A unit's work on `cs`: one cudaGraphLaunch, or the device function's call.
  static fl_status_t issue(const Graphs::Unit& u, cudaStream_t cs, fl_instr_ctx_t* ctx, std::string* detail) {
    if (u.exec != nullptr) {
      cudaError_t r = cu_graph().cudaGraphLaunch(u.exec, cs);
      if (r != cudaSuccess) {
        (void)cu().cudaGetLastError();
        *detail = cuda_message(r, "cudaGraphLaunch");
        return FL_ERR_CUDA;
      }
      return FL_OK;
    }
    fl_status_t st = u.fn(ctx, static_cast<void*>(cs), u.user_data);
    cudaError_t last = cu().cudaGetLastError();
    if (st == FL_OK && last != cudaSuccess) {
      *detail = cuda_message(last, "a device function of the program");
      return FL_ERR_CUDA;
    }
    if (st != FL_OK && detail->empty()) *detail = std::string("a device function of the program returned ") + fl_status_name(st);
    return st;
  }

  // The launch's instruction on a CUDA stream (issued by CudaBackend::issue, its stream
  // current and created): every unit in order on that stream. A device function gets the
  // context of its node, as in a launch on a host stream.
  static fl_status_t launch_on_stream(fl_instr_ctx_t* ctx, void* program) {
    auto* i = reinterpret_cast<core::Instr*>(ctx);
    auto* p = static_cast<core::Program*>(program);
    auto* g = static_cast<Graphs*>(p->device_state());
    cudaStream_t cs = static_cast<cudaStream_t>(cuda_stream(i->stream));
    core::ReplayFrame frame;
    frame.program = p;
    frame.launch = i;
    core::ReplayScope scope(frame);
    for (const Graphs::Unit& u : g->units) {
      frame.node = u.node;
      std::string detail;
      fl_status_t st = issue(u, cs, frame.ctx(), &detail);
      if (st != FL_OK) {
        i->error = !frame.error.empty() ? frame.error : detail;
        return st;
      }
      if (!frame.error.empty()) frame.error.clear();
    }
    return FL_OK;
  }
};

}  // namespace

core::ProgramDevice* program_device() {
  static CudaGraphs* g = cuda_loaded() ? new CudaGraphs() : nullptr;  // never destroyed
  return g;
}

}  // namespace flowlane::gpu

#else  // CPU-only build: no CUDA stream, no device work to capture.

namespace flowlane::gpu {
core::ProgramDevice* program_device() { return nullptr; }
}  // namespace flowlane::gpu

#endif
