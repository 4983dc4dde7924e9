#include "common/error.hpp"

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

namespace strata {

namespace {

std::string format_input_error(const std::string& where, const std::string& field,
                               const std::string& problem, const std::string& fix) {
  std::string text = field.empty() ? fmt::format("{}: {}", where, problem)
                                   : fmt::format("{}: field '{}': {}", where, field, problem);
  if (!fix.empty()) text += fmt::format(". Fix: {}", fix);
  return text;
}

}  // namespace

InputError::InputError(std::string where, std::string field, std::string problem, std::string fix)
    : std::runtime_error(format_input_error(where, field, problem, fix)),
      where_(std::move(where)),
      field_(std::move(field)),
      problem_(std::move(problem)) {}

void assertion_failed(const char* condition, const char* file, int line,
                      const std::string& message) {
  std::fprintf(stderr, "strata: internal error at %s:%d: %s (%s)\n", file, line, message.c_str(),
               condition);
  std::abort();
}

}  // namespace strata
