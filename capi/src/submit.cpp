// C entry points of host instructions (fl_submit_host, fl_instr_*), and the operand
// resolution every fl_submit_* shares: the C operands become the record's operands.
#include <string>

#include "boundary.hpp"
#include "engine/capture.hpp"
#include "submit.hpp"
#include "tables.hpp"

namespace flowlane::capi {

core::Instr* begin_submit_with_operands(core::Engine& e, const fl_operand_t* ops, uint64_t n, const char* fn) {
  if (n > 0 && ops == nullptr)
    fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": operands is NULL but num_operands is " + std::to_string(n));
  if (n > (1u << 20))
    fail(FL_ERR_OUT_OF_RANGE, std::string(fn) + ": num_operands " + std::to_string(n) + " exceeds 1048576");
  core::Instr* i = e.new_instr();
  try {
    if (!i->operands.empty()) i->operands.clear();  // recycled records have none: not written (see core::Instr)
    for (uint64_t k = 0; k < n; ++k) {
      const fl_operand_t& op = ops[k];
      // The message prefix is built only on an error path: this loop is per operand, per submit.
      auto where = [&] { return std::string(fn) + ": operand " + std::to_string(k); };
      if (op.access == 0 || (op.access & ~uint32_t(FL_READ_WRITE)) != 0)
        fail(FL_ERR_INVALID_ARGUMENT, where() + " has access " + std::to_string(op.access) +
                                          "; use FL_READ (1), FL_WRITE (2) or FL_READ_WRITE (3)");
      if (op.reserved != 0) fail(FL_ERR_INVALID_ARGUMENT, where() + " has a non-zero reserved field");
      if (op.object == nullptr) fail(FL_ERR_INVALID_HANDLE, where() + " has a NULL object");
      core::Object* o = object_table().lookup(handle_bits(op.object));
      if (o == nullptr)
        fail(FL_ERR_INVALID_HANDLE, where() + " names a stale (released) object or is not an object handle");
      if (o->engine != &e) fail(FL_ERR_INVALID_HANDLE, where() + " names an object that belongs to another engine");
      i->operands.push_back(core::Operand{o, op.access});
    }
  } catch (...) {
    e.discard(i);
    throw;
  }
  return i;
}

Ctx ctx_from(const fl_instr_ctx_t* ctx, const char* fn) {
  Ctx c;
  // A replayed function's context (a program's node: engine/program.hpp), else an
  // instruction's.
  c.replay = core::replay_frame(ctx);
  if (c.replay == nullptr) c.instr = instr_from_ctx(ctx, fn);
  return c;
}

core::Instr* instr_from_ctx(const fl_instr_ctx_t* ctx, const char* fn) {
  // A context is valid only inside the function of its instruction, on the thread running
  // it: it is looked up among this thread's callback frames, never dereferenced blindly
  // (a stale or forged pointer reads nothing).
  for (core::CallbackFrame* f = core::current_frame(); f != nullptr; f = f->parent)
    if (f->kind == core::CallbackKind::kFn && core::on_this_thread(f) &&
        static_cast<const void*>(f->instr) == static_cast<const void*>(ctx))
      return f->instr;
  set_last_error(std::string(fn) + ": " +
                 (ctx == nullptr ? std::string("ctx is NULL")
                                 : "ctx is not the context of an instruction whose function is running on this thread "
                                   "(it is valid only inside that function, on its thread)"));
  return nullptr;
}

}  // namespace flowlane::capi

using namespace flowlane;
using namespace flowlane::capi;

extern "C" {

FL_API void fl_instr_set_error(fl_instr_ctx_t* ctx, const char* message) {
  Ctx c = ctx_from(ctx, "fl_instr_set_error");
  if (!c) return;
  try {
    c.error() = message ? message : "";
    clear_last_error();
  } catch (...) {
    set_last_error("fl_instr_set_error: out of memory");
  }
}

FL_API uint32_t fl_instr_get_lane(const fl_instr_ctx_t* ctx) { return ctx_from(ctx, "fl_instr_get_lane").lane(); }

FL_API fl_instr_id fl_instr_get_id(const fl_instr_ctx_t* ctx) { return ctx_from(ctx, "fl_instr_get_id").id(); }

FL_API fl_engine_t* fl_instr_get_engine(const fl_instr_ctx_t* ctx) {
  return ctx_from(ctx, "fl_instr_get_engine").engine();
}

// The deprecated spellings: the same lookup, with their own names in messages.
FL_API uint32_t fl_instr_lane(const fl_instr_ctx_t* ctx) { return ctx_from(ctx, "fl_instr_lane").lane(); }

FL_API fl_engine_t* fl_instr_engine(const fl_instr_ctx_t* ctx) { return ctx_from(ctx, "fl_instr_engine").engine(); }

FL_API fl_status_t fl_instr_query(fl_stream_t* stream, fl_instr_id id, uint32_t* out_state) {
  return guard([&] {
    core::Stream* s = stream_from(stream, "fl_instr_query");
    core::refuse_if_capturing(*s->engine, "fl_instr_query");
    require_out(out_state, "fl_instr_query", "out_state");
    *out_state = uint32_t(s->engine->waits().query(s, id));
    return FL_OK;
  });
}

FL_API fl_status_t fl_instr_wait_for(fl_stream_t* stream, fl_instr_id id, uint64_t timeout_ns) {
  return guard([&] {
    core::Stream* s = stream_from(stream, "fl_instr_wait_for");
    core::refuse_if_capturing(*s->engine, "fl_instr_wait_for");
    return s->engine->waits().wait_instr(s, id, Deadline::after_ns(timeout_ns));
  });
}

FL_API fl_status_t fl_instr_cancel(fl_stream_t* stream, fl_instr_id id) {
  return guard([&] {
    core::Stream* s = stream_from(stream, "fl_instr_cancel");
    s->engine->cancel_drain().cancel(s, id);
    return FL_OK;
  });
}

FL_API fl_status_t fl_submit_host(fl_stream_t* stream, const fl_host_instr_t* instr, fl_instr_id* out_instr_id) {
  return guard([&] {
    const char* fn = "fl_submit_host";
    core::Stream* s = stream_from(stream, fn);
    check_desc(instr, fn, "fl_host_instr_t");
    if (instr->fn == nullptr) fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_host: fn is NULL");
    check_submit_flags(instr->flags, fn, /*host=*/true);
    if (!s->is_host_executed())
      fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_host: the stream (" + s->describe() +
                                        ") is a device stream; host callbacks go to a host stream "
                                        "({FL_DEVICE_CPU, 0}, FL_STREAM_HOST), device work via fl_submit_device");
    if (s->kind != FL_STREAM_HOST)
      fail(FL_ERR_INVALID_ARGUMENT, "fl_submit_host: the stream (" + s->describe() + ") is not a FL_STREAM_HOST stream");
    core::Instr* i = begin_submit(*s->engine, instr->operands, instr->num_operands, fn);
    core::SubmitArgs a;
    a.fn = instr->fn;
    a.user_data = instr->user_data;
    a.cleanup = instr->cleanup;
    a.name = instr->name;
    a.nonblocking = (instr->flags & FL_SUBMIT_NONBLOCKING) != 0;
    a.run_inline = (instr->flags & FL_SUBMIT_INLINE) != 0;
    a.api = fn;
    fl_instr_id id = s->engine->submit(s, i, a);
    if (out_instr_id) *out_instr_id = id;
    return FL_OK;
  });
}

}  // extern "C"
