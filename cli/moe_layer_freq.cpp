#include "cli/moe_layer_freq.hpp"

#include <cctype>
#include <optional>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "cli/number_flags.hpp"
#include "common/error.hpp"

namespace strata::cli {

namespace {

constexpr const char* kFlag = "--moe-layer-freq";
constexpr const char* kShapeFix =
    "give 1 (every layer MoE) or a list of the first k layers dense and the rest MoE, e.g. "
    "\"([0]*3+[1]*58)\" for 3 of 61";
// The longest list a pattern may build: ModelSpec's bound on layers (models/model_spec.cpp).
constexpr int64_t kMaxPatternLength = int64_t{1} << 16;
// Numbers in a pattern (repeat counts): far above any layer count, small enough that a product
// of two stays within 64 bits.
constexpr int64_t kMaxNumber = int64_t{1} << 30;

[[noreturn]] void refuse(const std::string& problem, const std::string& fix = kShapeFix) {
  throw InputError("command line", kFlag, problem, fix);
}

// The pattern as quoted in a message, cut to a line's length.
std::string quoted(std::string_view text) {
  constexpr size_t kLength = 60;
  if (text.size() <= kLength) return fmt::format("'{}'", text);
  return fmt::format("'{}...' ({} characters)", text.substr(0, kLength), text.size());
}

// A value of the expression: a whole number, or a list of them.
struct PatternValue {
  std::optional<int64_t> number;  // unset for a list
  std::vector<int64_t> items;

  static PatternValue whole(int64_t n) { return {n, {}}; }
};

// Reads the expression by recursive descent, with Python's precedence:
//   sum := product ('+' product)*    product := atom ('*' atom)*
//   atom := '(' sum ')' | '[' [number (',' number)* [',']] ']' | number
// Python's meaning: list + list joins, list * n and n * list repeat, numbers add and multiply.
class PatternReader {
 public:
  explicit PatternReader(std::string_view text) : text_(text) {}

  std::vector<int64_t> list() {
    PatternValue value = sum();
    skip_blanks();
    if (pos_ != text_.size()) unreadable();
    if (value.number) refuse(fmt::format("{} is a number, not a list", quoted(text_)));
    return std::move(value.items);
  }

 private:
  [[noreturn]] void unreadable() const {
    refuse(
        fmt::format("{} is not a list expression Strata reads (lists of 0 and 1 joined by + "
                    "and *, parentheses)",
                    quoted(text_)));
  }

  void skip_blanks() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  bool accept(char c) {
    skip_blanks();
    if (pos_ >= text_.size() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }

  PatternValue sum() {
    PatternValue value = product();
    while (accept('+')) value = add(std::move(value), product());
    return value;
  }

  PatternValue product() {
    PatternValue value = atom();
    while (accept('*')) value = multiply(std::move(value), atom());
    return value;
  }

  PatternValue atom() {
    if (accept('(')) {
      // A bound on the recursion, far above any pattern's nesting, so that no text can exhaust
      // the stack.
      if (++depth_ > kMaxDepth) {
        refuse(fmt::format("{} nests parentheses deeper than {}", quoted(text_), kMaxDepth));
      }
      PatternValue value = sum();
      if (!accept(')')) unreadable();
      --depth_;
      return value;
    }
    if (accept('[')) return bracketed();
    return PatternValue::whole(number());
  }

  // After '[': numbers separated by commas, a trailing comma allowed, up to ']'.
  PatternValue bracketed() {
    PatternValue value;
    while (!accept(']')) {
      value.items.push_back(number());
      if (accept(']')) break;
      if (!accept(',')) unreadable();
    }
    if (static_cast<int64_t>(value.items.size()) > kMaxPatternLength) too_long();
    return value;
  }

  int64_t number() {
    skip_blanks();
    const size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    if (pos_ == start || pos_ - start > 9) unreadable();
    return *parse_int(text_.substr(start, pos_ - start));
  }

  [[noreturn]] void too_long() const {
    refuse(fmt::format("{} builds a list longer than any model's {} layers", quoted(text_),
                       kMaxPatternLength));
  }

  PatternValue add(PatternValue a, PatternValue b) const {
    if (a.number.has_value() != b.number.has_value()) unreadable();  // Python's TypeError
    if (a.number) {
      if (*a.number + *b.number > kMaxNumber) too_long();
      return PatternValue::whole(*a.number + *b.number);
    }
    if (a.items.size() + b.items.size() > static_cast<size_t>(kMaxPatternLength)) too_long();
    a.items.insert(a.items.end(), b.items.begin(), b.items.end());
    return a;
  }

  PatternValue multiply(PatternValue a, PatternValue b) const {
    if (a.number && b.number) {
      if (*a.number * *b.number > kMaxNumber) too_long();
      return PatternValue::whole(*a.number * *b.number);
    }
    if (!a.number && !b.number) unreadable();  // list * list: Python's TypeError
    const int64_t times = a.number ? *a.number : *b.number;
    const std::vector<int64_t>& once = a.number ? b.items : a.items;
    const int64_t size = static_cast<int64_t>(once.size());
    PatternValue repeated;
    if (size == 0) return repeated;
    if (times > kMaxPatternLength / size) too_long();
    for (int64_t i = 0; i < times; ++i)
      repeated.items.insert(repeated.items.end(), once.begin(), once.end());
    return repeated;
  }

  static constexpr int kMaxDepth = 64;

  std::string_view text_;
  size_t pos_ = 0;
  int depth_ = 0;
};

// An int N: layer i is MoE when i % N == 0, which only N = 1 (every layer) leaves as "the first k
// dense, the rest MoE".
int64_t from_frequency(const std::string& text) {
  // Python's int() reads the number between blanks.
  const size_t first = text.find_first_not_of(" \t");
  const size_t last = text.find_last_not_of(" \t");
  const std::optional<int64_t> every =
      first == std::string::npos ? std::nullopt : parse_int(text.substr(first, last - first + 1));
  if (!every) {
    refuse(fmt::format("{} is neither a whole number nor a list expression", quoted(text)));
  }
  if (*every < 1) {
    refuse(
        fmt::format("must be at least 1, found {} (Megatron-LM makes layer i MoE when "
                    "i % N == 0)",
                    *every));
  }
  if (*every > 1) {
    refuse(
        fmt::format("{} makes layer i MoE when i % {} == 0 (layers 0, {}, {}, ...), and "
                    "Strata's models have their first k layers dense and the rest MoE",
                    *every, *every, *every, 2 * *every));
  }
  return 0;
}

}  // namespace

int64_t first_dense_layers_of(const std::string& text, int64_t layers) {
  if (text.find('[') == std::string::npos) return from_frequency(text);
  const std::vector<int64_t> pattern = PatternReader(text).list();
  if (static_cast<int64_t>(pattern.size()) != layers) {
    refuse(fmt::format("{} gives {} layers, and the model has {}", quoted(text), pattern.size(),
                       layers),
           "give one 0 (dense) or 1 (MoE) per layer, as Megatron-LM asserts");
  }
  size_t first_moe = pattern.size();
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != 0 && pattern[i] != 1) {
      refuse(fmt::format("{} holds {}, and a layer is 0 (dense) or 1 (MoE)", quoted(text),
                         pattern[i]));
    }
    if (pattern[i] == 1 && first_moe == pattern.size()) first_moe = i;
    if (pattern[i] == 0 && first_moe < i) {
      refuse(
          fmt::format("{} has a dense layer ({}) after an MoE one ({}), and Strata's models "
                      "have their first k layers dense and the rest MoE",
                      quoted(text), i, first_moe));
    }
  }
  if (first_moe == pattern.size()) {
    refuse(fmt::format("{} has no MoE layer", quoted(text)),
           "give at least one 1, or leave out --num-experts for a dense model");
  }
  return static_cast<int64_t>(first_moe);
}

}  // namespace strata::cli
