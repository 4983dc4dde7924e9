#pragma once
// An RGBA image (a rendered frame), PNG files, and the comparison the screenshot tests use.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::viewer {

struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgba;  // width x height x 4, the top row first

  std::array<uint8_t, 4> at(int x, int y) const;
};

// Writes a PNG atomically (a temporary file, then rename); an InputError naming the path when it
// cannot be written.
void write_png(const std::string& path, const Image& image);
// Reads a PNG as RGBA; an InputError naming the path when it cannot be read.
Image read_png(const std::string& path);

struct ImageDifference {
  bool same_size = false;
  int64_t pixels = 0;         // width x height
  int64_t differing = 0;      // pixels with some channel differing by more than the tolerance
  int max_channel_delta = 0;  // the largest difference of one channel
};
// Pixel-by-pixel comparison: a pixel differs when any channel differs by more than
// `channel_tolerance`.
ImageDifference compare_images(const Image& a, const Image& b, int channel_tolerance);

}  // namespace strata::viewer
