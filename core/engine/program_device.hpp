// How a program's device work is built and replayed (core/engine/README.md, "Capture and
// replay"), without the engine knowing any device API: a ProgramDevice (the CUDA graphs of
// gpu/graph.cpp) plugs in through EngineServices::program_device.
//
// At capture end the engine groups a program's device instructions into *units*: each
// group of kernels, copies and memsets that no host instruction or device function of the
// program separates becomes one graph (a unit); each device function is a unit of its own
// (it runs at every launch). build() makes and instantiates the graphs; the engine then
// replays the units in a topological order, on the program's own device stream
// (issue_unit), and a host instruction that depends on a unit waits for it (wait_unit). A
// program with device work only can also be launched on a device stream: its launch is
// then an asynchronous instruction whose issue runs stream_launch_fn().
//
// Threads: build() and destroy() run on the thread that ends the capture or frees the
// program; issue_unit() and wait_unit() on the threads that replay the program (one launch
// at a time: launches of a program are ordered); stream_launch_fn() on the lane runner.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "flowlane/flowlane.h"

namespace flowlane::core {

struct Stream;
class Program;

// What build() gets: the program's device instructions and how they are grouped.
struct ProgramDeviceDesc {
  int device = 0;  // the one device of the program's device work
  // One device instruction: the backend's record (Instr::device, owned by the program),
  // its stream, and for a device function its user data.
  struct Node {
    const void* record = nullptr;
    const Stream* stream = nullptr;
    void* user_data = nullptr;
    uint32_t node = 0;  // its index in the program (a device function's context names it)
  };
  std::vector<Node> nodes;
  // The units, in the order a launch issues them: a graph (its nodes, indices into
  // `nodes`, and the edges between them, pairs of positions in that list) or a device
  // function (one node, `graph` false).
  struct Unit {
    bool graph = true;
    std::vector<uint32_t> nodes;
    std::vector<std::pair<uint32_t, uint32_t>> edges;
  };
  std::vector<Unit> units;
};

class ProgramDevice {
 public:
  virtual ~ProgramDevice() = default;

  // Why programs cannot hold device work in this process ("" when they can): the runtime
  // lacks the graph calls, say. Asked when a device instruction is captured.
  virtual std::string unavailable() = 0;
  // Whether a captured device instruction becomes a graph node (a kernel, copy or memset)
  // rather than running at every launch (a device function).
  virtual bool is_graph_node(const void* record) = 0;
  // Builds and instantiates the units' graphs and what a replay needs (a device stream,
  // an event per unit). Throws flowlane::Error (FL_ERR_CUDA with the runtime's message,
  // FL_ERR_NO_MEMORY). The result is the program's, freed by destroy().
  virtual void* build(const ProgramDeviceDesc& desc) = 0;
  virtual void destroy(void* state) = 0;

  // A launch on a host stream: enqueues unit `unit` (its graph, or its device function,
  // called with `ctx`) on the program's device stream, after everything issued before it
  // there, and marks its end. FL_OK, or a failure with *detail set.
  virtual fl_status_t issue_unit(void* state, uint32_t unit, fl_instr_ctx_t* ctx, std::string* detail) = 0;
  // Blocks the calling thread (helping with its own work first, when it is a worker) until
  // what issue_unit(unit) enqueued has completed on the device. FL_OK, or the device's
  // failure with *detail set.
  virtual fl_status_t wait_unit(void* state, uint32_t unit, std::string* detail) = 0;

  // The function of a launch on a device stream (user_data: the Program): enqueues every
  // unit, in order, on the launch's own device stream.
  virtual fl_host_fn stream_launch_fn() = 0;
};

}  // namespace flowlane::core
