#include "base/error.hpp"

namespace flowlane {
namespace {
thread_local std::string t_last_error;
}
// Lets a success skip touching the string.
constinit FL_TLS thread_local bool detail::t_has_error = false;

void fail(fl_status_t status, std::string message) { throw Error{status, std::move(message)}; }

void set_last_error(std::string_view message) {
  t_last_error.assign(message.data(), message.size());
  detail::t_has_error = !message.empty();
}

void detail::clear_last_error_text() {
  t_last_error.clear();
  t_has_error = false;
}

const char* last_error() { return detail::t_has_error ? t_last_error.c_str() : ""; }

fl_status_t report(fl_status_t status, std::string_view message) {
  set_last_error(message);
  return status;
}

}  // namespace flowlane
