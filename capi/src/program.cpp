// C entry points of capture and replay (fl_capture_*, fl_program_*): the engine's rules are
// in core/engine (capture.hpp, program.hpp); here only the arguments, the handles and the
// launch's submission.
#include <string>

#include "boundary.hpp"
#include "engine/capture.hpp"
#include "submit.hpp"
#include "tables.hpp"

namespace flowlane::capi {
namespace {

// A launch's cleanup: its reference on the program (the last one frees it).
void drop_program(void* program) { static_cast<core::Program*>(program)->unref(); }

// The launch function for `s`: the engine's replay on a host stream; on a device stream
// (a program with device work only, on its device) the device part's.
fl_host_fn launch_fn(const core::Program& p, const core::Stream& s, const char* fn) {
  if (s.is_host_executed()) {
    if (s.kind != FL_STREAM_HOST)
      fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": the stream (" + s.describe() +
                                        ") is not a FL_STREAM_HOST stream; launch programs on a host stream");
    return &core::replay_launch;
  }
  if (p.has_host_work())
    fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": the program has host instructions, which a device stream (" +
                                      s.describe() + ") cannot run; launch it on a host stream");
  if (!p.has_device_work())
    fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": the program has no device work; launch it on a host stream");
  if (s.device.index != p.device())
    fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": the program's device work is on CUDA device " +
                                      std::to_string(p.device()) + ", the stream (" + s.describe() + ") on device " +
                                      std::to_string(s.device.index));
  return s.engine->program_device()->stream_launch_fn();
}

}  // namespace
}  // namespace flowlane::capi

using namespace flowlane;
using namespace flowlane::capi;

extern "C" {

FL_API fl_status_t fl_capture_begin(fl_engine_t* engine, const fl_capture_desc_t* desc) {
  return guard([&] {
    const char* fn = "fl_capture_begin";
    core::Engine* e = engine_from(engine, fn);
    const char* name = nullptr;
    if (desc != nullptr) {
      check_desc(desc, fn, "fl_capture_desc_t");
      if (desc->flags != 0)
        fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": flags " + std::to_string(desc->flags) + " are unknown (use 0)");
      name = desc->name;
    }
    core::begin_capture(*e, name);
    return FL_OK;
  });
}

FL_API fl_status_t fl_capture_end(fl_engine_t* engine, fl_program_t** out_program) {
  return guard([&] {
    core::Engine* e = engine_from(engine, "fl_capture_end");
    std::unique_ptr<core::Program> p = core::end_capture(*e, out_program != nullptr);
    if (out_program == nullptr) return FL_OK;  // discarded
    const uint64_t h = program_table().insert(p.get());
    if (h == 0) {
      e->programs().remove(p.get());
      p->free_resources();
      fail(FL_ERR_NO_MEMORY, "fl_capture_end: the process-wide program table is full");
    }
    p->handle = h;
    *out_program = handle_cast<fl_program_t>(h);
    p.release();  // owned by its references from now on (the handle's first)
    return FL_OK;
  });
}

FL_API fl_status_t fl_program_launch(fl_program_t* program, fl_stream_t* stream, uint64_t flags,
                                     fl_instr_id* out_instr_id) {
  return guard([&] {
    const char* fn = "fl_program_launch";
    core::Program* p = program_from(program, fn);
    core::Stream* s = stream_from(stream, fn);
    core::Engine& e = p->engine();
    if (s->engine != &e)
      fail(FL_ERR_INVALID_HANDLE, std::string(fn) + ": the stream belongs to another engine than the program (a "
                                                    "program is launched on the engine it was captured on)");
    core::refuse_if_capturing(e, fn);
    check_submit_flags(flags, fn, s->is_host_executed());
    core::SubmitArgs a;
    a.fn = launch_fn(*p, *s, fn);
    a.user_data = p;
    a.cleanup = &drop_program;
    a.name = p->launch_name().c_str();
    a.nonblocking = (flags & FL_SUBMIT_NONBLOCKING) != 0;
    a.run_inline = (flags & FL_SUBMIT_INLINE) != 0;
    a.api = fn;
    core::Instr* i = e.new_instr();
    try {
      i->operands.assign(p->launch_operands().begin(), p->launch_operands().end());
    } catch (...) {
      e.discard(i);
      throw;
    }
    p->ref();  // the launch's: dropped by its cleanup
    fl_instr_id id;
    try {
      id = e.submit(s, i, a);
    } catch (...) {
      p->unref();
      throw;
    }
    if (out_instr_id) *out_instr_id = id;
    return FL_OK;
  });
}

FL_API fl_status_t fl_program_info(fl_program_t* program, fl_program_info_t* out_info) {
  return guard([&] {
    const char* fn = "fl_program_info";
    core::Program* p = program_from(program, fn);
    require_out(out_info, fn, "out_info");
    const uint64_t size = out_info->struct_size;
    if (size < sizeof(uint64_t) * 2)
      fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": out_info->struct_size must be set (FL_PROGRAM_INFO_INIT)");
    fl_program_info_t in = p->info();
    const size_t n = std::min<uint64_t>(size, sizeof(in));
    std::memcpy(reinterpret_cast<char*>(out_info) + sizeof(uint64_t), reinterpret_cast<char*>(&in) + sizeof(uint64_t),
                n - sizeof(uint64_t));
    return FL_OK;
  });
}

FL_API fl_status_t fl_program_destroy(fl_program_t* program) {
  return guard([&] {
    if (program == nullptr) return FL_OK;
    core::Program* p = program_from(program, "fl_program_destroy");
    if (program_table().erase(handle_bits(program)) == nullptr)
      fail(FL_ERR_INVALID_HANDLE, "fl_program_destroy: the program was destroyed concurrently");
    p->unref();  // the handle's reference: launches in flight keep the program until they complete
    return FL_OK;
  });
}

}  // extern "C"
