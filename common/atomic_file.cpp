#include "common/atomic_file.hpp"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <unistd.h>

#include "common/error.hpp"

namespace strata {

namespace {

namespace fs = std::filesystem;

fs::path with_suffix(const std::string& path, const char* kind) {
  return fmt::format("{}.{}.{}", path, kind, static_cast<long>(::getpid()));
}
fs::path temporary_for(const std::string& path) { return with_suffix(path, "tmp"); }
fs::path backup_for(const std::string& path) { return with_suffix(path, "old.tmp"); }

void remove_temporaries(const std::vector<OutputFile>& files) {
  std::error_code ignored;
  for (const OutputFile& file : files) fs::remove(temporary_for(file.path), ignored);
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

// Where a path points, for comparing two outputs: the same file through different spellings
// ("a.json", "./a.json", a link to it) compares equal.
fs::path identity(const std::string& path) {
  std::error_code error;
  const fs::path absolute = fs::absolute(path, error).lexically_normal();
  const fs::path canonical = fs::weakly_canonical(absolute, error);
  return error ? absolute : canonical;
}

}  // namespace

void check_output_paths(const std::vector<OutputFile>& files) {
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string& path = files[i].path;
    if (path.empty()) {
      throw InputError("command line", "", "an output path is empty", "give a file name");
    }
    std::error_code error;
    const fs::file_status status = fs::status(path, error);
    if (fs::exists(status) && !fs::is_regular_file(status)) {
      throw InputError(path, "",
                       "exists and is not a regular file (a directory, device or pipe); Strata "
                       "writes its outputs whole, replacing what was there",
                       "give the path of a regular file, new or to be replaced");
    }
    const fs::path parent = fs::path(path).parent_path();
    if (!parent.empty() && !fs::is_directory(parent, error)) {
      throw InputError(path, "", fmt::format("its directory '{}' does not exist", parent.string()),
                       "create the directory first, or write elsewhere");
    }
    for (size_t j = 0; j < i; ++j) {
      if (identity(files[j].path) == identity(path)) {
        throw InputError(path, "",
                         fmt::format("names the same file as another output ('{}')", files[j].path),
                         "give each output a file of its own");
      }
    }
  }
}

// Every temporary is written first; then each existing target is moved aside before its
// replacement is renamed in, so that a failed rename puts back every file already replaced.
void write_files_atomically(const std::vector<OutputFile>& files) {
  check_output_paths(files);
  try {
    for (const OutputFile& file : files) write_temporary(file);
  } catch (...) {
    remove_temporaries(files);
    throw;
  }
  std::vector<bool> moved_aside(files.size(), false);
  size_t replaced = 0;
  const auto roll_back = [&] {
    std::error_code ignored;
    for (size_t i = 0; i < files.size(); ++i) {
      if (i < replaced) fs::remove(files[i].path, ignored);
      if (moved_aside[i]) fs::rename(backup_for(files[i].path), files[i].path, ignored);
    }
    remove_temporaries(files);
  };
  for (; replaced < files.size(); ++replaced) {
    const OutputFile& file = files[replaced];
    std::error_code error;
    if (fs::exists(file.path, error)) {
      fs::rename(file.path, backup_for(file.path), error);
      moved_aside[replaced] = !error;
    }
    if (!error) fs::rename(temporary_for(file.path), file.path, error);
    if (error) {
      roll_back();
      throw InputError(
          file.path, "",
          "cannot put the new file in place: " + error.message() + " (no output was changed)",
          "check that the path is a writable file location");
    }
  }
  std::error_code ignored;
  for (size_t i = 0; i < files.size(); ++i) {
    if (moved_aside[i]) fs::remove(backup_for(files[i].path), ignored);
  }
}

}  // namespace strata
