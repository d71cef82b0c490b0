// Writing JSON text: string escaping (traces, communicator dumps).
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>

namespace flowlane {

// Appends `s` (n bytes) escaped for the inside of a JSON string: `"` and `\` get a
// backslash, newline and tab become \n and \t, other control characters \u00XX; other
// bytes (UTF-8 included) are copied.
inline void json_escape(std::string& out, const char* s, size_t n) {
  for (size_t k = 0; k < n; ++k) {
    const unsigned char c = static_cast<unsigned char>(s[k]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
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
// `s` as a JSON string, quotes included; cut to at most `max` bytes of `s`, before a whole
// UTF-8 character (never inside one), with "..." appended when cut.
inline std::string json_string(const std::string& s, size_t max = std::string::npos) {
  std::string out = "\"";
  if (s.size() <= max) {
    json_escape(out, s);
  } else {
    size_t n = max;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // continuation bytes (10xxxxxx)
    json_escape(out, s.data(), n);
    out += "...";
  }
  out += '"';
  return out;
}

}  // namespace flowlane
