// PNG files and image comparison (viewer/image.hpp): a written image reads back byte for byte,
// a failed write names the path and leaves no file behind, and compare_images counts the pixels
// whose largest channel difference exceeds the tolerance.

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include <unistd.h>

#include "tests/input_error.hpp"
#include "tests/temp_file.hpp"
#include "viewer/image.hpp"

namespace strata::viewer {
namespace {

// A width x height image whose every pixel differs from its neighbors: red counts columns, green
// rows, blue both, alpha varies too (so a channel or row mix-up shows).
Image gradient(int width, int height) {
  Image image{width, height, {}};
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      image.rgba.push_back(static_cast<uint8_t>(x * 7));
      image.rgba.push_back(static_cast<uint8_t>(y * 11));
      image.rgba.push_back(static_cast<uint8_t>(x * 3 + y * 5));
      image.rgba.push_back(static_cast<uint8_t>(255 - (x + y) % 128));
    }
  }
  return image;
}

std::filesystem::path unique_temp_path(const std::string& stem) {
  return std::filesystem::temp_directory_path() / (stem + "_" + std::to_string(::getpid()));
}

// The PNG encoding is lossless: every byte of a non-square image with an odd width (rows not a
// multiple of 4 bytes apart in the file) comes back, in order, with Image::at addressing
// (x, y) as column x of row y counted from the top.
TEST_CASE("write_png then read_png returns the same image", "[viewer][image]") {
  const Image written = gradient(37, 20);
  const test::TempFile file("", "strata_image_round_trip");
  write_png(file.path(), written);
  const Image read = read_png(file.path());
  CHECK(read.width == 37);
  CHECK(read.height == 20);
  CHECK(read.rgba == written.rgba);
  CHECK(read.at(5, 3) == std::array<uint8_t, 4>{35, 33, 30, 247});
}

// A PNG whose directory does not exist cannot be written: the InputError names the path, and no
// file (nor the directory) appears.
TEST_CASE("write_png into a missing directory throws InputError naming the path",
          "[viewer][image]") {
  const std::filesystem::path directory = unique_temp_path("strata_missing_directory");
  const std::string path = (directory / "frame.png").string();
  const auto error = test::input_error_of([&] { write_png(path, gradient(3, 2)); });
  REQUIRE(error.has_value());
  CHECK(error->where() == path);
  CHECK_FALSE(std::filesystem::exists(directory));
}

// The write is atomic: when the final rename fails (the target is a directory), the temporary
// file beside it is removed, so the parent holds only what it held before.
TEST_CASE("write_png over a directory throws and leaves no temporary file", "[viewer][image]") {
  const std::filesystem::path parent = unique_temp_path("strata_png_parent");
  std::filesystem::create_directories(parent / "frame.png");
  const std::string path = (parent / "frame.png").string();
  const auto error = test::input_error_of([&] { write_png(path, gradient(3, 2)); });
  const auto entries = std::distance(std::filesystem::directory_iterator(parent),
                                     std::filesystem::directory_iterator());
  std::filesystem::remove_all(parent);
  REQUIRE(error.has_value());
  CHECK(error->where() == path);
  CHECK(entries == 1);  // the directory named frame.png, nothing else
}

// A file that is not a PNG (no PNG signature), or no file at all, is refused with the path named.
TEST_CASE("read_png of a non-PNG or missing file throws InputError naming the path",
          "[viewer][image]") {
  const test::TempFile text("not a PNG image", "strata_not_png");
  const auto not_png = test::input_error_of([&] { read_png(text.path()); });
  REQUIRE(not_png.has_value());
  CHECK(not_png->where() == text.path());

  const std::string missing = unique_temp_path("strata_missing_png").string();
  const auto not_found = test::input_error_of([&] { read_png(missing); });
  REQUIRE(not_found.has_value());
  CHECK(not_found->where() == missing);
}

// A PNG cut short after its header is refused (stb's decoder error), not read as a partial image.
TEST_CASE("read_png of a truncated PNG throws InputError", "[viewer][image]") {
  const test::TempFile full("", "strata_full_png");
  write_png(full.path(), gradient(37, 20));
  const auto size = std::filesystem::file_size(full.path());
  std::filesystem::resize_file(full.path(), size / 2);
  const auto error = test::input_error_of([&] { read_png(full.path()); });
  REQUIRE(error.has_value());
  CHECK(error->where() == full.path());
}

// A pixel differs when its largest channel difference exceeds the tolerance: one channel moved by
// 10 is one differing pixel at tolerance 8 and none at tolerance 12 (max delta 10 either way).
TEST_CASE("compare_images counts pixels beyond the channel tolerance", "[viewer][image]") {
  const Image a = gradient(37, 20);
  const ImageDifference same = compare_images(a, a, 0);
  CHECK(same.same_size);
  CHECK(same.pixels == 37 * 20);
  CHECK(same.differing == 0);
  CHECK(same.max_channel_delta == 0);

  Image b = a;
  const size_t green_of_pixel_4_2 = (2 * 37 + 4) * 4 + 1;
  b.rgba[green_of_pixel_4_2] = static_cast<uint8_t>(b.rgba[green_of_pixel_4_2] + 10);
  const ImageDifference strict = compare_images(a, b, 8);
  CHECK(strict.same_size);
  CHECK(strict.differing == 1);
  CHECK(strict.max_channel_delta == 10);
  const ImageDifference loose = compare_images(b, a, 12);
  CHECK(loose.differing == 0);
  CHECK(loose.max_channel_delta == 10);
}

// Images of different sizes are not compared pixel by pixel: same_size is false.
TEST_CASE("compare_images of different sizes reports same_size false", "[viewer][image]") {
  CHECK_FALSE(compare_images(gradient(37, 20), gradient(20, 37), 255).same_size);
  CHECK_FALSE(compare_images(gradient(37, 20), gradient(37, 21), 255).same_size);
}

}  // namespace
}  // namespace strata::viewer
