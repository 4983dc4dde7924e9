// The shared-memory race detector (shared_race_detector.hpp).

#include "kernels/emu/shared_race_detector.hpp"

#include <algorithm>
#include <cstring>

namespace strata::emu {

void SharedRaceDetector::start_block(int threads) {
  last_write_.assign(last_write_.size(), LastWrite{});
  clock_ = 1;
  last_block_barrier_ = 0;
  warp_pair_clock_.assign(static_cast<size_t>((threads + 31) / 32), {});
}

void SharedRaceDetector::before_segment(const std::byte* shared, size_t bytes) {
  snapshot_.assign(shared, shared + bytes);
}

std::optional<SharedRace> SharedRaceDetector::after_segment(int thread, const std::byte* shared,
                                                            size_t bytes, std::byte poison) {
  if (last_write_.size() < bytes) last_write_.resize(bytes);
  std::optional<SharedRace> race;
  // Chunks first: most of shared memory is untouched by one segment.
  constexpr size_t kChunk = 64;
  for (size_t chunk = 0; chunk < bytes; chunk += kChunk) {
    const size_t end = std::min(bytes, chunk + kChunk);
    if (end <= snapshot_.size() &&
        std::memcmp(shared + chunk, snapshot_.data() + chunk, end - chunk) == 0) {
      continue;
    }
    for (size_t offset = chunk; offset < end; ++offset) {
      const std::byte before = offset < snapshot_.size() ? snapshot_[offset] : poison;
      if (shared[offset] == before) continue;
      LastWrite& last = last_write_[offset];
      if (last.thread >= 0 && last.thread != thread && !ordered(last.thread, thread, last.clock) &&
          !race) {
        race = SharedRace{last.thread, thread, offset};
      }
      last = {thread, clock_};
    }
  }
  return race;
}

bool SharedRaceDetector::ordered(int a, int b, uint32_t clock) const {
  if (last_block_barrier_ > clock) return true;
  if (a / 32 != b / 32) return false;
  const auto& pairs = warp_pair_clock_[static_cast<size_t>(a / 32)];
  return pairs[static_cast<size_t>(a % 32 * 32 + b % 32)] > clock;
}

void SharedRaceDetector::block_synchronized() { last_block_barrier_ = ++clock_; }

void SharedRaceDetector::warp_synchronized(int warp, unsigned mask) {
  const uint32_t now = ++clock_;
  auto& pairs = warp_pair_clock_[static_cast<size_t>(warp)];
  for (int i = 0; i < 32; ++i) {
    if ((mask >> i & 1u) == 0) continue;
    for (int j = 0; j < 32; ++j) {
      if ((mask >> j & 1u) != 0) pairs[static_cast<size_t>(i * 32 + j)] = now;
    }
  }
}

}  // namespace strata::emu
