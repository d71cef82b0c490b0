// Programs: their lifetime, what they report (fl_program_info, the state dump) and the
// engine's registry of programs and open captures (engine/program.hpp).
#include "engine/program.hpp"

#include <algorithm>
#include <string>

#include "engine/capture.hpp"
#include "engine/engine.hpp"
#include "engine/program_device.hpp"

namespace flowlane::core {

namespace {

// The engine's programs in its state dump: attached at the first program.
class ProgramsDump final : public Extension {
 public:
  explicit ProgramsDump(const Programs& p) : programs_(p) {}
  void dump(std::string& out) override { programs_.dump(out); }

 private:
  const Programs& programs_;
};

const char kDumpKey = 0;  // the extension's key: its address

template <class V>
size_t bytes_of(const V& v) {
  return v.capacity() * sizeof(typename V::value_type);
}

}  // namespace

Program::Program(Engine& e, std::string name)
    : engine_(e), name_(std::move(name)), launch_name_(name_.empty() ? "program launch" : "launch of '" + name_ + "'") {}

Program::~Program() {
  // A program is deleted after free_resources() (unref, Programs::release_all), or before
  // anything was handed to it (a capture whose compilation failed).
}

void Program::unref() {
  // acq_rel: the last dropper sees every other holder's writes (pairs with the other
  // droppers' fetch_sub).
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  engine_.programs().remove(this);
  free_resources();
  delete this;
}

void Program::free_resources() {
  if (freed_) return;
  freed_ = true;
  if (!nodes_.empty()) {
    // Each captured instruction's cleanup, once (its user data lived as long as the program).
    CallbackScope frame(&engine_, nullptr, CallbackKind::kCleanup);
    for (const ProgramNode& nd : nodes_) {
      if (nd.cleanup == nullptr) continue;
      try {
        nd.cleanup(nd.user_data);
      } catch (...) {
        // A cleanup callback must not throw; nothing to report it to.
      }
    }
  }
  if (device_state_ != nullptr) device_api_->destroy(device_state_);
  device_state_ = nullptr;
  for (auto& [rec, free_rec] : records_) free_rec(rec);
  records_.clear();
  // The objects' references last: a release callback runs once the program no longer
  // uses its object.
  for (Object* o : objects_) engine_.objects().release_ref(o);
  objects_.clear();
}

size_t Program::bytes() const {
  size_t b = sizeof(*this) + name_.capacity();
  b += bytes_of(nodes_) + bytes_of(name_at_) + names_.capacity() + bytes_of(read_end_) + bytes_of(reads_);
  b += bytes_of(ext_) + bytes_of(launch_ops_) + bytes_of(objects_) + bytes_of(records_) + bytes_of(edges_);
  b += bytes_of(order_) + bytes_of(dev_wait_begin_) + bytes_of(dev_wait_) + bytes_of(dev_unit_begin_) +
       bytes_of(dev_unit_nodes_);
  b += bytes_of(chain_) + bytes_of(task_succ_) + bytes_of(roots_) + size_t(ntasks_) * sizeof(TaskRec);
  b += bytes_of(run_.status) + bytes_of(run_.ext_poison) + (run_.pending ? size_t(ntasks_) * sizeof(uint32_t) : 0);
  return b;
}

fl_program_info_t Program::info() const {
  fl_program_info_t in{};
  in.struct_size = sizeof(in);
  in.instructions = nodes_.size();
  in.host_instructions = host_nodes_;
  in.edges = edge_count_;
  // Acquire: pairs with the release store in finish_schedule() (0 until a launch built it).
  in.tasks = schedule_built_.load(std::memory_order_acquire) ? ntasks_ : 0;
  in.device_graphs = 0;
  for (uint32_t du = 0; du < device_units_; ++du) {
    const uint32_t first = dev_unit_nodes_[dev_unit_begin_[du]];
    if (nodes_[first].kind == NodeKind::kGraph) ++in.device_graphs;
  }
  in.operands = launch_ops_.size();
  in.bytes = bytes();
  in.launches = launches_.load(std::memory_order_relaxed);  // a count for reports: orders nothing
  return in;
}

std::string Program::describe_node(uint32_t k) const {
  std::string s = "'";
  s += node_name(k);
  s += "' (#" + std::to_string(k) + " of program '" + (name_.empty() ? std::string("<unnamed>") : name_) + "', lane " +
       std::to_string(nodes_[k].lane) + ")";
  return s;
}

// ---------------------------------------------------------------------------------------
// The registry

void Programs::add(Program* p) {
  bool attach = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    programs_.push_back(p);
    attach = !dump_attached_;
    dump_attached_ = true;
  }
  if (attach) {
    try {
      engine_.attach(&kDumpKey, std::make_unique<ProgramsDump>(*this));
    } catch (...) {
      // Out of memory: the dump does not list programs; nothing else depends on it.
    }
  }
}

void Programs::remove(Program* p) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find(programs_.begin(), programs_.end(), p);
  if (it != programs_.end()) programs_.erase(it);
}

void Programs::add_capture(Capture* c) {
  std::lock_guard<std::mutex> lock(mu_);
  captures_.push_back(c);
}

void Programs::remove_capture(Capture* c) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find(captures_.begin(), captures_.end(), c);
  if (it != captures_.end()) captures_.erase(it);
}

size_t Programs::live() const {
  std::lock_guard<std::mutex> lock(mu_);
  return programs_.size();
}

void Programs::release_all() {
  std::vector<Capture*> captures;
  std::vector<Program*> programs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    captures.swap(captures_);
    programs.swap(programs_);
  }
  // Outside the lock: cleanups run (and may call in: submissions answer FL_ERR_SHUTDOWN).
  for (Capture* c : captures) c->kill();
  for (Program* p : programs) {
    engine_.forget_handle(p->handle);  // stale from now on
    p->handle = 0;
    p->free_resources();
    delete p;
  }
}

void Programs::dump(std::string& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (programs_.empty() && captures_.empty()) return;
  out += "programs: " + std::to_string(programs_.size()) + " (captures open: " + std::to_string(captures_.size()) +
         ")\n";
  for (const Program* p : programs_) {
    const uint64_t id = p->running_id();
    if (id == 0) continue;
    out += "  launch #" + std::to_string(id) + " of program '" + (p->name().empty() ? "<unnamed>" : p->name()) +
           "': " + std::to_string(std::min<uint64_t>(p->progress(), p->size())) + " of " + std::to_string(p->size()) +
           " instructions done\n";
  }
}

}  // namespace flowlane::core
