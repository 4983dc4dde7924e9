#pragma once
// A file written to the temporary directory for one test and removed when it goes out of scope.
// Names are unique per process and per file (pid and a counter), so several may be alive at once.

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include <nlohmann/json.hpp>

namespace strata::test {

class TempFile {
 public:
  // `stem` names the file for whoever finds it left behind by a crash.
  TempFile(const std::string& text, const std::string& stem) : path_(unique_path(stem)) {
    std::ofstream(path_) << text;
  }
  TempFile(const nlohmann::json& content, const std::string& stem)
      : TempFile(content.dump(2), stem) {}
  // A string literal is text, not a JSON string value.
  TempFile(const char* text, const std::string& stem) : TempFile(std::string(text), stem) {}
  ~TempFile() { std::filesystem::remove(path_); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  std::string path() const { return path_.string(); }

 private:
  static std::filesystem::path unique_path(const std::string& stem) {
    static std::atomic<int> count{0};
    return std::filesystem::temp_directory_path() /
           (stem + "_" + std::to_string(::getpid()) + "_" + std::to_string(count++) + ".json");
  }

  std::filesystem::path path_;
};

}  // namespace strata::test
