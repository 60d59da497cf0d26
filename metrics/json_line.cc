#include "metrics/json_line.h"

#include <cmath>
#include <cstdio>

#include "loader/range_file.h"

namespace tilefeed::metrics::detail {

std::string JsonString(std::string_view raw) {
  std::string out = "\"";
  for (const char c : loader::detail::RedactUrl(raw)) {
    const char* named = c == '"'    ? "\\\""
                        : c == '\\' ? "\\\\"
                        : c == '\n' ? "\\n"
                        : c == '\r' ? "\\r"
                        : c == '\t' ? "\\t"
                                    : nullptr;
    if (named != nullptr) {
      out += named;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(c));
      out += escaped;
    } else {
      out += c;  // bytes >= 0x80 pass through: UTF-8 stays UTF-8 (paths are taken as they are)
    }
  }
  return out + "\"";
}

void JsonLine::Key(std::string_view key) {
  if (text_.size() > 1) text_ += ',';
  text_ += JsonString(key);
  text_ += ':';
}

JsonLine& JsonLine::Add(std::string_view key, std::string_view value) {
  Key(key);
  text_ += JsonString(value);
  return *this;
}

JsonLine& JsonLine::Add(std::string_view key, std::uint64_t value) {
  Key(key);
  text_ += std::to_string(value);
  return *this;
}

JsonLine& JsonLine::Add(std::string_view key, int value) {
  Key(key);
  text_ += std::to_string(value);
  return *this;
}

JsonLine& JsonLine::Add(std::string_view key, double value) {
  Key(key);
  if (!std::isfinite(value)) {
    text_ += "null";
    return *this;
  }
  char number[32];
  // Ten significant digits, but never fewer than milliseconds (Unix times are ~1.8e9).
  std::snprintf(number, sizeof(number), std::fabs(value) >= 1e6 ? "%.3f" : "%.10g", value);
  text_ += number;
  return *this;
}

JsonLine& JsonLine::Add(std::string_view key, std::optional<double> value) {
  return value ? Add(key, *value) : AddNull(key);
}

JsonLine& JsonLine::AddNull(std::string_view key) {
  Key(key);
  text_ += "null";
  return *this;
}

JsonLine& JsonLine::Add(std::string_view key,
                        const std::vector<std::pair<std::string, std::string>>& object) {
  Key(key);
  text_ += '{';
  for (std::size_t i = 0; i < object.size(); ++i) {
    if (i > 0) text_ += ',';
    text_ += JsonString(object[i].first);
    text_ += ':';
    text_ += JsonString(object[i].second);
  }
  text_ += '}';
  return *this;
}

}  // namespace tilefeed::metrics::detail
