// Writing JSON text: string escaping (traces, communicator dumps).
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>

namespace flowlane {

// Appends `s` (n bytes) escaped for the inside of a JSON string: `"` and `\` get a
// backslash, control characters become \u00XX; other bytes (UTF-8 included) are copied.
inline void json_escape(std::string& out, const char* s, size_t n) {
  for (size_t k = 0; k < n; ++k) {
    const unsigned char c = static_cast<unsigned char>(s[k]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      out += b;
    } else {
      out += char(c);
    }
  }
}
inline void json_escape(std::string& out, const std::string& s) { json_escape(out, s.data(), s.size()); }
// `s` as a JSON string, quotes included.
inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  json_escape(out, s);
  out += '"';
  return out;
}

}  // namespace flowlane
