#include "common/json_input.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "common/error.hpp"

namespace strata {

namespace {

struct LineColumn {
  int64_t line = 1;
  int64_t column = 1;
};

// nlohmann reports the byte offset just past the offending character; turn it into the 1-based
// line and column an editor shows.
LineColumn line_column_at(std::string_view text, std::size_t byte) {
  LineColumn position;
  const std::size_t end = std::min(byte == 0 ? 0 : byte - 1, text.size());
  for (std::size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++position.line;
      position.column = 1;
    } else {
      ++position.column;
    }
  }
  return position;
}

std::string type_name(const nlohmann::json& value) { return value.type_name(); }

}  // namespace

void throw_malformed_json(std::string_view text, const std::string& where,
                          const nlohmann::json::parse_error& error) {
  const LineColumn at = line_column_at(text, error.byte);
  std::string detail = error.what();
  // nlohmann's message starts with "[json.exception.parse_error.101] parse error at line L,
  // column C: "; keep only the part after the last ": " that explains the syntax problem.
  if (const auto cut = detail.find("syntax error"); cut != std::string::npos) {
    detail = detail.substr(cut);
  }
  throw InputError(
      fmt::format("{}:{}:{}", where, at.line, at.column), "",
      fmt::format("malformed JSON at line {}, column {}: {}", at.line, at.column, detail),
      "correct the JSON syntax at that position");
}

namespace {

// No input of ours nests deeper than a few levels; a deeper document (an attack, a generated
// mistake) would recurse through the parser's value tree and the error messages that quote it.
constexpr int kMaxJsonDepth = 64;

// Refuses nesting deeper than kMaxJsonDepth, counting brackets outside strings.
void check_json_depth(std::string_view text, const std::string& where) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        const LineColumn at = line_column_at(text, i);
        throw InputError(fmt::format("{}:{}:{}", where, at.line, at.column), "",
                         fmt::format("JSON nested deeper than {} levels", kMaxJsonDepth),
                         "flatten the document; strata's inputs nest a few levels");
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

}  // namespace

nlohmann::json parse_json_text(std::string_view text, const std::string& where) {
  check_json_depth(text, where);
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& error) {
    throw_malformed_json(text, where, error);
  } catch (const nlohmann::json::out_of_range& error) {
    throw_number_overflow(where, error);
  }
}

void throw_number_overflow(const std::string& where, const nlohmann::json::out_of_range& error) {
  // nlohmann's message names the number: "... number overflow parsing '1e309'".
  std::string detail = error.what();
  if (const auto cut = detail.find("number overflow"); cut != std::string::npos) {
    detail = detail.substr(cut);
  }
  throw InputError(where, "", detail, "use numbers within the double range (below 1.8e308)");
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw InputError(path, "", "cannot open the file", "check the path and the permissions");
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

nlohmann::json read_json_file(const std::string& path) {
  return parse_json_text(read_text_file(path), path);
}

JsonFields::JsonFields(const nlohmann::json& object, std::string where, std::string prefix)
    : object_(object), where_(std::move(where)), prefix_(std::move(prefix)) {
  if (!object_.is_object()) {
    throw InputError(where_, prefix_.empty() ? "(top level)" : prefix_,
                     fmt::format("expected a JSON object, found {}", type_name(object_)),
                     "write the value as an object {...}");
  }
}

std::string JsonFields::field_name(std::string_view key) const {
  return prefix_.empty() ? std::string(key) : fmt::format("{}.{}", prefix_, key);
}

void JsonFields::fail(std::string_view key, const std::string& problem,
                      const std::string& fix) const {
  throw InputError(where_, field_name(key), problem, fix);
}

bool JsonFields::has(std::string_view key) const {
  const auto found = object_.find(key);
  return found != object_.end() && !found->is_null();
}

const nlohmann::json& JsonFields::at(std::string_view key) const {
  const auto found = object_.find(key);
  if (found == object_.end() || found->is_null()) {
    fail(key, "missing", fmt::format("add \"{}\" to the object", key));
  }
  return *found;
}

JsonFields JsonFields::object(std::string_view key) const {
  return JsonFields(at(key), where_, field_name(key));
}

std::string JsonFields::string(std::string_view key) const {
  const auto& value = at(key);
  if (!value.is_string()) {
    fail(key, fmt::format("expected a string, found {}", type_name(value)),
         "write the value in double quotes");
  }
  return value.get<std::string>();
}

std::optional<std::string> JsonFields::optional_string(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return string(key);
}

bool JsonFields::boolean(std::string_view key, bool fallback) const {
  if (!has(key)) return fallback;
  const auto& value = at(key);
  if (!value.is_boolean()) {
    fail(key, fmt::format("expected true or false, found {}", type_name(value)),
         "write true or false");
  }
  return value.get<bool>();
}

int64_t JsonFields::non_negative_int(std::string_view key) const { return whole_number(key, 0); }

int64_t JsonFields::whole_number(std::string_view key, int64_t minimum) const {
  const auto& value = at(key);
  // 8.0 counts as the whole number 8; 8.5 and non-numbers do not. Checked before any conversion
  // to int64_t, which is undefined for a double outside its range (1e300) and wraps for an
  // unsigned one above it (2^64 - 1).
  const bool whole =
      value.is_number_integer() ||
      (value.is_number_float() && std::trunc(value.get<double>()) == value.get<double>());
  if (!whole) {
    fail(key, fmt::format("expected a whole number, found {} {}", type_name(value), value.dump()),
         "write a whole number such as 8");
  }
  // [-2^63, 2^63): the doubles that convert to int64_t exactly.
  constexpr double kInt64Bound = 9223372036854775808.0;
  const bool in_range =
      value.is_number_unsigned()
          ? value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
          : !value.is_number_float() ||
                (value.get<double>() >= -kInt64Bound && value.get<double>() < kInt64Bound);
  if (!in_range) {
    fail(key, fmt::format("{} is beyond the whole numbers Strata reads (64-bit)", value.dump()),
         fmt::format("use a whole number from {} to {}", minimum,
                     std::numeric_limits<int64_t>::max()));
  }
  const int64_t number = value.get<int64_t>();
  if (number < minimum) {
    fail(key, fmt::format("must be at least {}, found {}", minimum, number),
         fmt::format("use a whole number >= {}", minimum));
  }
  return number;
}

int64_t JsonFields::positive_int(std::string_view key) const { return whole_number(key, 1); }

std::optional<int64_t> JsonFields::optional_positive_int(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return positive_int(key);
}

double JsonFields::positive_number(std::string_view key, bool allow_zero) const {
  const auto& value = at(key);
  if (!value.is_number()) {
    fail(key, fmt::format("expected a number, found {} {}", type_name(value), value.dump()),
         "write a number such as 1.5");
  }
  const double number = value.get<double>();
  if (number < 0 || (number == 0 && !allow_zero)) {
    fail(key, fmt::format("must be {}, found {}", allow_zero ? ">= 0" : "> 0", value.dump()),
         allow_zero ? "use a value >= 0" : "use a value > 0");
  }
  return number;
}

std::optional<double> JsonFields::optional_positive_number(std::string_view key,
                                                           bool allow_zero) const {
  if (!has(key)) return std::nullopt;
  return positive_number(key, allow_zero);
}

std::string JsonFields::choice(std::string_view key,
                               std::initializer_list<std::string_view> choices) const {
  const std::string value = string(key);
  for (const auto option : choices) {
    if (value == option) return value;
  }
  fail(key, fmt::format("'{}' is not one of: {}", value, fmt::join(choices, ", ")),
       fmt::format("use one of: {}", fmt::join(choices, ", ")));
}

void JsonFields::refuse_unknown(std::span<const std::string_view> known) const {
  constexpr std::string_view kDocumentationKeys[] = {"source", "note", "$comment"};
  const auto contains = [](std::span<const std::string_view> names, std::string_view name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  for (const auto& item : object_.items()) {
    const std::string& key = item.key();
    if (contains(known, key) || contains(kDocumentationKeys, key)) continue;
    fail(key, "unknown field",
         fmt::format("remove it or correct its spelling; the fields here are: {} (and \"source\", "
                     "\"note\", \"$comment\" for documentation)",
                     fmt::join(known, ", ")));
  }
}

}  // namespace strata
