#include "viewer/image.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string_view>
#include <utility>

#include <stb_image.h>
#include <stb_image_write.h>

#include "common/atomic_file.hpp"
#include "common/error.hpp"

// stb's implementation is compiled into Debian's libstb (linked through imgui's pkg-config file),
// so this file includes its headers only.

namespace strata::viewer {

namespace {

constexpr int kChannels = 4;  // RGBA, one byte each

size_t byte_size(int width, int height) {
  return static_cast<size_t>(width) * static_cast<size_t>(height) * kChannels;
}

void check_layout(const Image& image) {
  STRATA_ASSERT(image.width >= 0 && image.height >= 0 &&
                    image.rgba.size() == byte_size(image.width, image.height),
                "an Image's rgba holds width x height x 4 bytes");
}

// stbi_write_png_to_func's callback: appends the encoded bytes to the std::string at `context`.
void append_bytes(void* context, void* data, int size) {
  static_cast<std::string*>(context)->append(static_cast<const char*>(data),
                                             static_cast<size_t>(size));
}

// The whole file, or an InputError naming it.
std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw InputError(path, "", "cannot open the PNG file for reading",
                     "check that the file exists and is readable");
  }
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

std::array<uint8_t, 4> Image::at(int x, int y) const {
  STRATA_ASSERT(x >= 0 && x < width && y >= 0 && y < height, "pixel outside the image");
  const size_t offset = byte_size(width, y) + static_cast<size_t>(x) * kChannels;
  return {rgba[offset], rgba[offset + 1], rgba[offset + 2], rgba[offset + 3]};
}

void write_png(const std::string& path, const Image& image) {
  check_layout(image);
  std::string encoded;
  const int ok = stbi_write_png_to_func(append_bytes, &encoded, image.width, image.height,
                                        kChannels, image.rgba.data(), image.width * kChannels);
  if (!ok) {
    throw InputError(path, "",
                     "cannot encode a " + std::to_string(image.width) + "x" +
                         std::to_string(image.height) + " image as PNG",
                     "render an image of at least 1x1 pixel");
  }
  write_files_atomically({{path, std::move(encoded)}});
}

Image read_png(const std::string& path) {
  const std::string bytes = read_bytes(path);
  // The 8-byte signature every PNG starts with (PNG specification, section 5.2); stb would also
  // decode JPEG, BMP and others, which are not what the screenshot tests compare.
  constexpr std::string_view kSignature = "\x89PNG\r\n\x1a\n";
  if (!bytes.starts_with(kSignature)) {
    throw InputError(path, "", "the file is not a PNG image (no PNG signature)",
                     "pass a PNG file, for example one written by `strata view --screenshot`");
  }
  int width = 0;
  int height = 0;
  int channels_in_file = 0;
  const std::unique_ptr<stbi_uc, void (*)(void*)> pixels(
      stbi_load_from_memory(reinterpret_cast<const stbi_uc*>(bytes.data()),
                            static_cast<int>(bytes.size()), &width, &height, &channels_in_file,
                            kChannels),
      stbi_image_free);
  if (!pixels) {
    throw InputError(path, "", std::string("cannot decode the PNG: ") + stbi_failure_reason(),
                     "write the file again; it may be truncated or corrupt");
  }
  Image image{width, height, {}};
  image.rgba.assign(pixels.get(), pixels.get() + byte_size(width, height));
  return image;
}

ImageDifference compare_images(const Image& a, const Image& b, int channel_tolerance) {
  check_layout(a);
  check_layout(b);
  ImageDifference difference;
  if (a.width != b.width || a.height != b.height) return difference;  // same_size false, zeros
  difference.same_size = true;
  difference.pixels = static_cast<int64_t>(a.width) * a.height;
  for (size_t pixel = 0; pixel < a.rgba.size(); pixel += kChannels) {
    int pixel_delta = 0;
    for (size_t channel = pixel; channel < pixel + kChannels; ++channel)
      pixel_delta = std::max(pixel_delta, std::abs(int{a.rgba[channel]} - int{b.rgba[channel]}));
    difference.max_channel_delta = std::max(difference.max_channel_delta, pixel_delta);
    if (pixel_delta > channel_tolerance) ++difference.differing;
  }
  return difference;
}

}  // namespace strata::viewer
