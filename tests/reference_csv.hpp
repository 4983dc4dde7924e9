#pragma once
// Reads the published measurements in data/reference/*.csv (common/csv.hpp) so tests can check
// the models against every row.

#include <string>
#include <vector>

#include "common/csv.hpp"
#include "common/json_input.hpp"

namespace strata::test {

using CsvRow = strata::CsvRow;

// Every row of data/reference/<file> as a map from column name to text.
inline std::vector<CsvRow> read_reference_csv(const std::string& file) {
  const std::string path = std::string(STRATA_REFERENCE_DIR) + "/" + file;
  return parse_csv(read_text_file(path), path).rows;
}

}  // namespace strata::test
