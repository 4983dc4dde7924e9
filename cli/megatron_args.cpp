#include "cli/megatron_args.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "cli/megatron_ignored_flags.hpp"
#include "cli/number_flags.hpp"
#include "common/error.hpp"
#include "common/json_input.hpp"

namespace strata::cli {

namespace {

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// `NAME=` at the start of a word: the length of NAME, or 0.
size_t assignment_name(std::string_view word) {
  if (word.empty() || std::isdigit(static_cast<unsigned char>(word[0]))) return 0;
  size_t n = 0;
  while (n < word.size() && is_name_char(word[n])) ++n;
  return n > 0 && n < word.size() && word[n] == '=' ? n : 0;
}

// The shell reader: one pass over the text, expanding as it goes, so that an assignment is seen
// by the lines after it as in a shell.
class ShellReader {
 public:
  explicit ShellReader(std::string_view text) : text_(text) {}

  std::vector<std::vector<std::string>> commands() {
    while (pos_ < text_.size()) read_command();
    return std::move(commands_);
  }

 private:
  char peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }

  void finish_word() {
    if (in_word_) words_.push_back(std::move(word_));
    word_.clear();
    in_word_ = false;
  }

  // Unquoted expansions split on blanks into several words (the shell's field splitting).
  void append_split(const std::string& value) {
    size_t i = 0;
    while (i < value.size()) {
      if (std::isspace(static_cast<unsigned char>(value[i]))) {
        finish_word();
        ++i;
        continue;
      }
      word_ += value[i++];
      in_word_ = true;
    }
  }

  std::string variable(const std::string& name) const {
    const auto found = vars_.find(name);
    return found != vars_.end() ? found->second : "$" + name;
  }

  // $(( a * b + c )): whole numbers, + - * / and parentheses-free precedence; nullopt when it
  // holds anything else (a command's output, an unset variable).
  std::optional<long long> arithmetic(std::string expr) const {
    std::string expanded;
    for (size_t i = 0; i < expr.size();) {
      if (expr[i] == '$' || std::isalpha(static_cast<unsigned char>(expr[i])) || expr[i] == '_') {
        size_t j = i + (expr[i] == '$' ? 1 : 0);
        const bool braced = j < expr.size() && expr[j] == '{';
        if (braced) ++j;
        size_t end = j;
        while (end < expr.size() && is_name_char(expr[end])) ++end;
        const auto found = vars_.find(expr.substr(j, end - j));
        if (found == vars_.end()) return std::nullopt;
        expanded += found->second;
        i = end + (braced && end < expr.size() && expr[end] == '}' ? 1 : 0);
      } else {
        expanded += expr[i++];
      }
    }
    // Terms joined by + and -, each a product of factors joined by * and /.
    long long total = 0, term = 0;
    char sum_op = '+', product_op = '\0';  // '\0': the term's first factor
    size_t i = 0;
    const auto skip = [&] {
      while (i < expanded.size() && std::isspace(static_cast<unsigned char>(expanded[i]))) ++i;
    };
    while (true) {
      skip();
      size_t end = i;
      while (end < expanded.size() && std::isdigit(static_cast<unsigned char>(expanded[end])))
        ++end;
      if (end == i || end - i > 9) return std::nullopt;  // small enough never to overflow
      const long long number = std::stoll(expanded.substr(i, end - i));
      if (product_op == '/' && number == 0) return std::nullopt;
      term = product_op == '\0' ? number : product_op == '*' ? term * number : term / number;
      if (term > (1LL << 40) || term < -(1LL << 40)) return std::nullopt;
      i = end;
      skip();
      const char op = i < expanded.size() ? expanded[i++] : '\0';
      if (op == '*' || op == '/') {
        product_op = op;
        continue;
      }
      total = sum_op == '+' ? total + term : total - term;
      if (op == '\0') return total;
      if (op != '+' && op != '-') return std::nullopt;
      sum_op = op;
      product_op = '\0';
    }
  }

  // After '$': a name, {name...}, ((arithmetic)) or (command): the expanded text.
  std::string expansion() {
    if (peek() == '(' && peek(1) == '(') {
      const size_t close = text_.find("))", pos_ + 2);
      if (close != std::string_view::npos) {
        const std::string expr(text_.substr(pos_ + 2, close - pos_ - 2));
        pos_ = close + 2;
        const auto value = arithmetic(expr);
        return value ? std::to_string(*value) : "$((" + expr + "))";
      }
    }
    if (peek() == '(') {  // a command's output: unknown here
      const size_t close = text_.find(')', pos_);
      const size_t end = close == std::string_view::npos ? text_.size() : close + 1;
      const std::string text = "$" + std::string(text_.substr(pos_, end - pos_));
      pos_ = end;
      return text;
    }
    if (peek() == '{') {
      const size_t close = text_.find('}', pos_);
      if (close == std::string_view::npos) return "$";
      std::string inner(text_.substr(pos_ + 1, close - pos_ - 1));
      pos_ = close + 1;
      for (const std::string_view array : {"[@]", "[*]"}) {
        if (inner.size() > array.size() && inner.ends_with(array))
          inner.resize(inner.size() - array.size());
      }
      size_t n = 0;
      while (n < inner.size() && is_name_char(inner[n])) ++n;
      const std::string name = inner.substr(0, n);
      const std::string rest = inner.substr(n);
      const bool set = vars_.count(name) > 0;
      if (rest.starts_with(":-") || rest.starts_with(":=")) {
        return set && !vars_.at(name).empty() ? vars_.at(name) : rest.substr(2);
      }
      if (rest.starts_with("-") || rest.starts_with("="))
        return set ? vars_.at(name) : rest.substr(1);
      return rest.empty() ? variable(name) : "${" + inner + "}";
    }
    size_t end = pos_;
    while (end < text_.size() && is_name_char(text_[end])) ++end;
    if (end == pos_) {
      if (end < text_.size() && (text_[end] == '@' || text_[end] == '*' || text_[end] == '#')) {
        ++pos_;
        return std::string("$") + text_[end];
      }
      return "$";
    }
    const std::string name(text_.substr(pos_, end - pos_));
    pos_ = end;
    return variable(name);
  }

  // "...": expansions inside keep their blanks (no splitting), and a backslash-newline is a line
  // continuation as outside.
  void read_double_quoted() {
    ++pos_;
    in_word_ = true;
    while (pos_ < text_.size() && peek() != '"') {
      if (peek() == '\\' && peek(1) == '\n') {
        pos_ += 2;
      } else if (peek() == '\\' && pos_ + 1 < text_.size() &&
                 std::string_view("\"\\$`").find(peek(1)) != std::string_view::npos) {
        word_ += text_[pos_ + 1];
        pos_ += 2;
      } else if (peek() == '$') {
        ++pos_;
        word_ += expansion();
      } else {
        word_ += text_[pos_++];
      }
    }
    ++pos_;
  }

  // NAME=( words ): the array's words, joined by blanks (expanded again with ${NAME[@]}).
  void read_array(size_t name_length) {
    const std::string name = word_.substr(0, name_length);
    word_.clear();
    in_word_ = false;
    ++pos_;  // '('
    std::vector<std::string> outer = std::move(words_);
    words_.clear();
    while (pos_ < text_.size() && peek() != ')') {
      if (!read_piece(/*in_array=*/true)) ++pos_;
    }
    ++pos_;
    finish_word();
    std::string joined;
    for (const std::string& element : words_) joined += (joined.empty() ? "" : " ") + element;
    vars_[name] = joined;
    words_ = std::move(outer);
    assigned_array_ = true;
  }

  // Reads one character's worth of the current command; false at a command's end.
  bool read_piece(bool in_array) {
    const char c = peek();
    if (c == '\\' && peek(1) == '\n') {  // a line continuation
      pos_ += 2;
      return true;
    }
    if (c == '\n' || c == ';' || c == '&' || c == '|') {
      if (in_array && c == '\n') {
        finish_word();
        ++pos_;
        return true;
      }
      return false;
    }
    if (c == ' ' || c == '\t' || c == '\r') {
      finish_word();
      ++pos_;
    } else if (c == '#' && !in_word_) {
      while (pos_ < text_.size() && peek() != '\n') ++pos_;
    } else if (c == '\'') {
      const size_t close = text_.find('\'', pos_ + 1);
      const size_t end = close == std::string_view::npos ? text_.size() : close;
      word_ += text_.substr(pos_ + 1, end - pos_ - 1);
      in_word_ = true;
      pos_ = std::min(text_.size(), end + 1);
    } else if (c == '"') {
      read_double_quoted();
    } else if (c == '$') {
      ++pos_;
      append_split(expansion());
    } else if (c == '\\') {
      if (pos_ + 1 < text_.size()) word_ += text_[pos_ + 1];
      in_word_ = true;
      pos_ += 2;
    } else if (c == '(' && !in_array && words_.empty() && assignment_name(word_) > 0 &&
               word_.back() == '=') {
      read_array(assignment_name(word_));
    } else {
      word_ += c;
      in_word_ = true;
      ++pos_;
    }
    return true;
  }

  void read_command() {
    assigned_array_ = false;
    while (pos_ < text_.size() && read_piece(/*in_array=*/false)) {
    }
    finish_word();
    while (pos_ < text_.size() && std::string_view("\n;&|").find(peek()) != std::string_view::npos)
      ++pos_;
    // Leading NAME=value words (after `export`, `local` or `declare`) set variables.
    std::vector<std::string> words = std::move(words_);
    words_.clear();
    size_t first = 0;
    if (!words.empty() && (words[0] == "export" || words[0] == "local" || words[0] == "declare"))
      first = 1;
    while (first < words.size() && assignment_name(words[first]) > 0) {
      const size_t n = assignment_name(words[first]);
      vars_[words[first].substr(0, n)] = words[first].substr(n + 1);
      ++first;
    }
    if (first < words.size() && !assigned_array_)
      commands_.emplace_back(words.begin() + static_cast<std::ptrdiff_t>(first), words.end());
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::string word_;
  bool in_word_ = false;
  bool assigned_array_ = false;
  std::vector<std::string> words_;
  std::map<std::string, std::string> vars_;
  std::vector<std::vector<std::string>> commands_;
};

// torchrun's, torch.distributed.launch's and the DeepSpeed launcher's flags.
constexpr std::string_view kLauncherFlags[] = {
    "--nproc_per_node", "--nproc-per-node", "--nnodes",       "--node_rank",   "--node-rank",
    "--master_addr",    "--master-addr",    "--master_port",  "--master-port", "--rdzv_endpoint",
    "--rdzv-endpoint",  "--rdzv_backend",   "--rdzv-backend", "--rdzv_id",     "--rdzv-id",
    "--standalone",     "--max_restarts",   "--max-restarts", "--num_gpus",    "--num-gpus",
    "--num_nodes",      "--num-nodes",      "--hostfile",     "--include",     "--exclude",
    "--use_env",        "--local_rank",     "--local-rank",   "--module",      "--no_python"};

bool is_launcher_flag(std::string_view flag) {
  return std::find(std::begin(kLauncherFlags), std::end(kLauncherFlags), flag) !=
         std::end(kLauncherFlags);
}

// A launcher's count of GPUs or nodes: a whole number small enough that their product cannot
// overflow (9 digits); nullopt for anything else (an elastic range "1:4", a variable).
std::optional<int64_t> launcher_count(const std::optional<std::string>& text) {
  const std::optional<int64_t> count = text ? parse_int(*text) : std::nullopt;
  if (!count || *count < 0 || *count > 999'999'999) return std::nullopt;
  return count;
}

// A word after a flag that is its value: not itself a flag, nor a Python script.
bool is_value_word(const std::string& word) {
  return !word.starts_with("--") && !word.ends_with(".py");
}

// A modelled flag as words for the command line: the flag and its value, or its values for an
// option that takes a list (Megatron's nargs='+', --cp-comm-type p2p p2p a2a), all of them so
// that the option sees the list. Throws InputError naming the file for a value missing or from
// outside it.
std::vector<std::string> modelled_words(const std::string& path, const ScriptFlag& flag,
                                        const CLI::Option& option) {
  std::vector<std::string> words{flag.name};
  if (option.get_expected_min() == 0) return words;
  if (!flag.value) throw InputError(path, flag.name, "has no value", "give its value after it");
  words.push_back(*flag.value);
  if (option.get_items_expected_max() > 1)
    words.insert(words.end(), flag.more_values.begin(), flag.more_values.end());
  for (auto value = words.begin() + 1; value != words.end(); ++value) {
    if (value->starts_with("$")) {
      throw InputError(path, flag.name,
                       fmt::format("its value '{}' comes from outside the file (a variable it "
                                   "does not set, or a command's output)",
                                   value->substr(0, 80)),
                       "set the variable in the file, or give the flag on the command line");
    }
  }
  return words;
}

}  // namespace

std::vector<std::vector<std::string>> shell_commands(std::string_view text) {
  return ShellReader(text).commands();
}

std::vector<ScriptFlag> script_flags(std::string_view text) {
  std::vector<ScriptFlag> flags;
  for (const std::vector<std::string>& words : shell_commands(text)) {
    // A script that echoes its command before running it names each flag twice.
    if (words.front() == "echo" || words.front() == "printf") continue;
    for (size_t i = 0; i < words.size(); ++i) {
      const std::string& word = words[i];
      if (!word.starts_with("--") || word.size() == 2) continue;
      ScriptFlag flag;
      const size_t equals = word.find('=');
      flag.name = word.substr(0, equals);
      if (equals != std::string::npos) {
        flag.value = word.substr(equals + 1);
      } else if (i + 1 < words.size() && is_value_word(words[i + 1])) {
        flag.value = words[++i];
        while (i + 1 < words.size() && is_value_word(words[i + 1]) &&
               words[i + 1].find_first_of("<>") == std::string::npos)
          flag.more_values.push_back(words[++i]);
      }
      flags.push_back(std::move(flag));
    }
  }
  return flags;
}

std::vector<std::string> expand_megatron_args(const CLI::App& app, std::vector<std::string> args) {
  const auto at = std::find_if(args.begin(), args.end(), [](const std::string& arg) {
    return arg == "--megatron-args" || arg.starts_with("--megatron-args=");
  });
  if (at == args.end() || args.empty()) return args;
  const CLI::App* command = nullptr;
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->check_name(args.front())) command = sub;
  }
  if (command == nullptr) return args;  // the parser reports the unknown subcommand
  std::string path;
  auto erase_end = at + 1;
  if (at->starts_with("--megatron-args=")) {
    path = at->substr(std::string_view("--megatron-args=").size());
  } else if (at + 1 != args.end()) {
    path = *(at + 1);
    erase_end = at + 2;
  }
  if (path.empty()) {
    throw InputError("command line", "--megatron-args", "no file given",
                     "give the launch script or argument file, e.g. --megatron-args train.sh");
  }
  args.erase(at, erase_end);
  // The options the command line gives itself win over the file's.
  std::vector<const CLI::Option*> given;
  for (const std::string& arg : args) {
    if (!arg.starts_with("--")) continue;
    if (const CLI::Option* option = command->get_option_no_throw(arg.substr(0, arg.find('='))))
      given.push_back(option);
  }

  struct Modelled {
    const CLI::Option* option;
    std::vector<std::string> words;  // the flag and its value
  };
  std::vector<Modelled> modelled;
  std::vector<std::string> ignored, refused;
  std::optional<int64_t> per_node, nodes;
  for (const ScriptFlag& flag : script_flags(read_text_file(path))) {
    if (is_launcher_flag(flag.name)) {
      if (flag.name.starts_with("--nproc") || flag.name.starts_with("--num_gpus") ||
          flag.name == "--num-gpus")
        per_node = launcher_count(flag.value);
      if (flag.name == "--nnodes" || flag.name == "--num_nodes" || flag.name == "--num-nodes")
        nodes = launcher_count(flag.value);
      continue;
    }
    const CLI::Option* option = flag.name == "--megatron-args" || flag.name == "--help"
                                    ? nullptr
                                    : command->get_option_no_throw(flag.name);
    if (option != nullptr) {
      if (std::find(given.begin(), given.end(), option) != given.end()) continue;
      Modelled entry{option, modelled_words(path, flag, *option)};
      // A flag the script gives twice: the later one, as argparse takes it.
      const auto earlier = std::find_if(modelled.begin(), modelled.end(),
                                        [&](const Modelled& m) { return m.option == option; });
      if (earlier != modelled.end()) {
        *earlier = std::move(entry);
      } else {
        modelled.push_back(std::move(entry));
      }
    } else if (ignored_flag_reason(flag.name)) {
      if (std::find(ignored.begin(), ignored.end(), flag.name) == ignored.end())
        ignored.push_back(flag.name);
    } else if (std::find(refused.begin(), refused.end(), flag.name) == refused.end()) {
      refused.push_back(flag.name);
    }
  }
  if (!refused.empty()) {
    throw InputError(
        path, fmt::format("{}", fmt::join(refused, ", ")),
        fmt::format("{} that Strata does not model, or does not know, and that may change the "
                    "step's time or memory",
                    refused.size() == 1 ? "a flag" : "flags"),
        "drop them from a copy of the file if they do not change performance (the flags read "
        "and ignored are listed in cli/README.md), or plan without them");
  }
  const bool gpus_given = std::any_of(args.begin(), args.end(), [](const std::string& arg) {
    return arg == "--gpus" || arg.starts_with("--gpus=");
  });
  std::vector<std::string> words;
  for (const Modelled& m : modelled) words.insert(words.end(), m.words.begin(), m.words.end());
  if (per_node && !gpus_given && command->get_option_no_throw("--gpus") != nullptr) {
    words.push_back("--gpus");
    words.push_back(std::to_string(*per_node * nodes.value_or(1)));
  }
  if (!ignored.empty()) {
    fmt::print(stderr, "strata: note: {}: read, without effect on the prediction: {}\n", path,
               fmt::join(ignored, " "));
  }
  args.insert(args.begin() + 1, words.begin(), words.end());
  return args;
}

}  // namespace strata::cli
