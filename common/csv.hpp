#pragma once
// CSV as the reference data writes it (data/reference/*.csv): a header row, then one record per
// line; fields separated by commas, a quoted field may hold commas and doubled quotes (RFC 4180,
// without line breaks inside fields).

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

using CsvRow = std::map<std::string, std::string>;  // column name -> text

struct CsvTable {
  std::string where;  // the file it came from, for error messages
  std::vector<std::string> header;
  std::vector<CsvRow> rows;
};

std::vector<std::string> split_csv_line(std::string_view line);

// Throws InputError naming `where` and the line of a record with more fields than the header.
CsvTable parse_csv(std::string_view text, const std::string& where);

}  // namespace strata
