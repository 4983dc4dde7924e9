#pragma once
// A JSON file compiled into the binary (see cmake/embed.cmake): the model zoo, devices, clusters.

#include <span>
#include <string_view>

namespace strata {

struct EmbeddedFile {
  std::string_view name;     // file stem, e.g. "llama3-8b"
  std::string_view content;  // the file's text
};

}  // namespace strata
