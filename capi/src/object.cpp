// C entry points of dependence objects.
#include <string>

#include "boundary.hpp"
#include "engine/capture.hpp"
#include "tables.hpp"

using namespace flowlane;
using namespace flowlane::capi;

extern "C" {

FL_API fl_status_t fl_object_create(fl_engine_t* engine, void* user_data, fl_release_fn release,
                                    fl_object_t** out_object) {
  return guard([&] {
    core::Engine* e = engine_from(engine, "fl_object_create");
    require_out(out_object, "fl_object_create", "out_object");
    if (e->shutting_down()) fail(FL_ERR_SHUTDOWN, "fl_object_create: the engine is being destroyed");
    core::Object* o = e->objects().create(user_data, release);
    o->handle = object_table().insert(o);
    if (o->handle == 0) {
      o->release = nullptr;
      e->objects().release_ref(o);
      fail(FL_ERR_NO_MEMORY, "fl_object_create: the process-wide object table is full");
    }
    *out_object = handle_cast<fl_object_t>(o->handle);
    return FL_OK;
  });
}

FL_API fl_status_t fl_object_release(fl_object_t* object) {
  return guard([&] {
    core::Object* o = object_from(object, "fl_object_release");
    if (object_table().erase(handle_bits(object)) == nullptr)
      fail(FL_ERR_INVALID_HANDLE, "fl_object_release: the object was released concurrently");
    o->engine->objects().release_ref(o);
    return FL_OK;
  });
}

namespace {
fl_status_t wait_object(fl_object_t* object, uint32_t access, const Deadline& deadline, const char* fn) {
  core::Object* o = object_from(object, fn);
  core::refuse_if_capturing(*o->engine, fn);
  if (access == 0 || (access & ~uint32_t(FL_READ_WRITE)) != 0)
    fail(FL_ERR_INVALID_ARGUMENT, std::string(fn) + ": access " + std::to_string(access) +
                                      " is not FL_READ (1), FL_WRITE (2) or FL_READ_WRITE (3)");
  return o->engine->waits().wait_object(o, access, deadline);
}
}  // namespace

FL_API fl_status_t fl_object_wait(fl_object_t* object, uint32_t access) {
  return guard([&] { return wait_object(object, access, Deadline::forever(), "fl_object_wait"); });
}

FL_API fl_status_t fl_object_wait_for(fl_object_t* object, uint32_t access, uint64_t timeout_ns) {
  return guard([&] { return wait_object(object, access, Deadline::after_ns(timeout_ns), "fl_object_wait_for"); });
}

FL_API fl_status_t fl_object_user_data(fl_object_t* object, void** out_user_data) {
  return guard([&] {
    core::Object* o = object_from(object, "fl_object_user_data");
    require_out(out_user_data, "fl_object_user_data", "out_user_data");
    *out_user_data = o->user_data;
    return FL_OK;
  });
}

}  // extern "C"
