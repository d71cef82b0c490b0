// The common path of every fl_submit_*: operand resolution, the instruction record, the
// window, and queueing on the stream's lane.
#include <algorithm>
#include <string>

#include "capi/src/capi_common.hpp"
#include "core/handles.hpp"

namespace flowlane {

HandleTable<core::Object>& object_table();

namespace {

using core::Engine;
using core::Object;

// Resolves operands into the instruction: handles checked, objects of this engine only,
// duplicates merged into one operand with the union of their accesses.
void resolve_operands(core::Instr* i, Engine& e, const fl_operand_t* ops, uint64_t n, const char* fn) {
  if (n > 0 && ops == nullptr)
    fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": operands is NULL but num_operands is " + std::to_string(n));
  if (n > (1u << 20))
    fail(FL_ERR_OUT_OF_RANGE, std::string(fn) + ": num_operands " + std::to_string(n) + " exceeds 1048576");
  i->operands.clear();
  for (uint64_t k = 0; k < n; ++k) {
    const fl_operand_t& op = ops[k];
    // The message prefix is built only on an error path: this loop is per operand, per submit.
    auto where = [&] { return std::string(fn) + ": operand " + std::to_string(k); };
    if (op.access == 0 || (op.access & ~uint32_t(FL_READ_WRITE)) != 0)
      fail(FL_ERR_INVALID_ARGUMENT, where() + " has access " + std::to_string(op.access) +
                                        "; use FL_READ (1), FL_WRITE (2) or FL_READ_WRITE (3)");
    if (op.reserved != 0) fail(FL_ERR_INVALID_ARGUMENT, where() + " has a non-zero reserved field");
    if (op.object == nullptr) fail(FL_ERR_INVALID_HANDLE, where() + " has a NULL object");
    Object* o = object_table().lookup(handle_bits(op.object));
    if (o == nullptr)
      fail(FL_ERR_INVALID_HANDLE, where() + " names a stale (released) object or is not an object handle");
    if (o->engine != &e) fail(FL_ERR_INVALID_HANDLE, where() + " names an object that belongs to another engine");
    i->operands.push_back(core::Operand{o, op.access});
  }
  auto& v = i->operands;
  if (v.size() > 1) {
    std::sort(v.begin(), v.end(), [](const core::Operand& a, const core::Operand& b) { return a.obj < b.obj; });
    size_t out = 0;
    for (size_t k = 0; k < v.size(); ++k) {
      if (out > 0 && v[out - 1].obj == v[k].obj)
        v[out - 1].access |= v[k].access;
      else
        v[out++] = v[k];
    }
    v.resize(out);
  }
}

// Returns an unsubmitted record to the pool when submission fails half-way.
struct InstrGuard {
  Engine& e;
  core::Instr* i;
  ~InstrGuard() {
    if (i != nullptr) {
      i->operands.clear();
      i->deps.clear();
      e.recycle(i);
    }
  }
};

}  // namespace

fl_instr_id submit_instruction(core::Stream* s, const SubmitArgs& a) {
  Engine& e = *s->engine;
  InstrGuard g{e, e.new_instr()};
  core::Instr* i = g.i;
  resolve_operands(i, e, a.operands, a.num_operands, a.api);
  i->kind = a.kind;
  i->stream = s;
  i->fn = a.fn;
  i->user_data = a.user_data;
  i->cleanup = a.cleanup;
  if (a.name != nullptr)
    i->name.assign(a.name);
  else
    i->name.clear();
  if (a.fill != nullptr) a.fill(i, a.fill_ctx);
  if (e.shutting_down()) fail(FL_ERR_SHUTDOWN, std::string(a.api) + ": the engine is being destroyed");
  e.admit(a.nonblocking);
  fl_instr_id id;
  try {
    id = e.submit(i);
  } catch (...) {
    e.retire_window_slot();
    throw;
  }
  g.i = nullptr;
  return id;
}

}  // namespace flowlane
