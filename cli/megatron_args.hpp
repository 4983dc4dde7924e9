#pragma once
// --megatron-args FILE: a Megatron-LM or Megatron-DeepSpeed launch script (or a file of
// arguments) as users have it. Its shell is read as far as such scripts use it: line
// continuations, comments, quotes, variables set in the script (NAME=value, export, arrays
// NAME=( ... )) and expanded ($NAME, ${NAME}, ${NAME:-default}, ${NAME[@]}, $(( arithmetic ))).
// Every flag is then either modelled (an option of the command: read as if given on the command
// line, where the command line's own flags win), read and ignored because it does not change a
// step's time or memory (the list of cli/megatron_ignored_flags, noted on stderr), a launcher flag
// (torchrun's or DeepSpeed's GPUs per node and nodes give --gpus), or refused: one error names
// every flag that would change performance and that Strata does not model, in the order given.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

namespace strata::cli {

// The commands of a shell script, each as its words after expansion; assignments are applied,
// not returned. A variable the script does not set expands to its own text ("$NNODES").
std::vector<std::vector<std::string>> shell_commands(std::string_view text);

struct ScriptFlag {
  std::string name;                  // "--num-layers"
  std::optional<std::string> value;  // the next word, or what followed '='
  // The words after the next one up to the next flag (a list: --cp-comm-type p2p p2p a2a), but
  // for a redirection's (">", "2>"); read only by an option that takes a list.
  std::vector<std::string> more_values;
};

// The --flags of the script's commands that carry any, in order, each with the words after it
// when they are not themselves flags (nor a Python script).
std::vector<ScriptFlag> script_flags(std::string_view text);

// `args` are the program's arguments without its name. When they hold `--megatron-args FILE`,
// returns them with it replaced by the file's modelled flags (after the subcommand's name), and
// prints the ignored flags as a note on stderr. Throws InputError naming the file for an
// unreadable file or for flags that would change performance and are not modelled.
std::vector<std::string> expand_megatron_args(const CLI::App& app, std::vector<std::string> args);

}  // namespace strata::cli
