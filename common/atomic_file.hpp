#pragma once
// Output files are written whole or not at all: the content goes to a temporary file beside the
// target, which is then renamed over it. A failure leaves no half-written file behind.

#include <string>
#include <string_view>

namespace strata {

// Throws InputError (naming `path`) when the directory is missing or not writable.
void write_file_atomically(const std::string& path, std::string_view content);

}  // namespace strata
