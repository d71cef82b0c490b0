// The public header as a C++ program sees it: compiled with -Wall -Wextra -pedantic
// -Werror (and, in a second object, as C++11, the oldest dialect we promise), with the
// same layout checks as the C99 test, so C and C++ agree on every struct. Uses every
// _INIT macro as a C++ aggregate initializer and calls the library through extern "C".
#include <flowlane/flowlane.h>

#include <cstdio>
#include <cstring>

#include "abi_layout.h"

namespace {

// Every descriptor initializer must compile in C++ and set struct_size to sizeof.
bool initializers_are_valid_cxx() {
  fl_engine_desc_t engine = FL_ENGINE_DESC_INIT;
  fl_host_instr_t host = FL_HOST_INSTR_INIT;
  fl_kernel_instr_t kernel = FL_KERNEL_INSTR_INIT;
  fl_device_instr_t device = FL_DEVICE_INSTR_INIT;
  fl_memcpy_instr_t memcpy_instr = FL_MEMCPY_INSTR_INIT;
  fl_comm_desc_t comm = FL_COMM_DESC_INIT;
  fl_collective_instr_t coll = FL_COLLECTIVE_INSTR_INIT;
  fl_watchdog_desc_t watchdog = FL_WATCHDOG_DESC_INIT;
  fl_engine_stats_t stats = FL_ENGINE_STATS_INIT;
  return engine.struct_size == sizeof engine && host.struct_size == sizeof host &&
         kernel.struct_size == sizeof kernel && device.struct_size == sizeof device &&
         memcpy_instr.struct_size == sizeof memcpy_instr && comm.struct_size == sizeof comm &&
         coll.struct_size == sizeof coll && watchdog.struct_size == sizeof watchdog &&
         stats.struct_size == sizeof stats;
}

// A C++ lambda without captures converts to the C function pointer types.
fl_host_fn as_host_fn() {
  return [](fl_instr_ctx_t*, void*) -> fl_status_t { return FL_OK; };
}

}  // namespace

int main() {
  int failures = 0;
  if (!initializers_are_valid_cxx()) {
    std::fprintf(stderr, "an _INIT macro does not set struct_size to sizeof its struct\n");
    ++failures;
  }
  if (as_host_fn() == nullptr) ++failures;
  if (fl_version_hex() != static_cast<uint32_t>(FL_VERSION_HEX)) {
    std::fprintf(stderr, "library version %s differs from the header's\n", fl_version_string());
    ++failures;
  }
  fl_engine_t* engine = nullptr;
  fl_engine_desc_t desc = FL_ENGINE_DESC_INIT;
  desc.num_workers = 1;
  if (fl_engine_create(&desc, &engine) != FL_OK) {
    std::fprintf(stderr, "fl_engine_create: %s\n", fl_last_error_message());
    ++failures;
  } else if (fl_engine_destroy(engine) != FL_OK) {
    std::fprintf(stderr, "fl_engine_destroy: %s\n", fl_last_error_message());
    ++failures;
  }
  if (std::strcmp(fl_status_name(FL_ERR_TIMEOUT), "FL_ERR_TIMEOUT") != 0) ++failures;
  std::printf("flowlane %s C++ header test: %s\n", fl_version_string(), failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
