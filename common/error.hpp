#pragma once
// Errors in three tiers (docs/design.md, "Determinism, units, errors"):
//  - a user's or a configuration's mistake is an InputError whose message names the file (or the
//    command line), the field, what is wrong and how to fix it; `main` prints it and exits 2;
//  - a broken invariant is a bug: STRATA_ASSERT prints where and why, then aborts;
//  - CUDA/NCCL/MPI calls go through their own check macros (in exec/ and kernels/).

#include <stdexcept>
#include <string>

namespace strata {

// A mistake in what the user gave us. `where` is a file path or "command line"; `field` is the
// JSON field or flag; `problem` says what is wrong; `fix` says what to do instead.
class InputError : public std::runtime_error {
 public:
  InputError(std::string where, std::string field, std::string problem, std::string fix);

  const std::string& where() const { return where_; }
  const std::string& field() const { return field_; }
  const std::string& problem() const { return problem_; }

 private:
  std::string where_;
  std::string field_;
  std::string problem_;
};

[[noreturn]] void assertion_failed(const char* condition, const char* file, int line,
                                   const std::string& message);

}  // namespace strata

#define STRATA_ASSERT(condition, message)                                                    \
  do {                                                                                       \
    if (!(condition)) ::strata::assertion_failed(#condition, __FILE__, __LINE__, (message)); \
  } while (false)
