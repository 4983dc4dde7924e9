#include "fuzz/fuzz_support.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace strata::fuzz {

namespace {

std::filesystem::path make_scratch_folder() {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string pattern = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/strata-fuzz-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    std::perror(("strata fuzz: cannot create a scratch folder " + pattern).c_str());
    std::abort();
  }
  return pattern;
}

[[noreturn]] void broken_refusal(const InputError& error, const char* rule) {
  std::fprintf(stderr, "strata fuzz: a refusal breaks the rule \"%s\":\n%s\n", rule, error.what());
  std::abort();
}

}  // namespace

ScratchDir::ScratchDir() : path_(make_scratch_folder()) {}

ScratchDir::~ScratchDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string ScratchDir::write(const std::filesystem::path& relative, std::string_view bytes) const {
  const std::filesystem::path file = path_ / relative;
  std::filesystem::create_directories(file.parent_path());
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "strata fuzz: cannot write %s\n", file.c_str());
    std::abort();
  }
  return file.string();
}

const ScratchDir& scratch() {
  static const ScratchDir dir;
  return dir;
}

void check_refusal(const InputError& error) {
  const std::string_view message = error.what();
  for (const char c : message) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      broken_refusal(error, "one line, without control characters");
    }
  }
  if (error.where().empty()) broken_refusal(error, "names the file or the command line");
  if (message.find(". Fix: ") == std::string_view::npos) {
    broken_refusal(error, "ends with a fix");
  }
}

}  // namespace strata::fuzz
