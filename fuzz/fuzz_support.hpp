#pragma once
// What every harness in fuzz/ shares: the input as text, a scratch folder for the readers that
// take a path, and the oracle. A harness feeds libFuzzer's bytes to a reader's real entry point;
// the outcomes are:
//  - the reader accepts the input: fine;
//  - the reader refuses it with an InputError (common/error.hpp), the documented answer to bad
//    input (`main` prints "strata: error: <message>" and exits 2): fine, provided the message is
//    the one line that `main` prints and ends with a fix (check_refusal);
//  - anything else is a finding: another exception escaping (libFuzzer reports it as a crash), a
//    refusal whose message breaks the rules above (reported and aborted here), a sanitizer
//    report, a leak, a timeout or running out of memory.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "common/error.hpp"

namespace strata::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A folder of this process's own under $TMPDIR (else /tmp), named strata-fuzz-XXXXXX and removed
// when the process exits normally (scripts/fuzz runs the harnesses with TMPDIR in its scratch
// folder, so that what a crash leaves behind goes with it).
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // Writes `bytes` to `relative` under the folder (creating its parent folders, replacing the
  // file) and returns the file's path.
  std::string write(const std::filesystem::path& relative, std::string_view bytes) const;

 private:
  std::filesystem::path path_;
};

// The harness's scratch folder, made on first use.
const ScratchDir& scratch();

// Aborts, printing the rule it breaks, when a refusal's message is not what `main` should print:
// one line (no line break or other control character, which an input's key or value could bring
// into it) ending with ". Fix: ...".
void check_refusal(const InputError& error);

// Runs `read`, the reader's entry point on one input; returns 0 for libFuzzer.
template <typename Read>
int run_reader(Read&& read) {
  try {
    read();
  } catch (const InputError& error) {
    check_refusal(error);
  }
  return 0;
}

}  // namespace strata::fuzz
