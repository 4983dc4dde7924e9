#include "common/error.hpp"

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

namespace strata {

namespace {

// The message is the one line `main` prints after "strata: error: ". Control characters that an
// input brings into it (a key holding a line break, the bytes nlohmann quotes after "last read:")
// are written as escapes: "a\nb", "\x7f".
std::string one_line(const std::string& text) {
  std::string line;
  line.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) {
      line += c;
    } else if (c == '\n') {
      line += "\\n";
    } else if (c == '\r') {
      line += "\\r";
    } else if (c == '\t') {
      line += "\\t";
    } else {
      line += fmt::format("\\x{:02x}", byte);
    }
  }
  return line;
}

std::string format_input_error(const std::string& where, const std::string& field,
                               const std::string& problem, const std::string& fix) {
  std::string text = field.empty() ? fmt::format("{}: {}", where, problem)
                                   : fmt::format("{}: field '{}': {}", where, field, problem);
  if (!fix.empty()) text += fmt::format(". Fix: {}", fix);
  return one_line(text);
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
