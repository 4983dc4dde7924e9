#pragma once
// The training data: byte-level tokens of a text file (scenarios/data/), cut into windows of
// seq_len + 1 bytes (inputs and their next-byte targets) and visited in a shuffled order that
// depends only on the seed. The i-th sequence of a run is the same whatever the plan: step k of
// a run with global batch G reads sequences k*G .. k*G + G - 1, and DP replica d of D reads its
// contiguous G/D of them (Megatron-LM's data-parallel split), micro-batch by micro-batch. So the
// loader's whole state is the count of sequences consumed, which checkpoints store.

#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace strata {

class TextDataset {
 public:
  // Reads `path` whole; throws InputError (naming `flag`) when it is missing or shorter than two
  // windows.
  TextDataset(const std::string& path, int64_t seq_len, uint64_t seed, const std::string& flag);

  int64_t windows() const { return windows_; }
  int64_t seq_len() const { return seq_len_; }
  const std::string& path() const { return path_; }

  // Sequence `index` of the run (any non-negative index; epochs reshuffle): its seq_len input
  // tokens and the seq_len targets that follow each.
  void sequence(int64_t index, std::span<int32_t> inputs, std::span<int32_t> targets) const;

 private:
  // The window of sequence `index`: its epoch's order is a Fisher-Yates shuffle seeded by
  // (seed, epoch), cached for the epoch last asked for. Thread-safe: ranks share one dataset.
  int64_t window(int64_t index) const;

  std::string path_;
  std::vector<uint8_t> bytes_;
  int64_t seq_len_;
  uint64_t seed_;
  int64_t windows_;
  mutable std::mutex mutex_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> order_;
};

// The index in the run of the first sequence of one micro-batch of a data-parallel replica; the
// micro-batch's b-th sequence is that index + b.
int64_t micro_batch_first_sequence(int64_t first_sequence_of_step, int64_t global_batch, int64_t dp,
                                   int64_t dp_rank, int64_t micro_batch_size, int64_t micro_batch);

// The sequences a data-parallel replica reads for one micro-batch of one step, as (B*T) tokens.
struct MicroBatchTokens {
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
};
MicroBatchTokens micro_batch_tokens(const TextDataset& data, int64_t first_sequence_of_step,
                                    int64_t global_batch, int64_t dp, int64_t dp_rank,
                                    int64_t micro_batch_size, int64_t micro_batch);

// splitmix64 (Steele et al. 2014): the counter-based generator behind the data order and the
// weight initialization, so a value depends only on (seed, counter), never on call order.
uint64_t splitmix64(uint64_t x);

}  // namespace strata
