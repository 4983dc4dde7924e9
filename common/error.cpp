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

// What a message quotes from the input (a value, a key) is cut to a length a terminal line can
// hold: a megabyte string value would otherwise make a megabyte error line.
std::string bounded(const std::string& text, size_t limit) {
  if (text.size() <= limit) return text;
  return fmt::format("{}... ({} characters in all)", text.substr(0, limit), text.size());
}

std::string format_input_error(const std::string& where, const std::string& field,
                               const std::string& problem, const std::string& fix) {
  constexpr size_t kFieldLimit = 200;
  constexpr size_t kProblemLimit = 600;
  std::string text = field.empty()
                         ? fmt::format("{}: {}", where, bounded(problem, kProblemLimit))
                         : fmt::format("{}: field '{}': {}", where, bounded(field, kFieldLimit),
                                       bounded(problem, kProblemLimit));
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
