#pragma once

// One JSON object on one line, built field by field: strings escaped (RFC 8259), numbers
// that are not finite written as null. Not a parser; the records are flat except for
// string-to-string objects.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tilefeed::metrics::detail {

// `raw` as a JSON string literal, quotes included, with any URL's secrets hidden
// (loader::detail::RedactUrl).
std::string JsonString(std::string_view raw);

class JsonLine {
 public:
  JsonLine& Add(std::string_view key, std::string_view value);
  JsonLine& Add(std::string_view key, const char* value) {
    return Add(key, std::string_view(value));
  }
  JsonLine& Add(std::string_view key, std::uint64_t value);
  JsonLine& Add(std::string_view key, int value);
  JsonLine& Add(std::string_view key, double value);
  JsonLine& Add(std::string_view key, std::optional<double> value);
  JsonLine& AddNull(std::string_view key);
  JsonLine& Add(std::string_view key,
                const std::vector<std::pair<std::string, std::string>>& object);
  // The object, closed, without a newline.
  std::string str() const { return text_ + "}"; }

 private:
  void Key(std::string_view key);
  std::string text_ = "{";
};

}  // namespace tilefeed::metrics::detail
