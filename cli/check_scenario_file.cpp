#include "cli/check_scenario_file.hpp"

#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "common/json_input.hpp"

namespace strata::cli {

nlohmann::ordered_json read_scenario_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open the file", "check the path and the permissions");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  parse_json_text(text, path);  // a malformed file is refused naming the line and column
  return nlohmann::ordered_json::parse(text);
}

}  // namespace strata::cli
