#include "core/error.hpp"

namespace flowlane {
namespace {
thread_local std::string t_last_error;
}

void fail(fl_status_t status, std::string message) { throw Error{status, std::move(message)}; }

void set_last_error(std::string_view message) { t_last_error.assign(message); }

void clear_last_error() {
  if (!t_last_error.empty()) t_last_error.clear();
}

const char* last_error() { return t_last_error.c_str(); }

fl_status_t report(fl_status_t status, std::string_view message) {
  set_last_error(message);
  return status;
}

}  // namespace flowlane
