// Compiling a capture into a program (Capture::finish; core/engine/README.md, "Capture and
// replay", "The schedule"): the units of device work and their order, the chains a
// parallel replay runs as tasks, the launch's operands, and the device part's graphs
// (built last: every step before may throw and leaves the capture as it was).
#include <algorithm>
#include <numeric>
#include <string>

#include "engine/capture.hpp"
#include "engine/engine.hpp"
#include "engine/program_device.hpp"
#include "engine/schedule.hpp"

namespace flowlane::core {


// Host work only: the units are the nodes, capture order is a topological order (every
// edge points to a later node) and sequential replays need no order list.
void Capture::compile_schedule(Program& p) {
  const uint32_t n = size();
  // Host work only: the parallel schedule is built by the first launch that runs in
  // parallel (Program::build_schedule), from the edges finish() hands over; a sequential
  // replay needs none of it (capture order).
  if (!records_.empty()) {
    compile_device(p);
    p.finish_schedule();
  }
  p.run_.status.assign(n, 0);
  p.run_.ext_poison.assign(ext_slots_, nullptr);
  if (p.device_units_ > 0) p.run_.unit_state.reset(new std::atomic<uint8_t>[p.device_units_]);

  // The launch's operands: every object with the union of its accesses, and the program's
  // phony object, written by every launch so that launches run one at a time, in order.
  p.launch_ops_.reserve(objs_.size() + 1);
  p.objects_.reserve(objs_.size() + 1);
  p.ext_.reserve(ext_slots_);
  for (const CapObj& co : objs_) {
    if (co.access == 0) continue;  // added by a submission that failed
    p.launch_ops_.push_back(Operand{co.obj, co.access});
    if (co.ext_slot != kNoNode) p.ext_.emplace_back(co.obj, co.ext_slot);
  }
  std::sort(p.ext_.begin(), p.ext_.end());
  p.records_.reserve(records_.size());
}

// Device work (core/engine/README.md, "Device work in programs"). Each node gets a level:
// the number of barriers (host nodes and device functions) on the longest path before it.
// The graph nodes of one level form one unit (one graph): no path between two of them
// passes through a barrier, so the units form a DAG with the barriers (a unit of level d
// precedes only barriers of level >= d and units of higher levels). The units are issued,
// in a topological order, on the program's one device stream.
void Capture::compile_device(Program& p) {
  const uint32_t n = size();
  std::vector<uint32_t> level(n, 0);
  for (const auto& [pr, s] : edges_)  // grouped by successor, in capture order
    level[s] = std::max(level[s], level[pr] + (nodes_[pr].kind == NodeKind::kGraph ? 0u : 1u));
  // Units: each host node and device function; one per level of graph nodes.
  UnitGraph g;
  std::vector<uint32_t> unit_of(n), unit_of_level;
  for (uint32_t v = 0; v < n; ++v) {
    if (nodes_[v].kind != NodeKind::kGraph) {
      unit_of[v] = g.count();
      g.code.push_back(v);
      continue;
    }
    if (unit_of_level.size() <= level[v]) unit_of_level.resize(level[v] + 1, kNoNode);
    if (unit_of_level[level[v]] == kNoNode) {
      unit_of_level[level[v]] = g.count();
      g.code.push_back(kNoNode);  // numbered below
    }
    unit_of[v] = unit_of_level[level[v]];
  }
  std::vector<std::pair<uint32_t, uint32_t>> unit_edges;
  for (const auto& [pr, s] : edges_)
    if (unit_of[pr] != unit_of[s]) unit_edges.emplace_back(unit_of[pr], unit_of[s]);
  std::sort(unit_edges.begin(), unit_edges.end());
  unit_edges.erase(std::unique(unit_edges.begin(), unit_edges.end()), unit_edges.end());
  link(g, unit_edges);
  sort_topologically(g);

  // Device units numbered in that order (the order of a launch on a device stream).
  const uint32_t units = g.count();
  std::vector<uint32_t> device_unit(units, kNoNode);
  uint32_t ndev = 0;
  for (uint32_t u : g.order) {
    const bool host = g.code[u] != kNoNode && nodes_[g.code[u]].kind == NodeKind::kHost;
    if (!host) device_unit[u] = ndev++;
  }
  // Each device unit's nodes (in capture order), and the desc the device part builds from.
  std::vector<uint32_t> dev_index(n, kNoNode);  // a device node's index among records_
  for (uint32_t r = 0; r < records_.size(); ++r) dev_index[records_[r].node] = r;
  ProgramDeviceDesc desc;
  desc.device = device_;
  for (const DeviceNode& d : records_)
    desc.nodes.push_back(ProgramDeviceDesc::Node{d.record, d.stream, nodes_[d.node].user_data, d.node});
  desc.units.resize(ndev);
  std::vector<uint32_t> position(n, kNoNode);  // a graph node's position in its unit
  for (uint32_t v = 0; v < n; ++v) {
    const uint32_t du = device_unit[unit_of[v]];
    if (du == kNoNode) continue;
    ProgramDeviceDesc::Unit& unit = desc.units[du];
    unit.graph = nodes_[v].kind == NodeKind::kGraph;
    position[v] = uint32_t(unit.nodes.size());
    unit.nodes.push_back(dev_index[v]);
  }
  for (const auto& [pr, s] : edges_)
    if (unit_of[pr] == unit_of[s] && nodes_[s].kind == NodeKind::kGraph)
      desc.units[device_unit[unit_of[s]]].edges.emplace_back(position[pr], position[s]);
  p.dev_unit_begin_.assign(1, 0);
  for (uint32_t du = 0; du < ndev; ++du) {
    for (uint32_t r : desc.units[du].nodes) p.dev_unit_nodes_.push_back(records_[r].node);
    p.dev_unit_begin_.push_back(uint32_t(p.dev_unit_nodes_.size()));
  }
  // What each host node waits for on the device: its device units among its predecessors
  // (a unit issued before one of them is covered by it: one stream, issued in order).
  std::vector<std::vector<uint32_t>> waits(n);
  for (const auto& [pu, su] : unit_edges)
    if (device_unit[pu] != kNoNode && device_unit[su] == kNoNode) waits[g.code[su]].push_back(device_unit[pu]);
  p.dev_wait_begin_.assign(1, 0);
  for (uint32_t v = 0; v < n; ++v) {
    p.dev_wait_.insert(p.dev_wait_.end(), waits[v].begin(), waits[v].end());
    p.dev_wait_begin_.push_back(uint32_t(p.dev_wait_.size()));
  }
  for (uint32_t u = 0; u < units; ++u)
    if (device_unit[u] != kNoNode) g.code[u] = Program::kDeviceUnit | device_unit[u];
  p.order_.reserve(units);
  for (uint32_t u : g.order) p.order_.push_back(g.code[u]);
  compile_tasks(g, p);
  p.device_units_ = ndev;
  p.device_ = device_;
  p.device_api_ = engine_->program_device();
  pending_desc_ = std::move(desc);
}

std::unique_ptr<Program> Capture::finish() {
  auto p = std::make_unique<Program>(*engine_, name_);
  compile_schedule(*p);
  // The phony object, then the device graphs: the last steps that may throw.
  Object* phony = engine_->objects().create(nullptr, nullptr);
  try {
    if (!records_.empty()) {
      p->device_state_ = p->device_api_->build(pending_desc_);
      pending_desc_ = ProgramDeviceDesc();
    }
  } catch (...) {
    engine_->objects().release_ref(phony);
    throw;
  }
  // --- from here on nothing throws: the capture's state becomes the program's ---
  p->launch_ops_.push_back(Operand{phony, FL_WRITE});  // reserved by compile_schedule
  merge_operands(p->launch_ops_);  // sorted by address, as records lock them (no allocation)
  for (const CapObj& co : objs_)
    if (co.access != 0) p->objects_.push_back(co.obj);  // the capture's references, now the program's
  p->objects_.push_back(phony);
  objs_.clear();
  p->edge_count_ = edges_.size();
  if (records_.empty()) p->edges_.swap(edges_);  // host work only: for the parallel schedule
  for (const DeviceNode& d : records_) p->records_.emplace_back(d.record, d.record_free);
  records_.clear();
  p->host_nodes_ = host_nodes_;
  p->nodes_.swap(nodes_);
  p->read_end_.swap(read_end_);
  p->name_at_.swap(name_at_);
  p->names_ = std::move(names_);
  p->reads_ = std::move(reads_);
  p->ext_slots_ = ext_slots_;
  discard();  // frees the capture's working state (the nodes are the program's: no cleanup runs)
  return p;
}

}  // namespace flowlane::core
