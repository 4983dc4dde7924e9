#pragma once
// Strict readers for JSON inputs. Every mistake becomes an InputError naming the file and the
// field: malformed JSON (with line and column), a missing field, a field of the wrong type, a
// negative or zero count. Readers at the edges (models/, topologies/, plan/) use these and hand
// plain structs to the core, which never sees JSON.

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace strata {

// Parses `text`; `where` names its origin (a path, or "zoo model 'x'") in error messages.
nlohmann::json parse_json_text(std::string_view text, const std::string& where);

// Reads and parses a file. Throws InputError when it cannot be read or is malformed.
nlohmann::json read_json_file(const std::string& path);

// A file's bytes; an InputError naming the path when it cannot be read.
std::string read_text_file(const std::string& path);

// The InputError for JSON that nlohmann could not parse, with the line and column of the fault in
// `text` (for readers that parse with their own callback, as the viewer does).
[[noreturn]] void throw_malformed_json(std::string_view text, const std::string& where,
                                       const nlohmann::json::parse_error& error);

// The InputError for a number nlohmann could not hold ("1e309", beyond the double range), which
// it reports as out_of_range rather than as a parse error; for those readers too.
[[noreturn]] void throw_number_overflow(const std::string& where,
                                        const nlohmann::json::out_of_range& error);

// A JSON object being read, with the name of its origin and its path inside the document
// ("plan", "zero_optimization") so that errors name the field exactly.
class JsonFields {
 public:
  JsonFields(const nlohmann::json& object, std::string where, std::string prefix = "");

  bool has(std::string_view key) const;
  const nlohmann::json& at(std::string_view key) const;  // required, any type
  JsonFields object(std::string_view key) const;         // required nested object

  std::string string(std::string_view key) const;
  std::optional<std::string> optional_string(std::string_view key) const;
  bool boolean(std::string_view key, bool fallback) const;
  // A whole number >= 1 (counts: layers, heads, GPUs ...).
  int64_t positive_int(std::string_view key) const;
  std::optional<int64_t> optional_positive_int(std::string_view key) const;
  // A whole number >= 0.
  int64_t non_negative_int(std::string_view key) const;
  // A number > 0 (bandwidths, FLOP rates), or >= 0 when `allow_zero`.
  double positive_number(std::string_view key, bool allow_zero = false) const;
  std::optional<double> optional_positive_number(std::string_view key,
                                                 bool allow_zero = false) const;
  // One of `choices`; the error lists them.
  std::string choice(std::string_view key, std::initializer_list<std::string_view> choices) const;

  // Refuses any key not in `known` (typo protection), naming it and listing the known ones.
  // "source", "note" and "$comment" document a file and are always allowed.
  void refuse_unknown(std::span<const std::string_view> known) const;

  // Throws InputError for `key` with the given problem and fix.
  [[noreturn]] void fail(std::string_view key, const std::string& problem,
                         const std::string& fix) const;

  std::string field_name(std::string_view key) const;
  const std::string& where() const { return where_; }
  const nlohmann::json& json() const { return object_; }

 private:
  const nlohmann::json& object_;
  int64_t whole_number(std::string_view key, int64_t minimum) const;

  std::string where_;
  std::string prefix_;
};

}  // namespace strata
