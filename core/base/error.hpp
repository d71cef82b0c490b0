// Errors inside flowlane: an Error carries a public status and a message a user can act
// on. Deep code throws it (error paths are cold); every C entry point catches it in
// capi/src/boundary.hpp and turns it into a status plus the thread's last message.
#pragma once

#include <string>
#include <utility>

#include "flowlane/flowlane.h"

// Thread-locals on hot paths use the initial-exec TLS model: a plain %fs-relative access
// instead of a __tls_get_addr call per use. They are few and small (well inside the static
// TLS surplus glibc keeps for dlopen'ed libraries), and trivially constructible.
#define FL_TLS __attribute__((tls_model("initial-exec")))

namespace flowlane {

struct Error {
  fl_status_t status;
  std::string message;
};

[[noreturn, gnu::cold]] void fail(fl_status_t status, std::string message);

namespace detail {
extern constinit FL_TLS thread_local bool t_has_error;  // defined in error.cpp
[[gnu::cold]] void clear_last_error_text();
}  // namespace detail

// The calling thread's last error message (fl_last_error_message).
void set_last_error(std::string_view message);
// Inline: every successful C call makes it; it is one thread-local test when there is no
// message to clear.
inline void clear_last_error() {
  if (__builtin_expect(detail::t_has_error, 0)) detail::clear_last_error_text();
}
const char* last_error();

// Sets the thread's message and returns `status`, for paths that report without throwing.
[[gnu::cold]] fl_status_t report(fl_status_t status, std::string_view message);

}  // namespace flowlane
