#include "common/csv.hpp"

#include <fmt/format.h>

#include "common/error.hpp"

namespace strata {

std::vector<std::string> split_csv_line(std::string_view line) {
  std::vector<std::string> fields;
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.push_back(field);
      field.clear();
    } else if (c != '\r') {
      field += c;
    }
  }
  fields.push_back(field);
  return fields;
}

CsvTable parse_csv(std::string_view text, const std::string& where) {
  CsvTable table;
  table.where = where;
  size_t line_number = 0;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    ++line_number;
    if (line.empty() || line == "\r") continue;
    std::vector<std::string> fields = split_csv_line(line);
    if (table.header.empty()) {
      table.header = std::move(fields);
      continue;
    }
    if (fields.size() > table.header.size()) {
      throw InputError(
          where, fmt::format("line {}", line_number),
          fmt::format("{} fields under a header of {} columns", fields.size(), table.header.size()),
          "quote fields that hold commas");
    }
    CsvRow row;
    for (size_t i = 0; i < fields.size(); ++i) row[table.header[i]] = std::move(fields[i]);
    table.rows.push_back(std::move(row));
  }
  return table;
}

}  // namespace strata
