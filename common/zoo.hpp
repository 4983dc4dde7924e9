#pragma once
// Looking up a name the user gave (`--model llama3-8b`, `--cluster path/to/file.json`): a zoo
// entry compiled into the binary, else a JSON file on disk, else an InputError that lists the zoo.

#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/embedded_file.hpp"

namespace strata {

struct ZooDocument {
  std::string where;  // "zoo model 'llama3-8b'" or the file path, for error messages
  nlohmann::json json;
};

struct ZooKind {
  const char* noun;   // "model", "device", "cluster"
  const char* field;  // the flag or field that names it: "--model"
};

ZooDocument find_in_zoo(std::span<const EmbeddedFile> zoo, const ZooKind& kind,
                        const std::string& name_or_path);

// The zoo's names, sorted.
std::vector<std::string> zoo_names(std::span<const EmbeddedFile> zoo);

}  // namespace strata
