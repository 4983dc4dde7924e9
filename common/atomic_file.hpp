#pragma once
// Output files are written whole or not at all: each file's content goes to a temporary file
// beside its target; only when every temporary file is complete are they renamed over their
// targets, each old target moved aside first. A failure removes the temporary files, puts back
// every target already replaced, and leaves no output behind.

#include <string>
#include <vector>

namespace strata {

struct OutputFile {
  std::string path;
  std::string content;
};

// Throws InputError naming the path at fault: an empty path, a path that exists and is not a
// regular file (a directory, device or FIFO, which a rename would replace), a missing directory,
// or two outputs naming the same file. Commands that work long before writing call it first.
void check_output_paths(const std::vector<OutputFile>& files);

// check_output_paths, then the write. Throws InputError (naming the path at fault) when a
// directory is not writable or a write fails.
void write_files_atomically(const std::vector<OutputFile>& files);

}  // namespace strata
