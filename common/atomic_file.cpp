#include "common/atomic_file.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "common/error.hpp"

namespace strata {

void write_file_atomically(const std::string& path, std::string_view content) {
  const std::filesystem::path target(path);
  const std::filesystem::path temporary =
      target.string() + ".tmp." + std::to_string(static_cast<long>(::getpid()));
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) {
      throw InputError(path, "", "cannot open the file for writing",
                       "check that the directory exists and is writable");
    }
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.flush();
    if (!out) {
      out.close();
      std::filesystem::remove(temporary);
      throw InputError(path, "", "writing the file failed (disk full?)", "free space and retry");
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, target, error);
  if (error) {
    std::filesystem::remove(temporary);
    throw InputError(path, "", "cannot rename the temporary file into place: " + error.message(),
                     "check that the path is a writable file location");
  }
}

}  // namespace strata
