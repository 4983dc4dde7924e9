#pragma once
// Output files are written whole or not at all: each file's content goes to a temporary file
// beside its target; only when every temporary file is complete are they renamed over their
// targets. A failure removes the temporary files and leaves no output behind.

#include <string>
#include <vector>

namespace strata {

struct OutputFile {
  std::string path;
  std::string content;
};

// Throws InputError (naming the path at fault) when a directory is missing or not writable.
void write_files_atomically(const std::vector<OutputFile>& files);

}  // namespace strata
