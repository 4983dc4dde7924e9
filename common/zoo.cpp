#include "common/zoo.hpp"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "common/error.hpp"
#include "common/json_input.hpp"

namespace strata {

ZooDocument find_in_zoo(std::span<const EmbeddedFile> zoo, const ZooKind& kind,
                        const std::string& name_or_path) {
  for (const EmbeddedFile& file : zoo) {
    if (file.name != name_or_path) continue;
    std::string where = fmt::format("zoo {} '{}'", kind.noun, file.name);
    nlohmann::json json = parse_json_text(file.content, where);
    return {std::move(where), std::move(json)};
  }
  std::error_code error;
  if (std::filesystem::is_regular_file(name_or_path, error)) {
    return {name_or_path, read_json_file(name_or_path)};
  }
  const bool exists = std::filesystem::exists(name_or_path, error);
  throw InputError("command line", kind.field,
                   fmt::format("unknown {0} '{1}': it is not in the zoo and {2}; the zoo has: {3}",
                               kind.noun, name_or_path,
                               exists ? "that path is not a regular file (a folder, device or pipe)"
                                      : "no file exists at that path",
                               fmt::join(zoo_names(zoo), ", ")),
                   fmt::format("use one of the zoo names or a path to a {} JSON file", kind.noun));
}

std::vector<std::string> zoo_names(std::span<const EmbeddedFile> zoo) {
  std::vector<std::string> names;
  for (const EmbeddedFile& file : zoo) names.emplace_back(file.name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace strata
