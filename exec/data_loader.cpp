#include "exec/data_loader.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/error.hpp"

namespace strata {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

TextDataset::TextDataset(const std::string& path, int64_t seq_len, uint64_t seed,
                         const std::string& flag)
    : path_(path), seq_len_(seq_len), seed_(seed) {
  // A regular file of bounded size: a folder, a device (/dev/zero) or a pipe has no end to read
  // to, and the whole text is held in memory.
  constexpr uintmax_t kMaxBytes = uintmax_t{1} << 32;
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error) ||
      std::filesystem::file_size(path, error) > kMaxBytes) {
    throw InputError("command line", flag, "'" + path + "' is not a regular file of at most 4 GiB",
                     "give a text file, e.g. scenarios/data/kjv-genesis-exodus.txt");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw InputError("command line", flag, "cannot read '" + path + "'",
                     "give a text file, e.g. scenarios/data/kjv-genesis-exodus.txt");
  }
  bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  windows_ = (static_cast<int64_t>(bytes_.size()) - 1) / seq_len;
  if (windows_ < 2) {
    throw InputError(path, flag,
                     "holds " + std::to_string(bytes_.size()) +
                         " bytes, fewer than two windows of " + std::to_string(seq_len + 1) +
                         " (seq_len + 1)",
                     "give a longer text or a shorter --seq-len");
  }
}

int64_t TextDataset::window(int64_t index) const {
  const std::lock_guard lock(mutex_);
  const int64_t epoch = index / windows_;
  if (epoch == cached_epoch_) return order_[static_cast<size_t>(index % windows_)];
  order_.resize(static_cast<size_t>(windows_));
  for (int64_t i = 0; i < windows_; ++i) order_[static_cast<size_t>(i)] = i;
  const uint64_t key = splitmix64(seed_ ^ splitmix64(static_cast<uint64_t>(epoch)));
  for (int64_t i = windows_ - 1; i > 0; --i) {
    const uint64_t r = splitmix64(key + static_cast<uint64_t>(i));
    const auto j = static_cast<int64_t>(r % static_cast<uint64_t>(i + 1));
    std::swap(order_[static_cast<size_t>(i)], order_[static_cast<size_t>(j)]);
  }
  cached_epoch_ = epoch;
  return order_[static_cast<size_t>(index % windows_)];
}

void TextDataset::sequence(int64_t index, std::span<int32_t> inputs,
                           std::span<int32_t> targets) const {
  STRATA_ASSERT(index >= 0, "sequence indices count from 0");
  STRATA_ASSERT(static_cast<int64_t>(inputs.size()) == seq_len_ &&
                    static_cast<int64_t>(targets.size()) == seq_len_,
                "a sequence is seq_len tokens");
  const auto start = static_cast<size_t>(window(index) * seq_len_);
  for (size_t i = 0; i < static_cast<size_t>(seq_len_); ++i) {
    inputs[i] = bytes_[start + i];
    targets[i] = bytes_[start + i + 1];
  }
}

int64_t micro_batch_first_sequence(int64_t first_sequence_of_step, int64_t global_batch, int64_t dp,
                                   int64_t dp_rank, int64_t micro_batch_size, int64_t micro_batch) {
  return first_sequence_of_step + dp_rank * (global_batch / dp) + micro_batch * micro_batch_size;
}

MicroBatchTokens micro_batch_tokens(const TextDataset& data, int64_t first_sequence_of_step,
                                    int64_t global_batch, int64_t dp, int64_t dp_rank,
                                    int64_t micro_batch_size, int64_t micro_batch) {
  const int64_t t = data.seq_len();
  const int64_t first = micro_batch_first_sequence(first_sequence_of_step, global_batch, dp,
                                                   dp_rank, micro_batch_size, micro_batch);
  MicroBatchTokens tokens;
  tokens.inputs.resize(static_cast<size_t>(micro_batch_size * t));
  tokens.targets.resize(static_cast<size_t>(micro_batch_size * t));
  for (int64_t b = 0; b < micro_batch_size; ++b) {
    const auto offset = static_cast<size_t>(b * t);
    data.sequence(first + b, std::span(tokens.inputs).subspan(offset, static_cast<size_t>(t)),
                  std::span(tokens.targets).subspan(offset, static_cast<size_t>(t)));
  }
  return tokens;
}

}  // namespace strata
