#include "common/atomic_file.hpp"

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "common/error.hpp"

namespace strata {

namespace {

std::filesystem::path temporary_for(const std::string& path) {
  return path + ".tmp." + std::to_string(static_cast<long>(::getpid()));
}

void remove_temporaries(const std::vector<OutputFile>& files) {
  std::error_code ignored;
  for (const OutputFile& file : files) std::filesystem::remove(temporary_for(file.path), ignored);
}

void write_temporary(const OutputFile& file) {
  std::ofstream out(temporary_for(file.path), std::ios::binary | std::ios::trunc);
  if (!out) {
    throw InputError(file.path, "", "cannot open the file for writing",
                     "check that the directory exists and is writable");
  }
  out.write(file.content.data(), static_cast<std::streamsize>(file.content.size()));
  out.flush();
  if (!out)
    throw InputError(file.path, "", "writing the file failed (disk full?)", "free space and retry");
}

}  // namespace

void write_files_atomically(const std::vector<OutputFile>& files) {
  try {
    for (const OutputFile& file : files) write_temporary(file);
  } catch (...) {
    remove_temporaries(files);
    throw;
  }
  for (const OutputFile& file : files) {
    std::error_code error;
    std::filesystem::rename(temporary_for(file.path), file.path, error);
    if (error) {
      remove_temporaries(files);
      throw InputError(file.path, "",
                       "cannot rename the temporary file into place: " + error.message(),
                       "check that the path is a writable file location");
    }
  }
}

}  // namespace strata
