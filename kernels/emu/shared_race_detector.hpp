#pragma once
// The shared-memory race detector of the CPU emulation (STRATA_EMU_RACECHECK=1): it finds two
// threads of a block that write the same byte of shared memory with no barrier between them that
// orders the two, a write-write race whose winner on a GPU depends on timing.
//
// How: the block scheduler runs one thread at a time, from one barrier to the next (a segment).
// Before a segment the detector copies the block's shared memory; after it, the bytes that differ
// are the thread's writes. Each byte remembers its last writer and the barrier clock of that
// write; a write by another thread is ordered after it only when a __syncthreads, or a warp
// collective (__syncwarp, a shuffle, a wmma operation) naming both threads' lanes, completed in
// between.
//
// What it cannot see: a write of the value the byte already held; reads, so read-write races
// (those show up as results that differ between STRATA_EMU_ORDER=forward, reverse and random);
// global memory; races between blocks.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace strata::emu {

// Two threads (linear indices in the block) that wrote the byte at offset.
struct SharedRace {
  int first_thread;
  int second_thread;
  size_t offset;
};

class SharedRaceDetector {
 public:
  // A new block of threads threads: no writes, no barriers.
  void start_block(int threads);
  // Copies shared[0, bytes) before a thread's segment.
  void before_segment(const std::byte* shared, size_t bytes);
  // The first unordered write of thread's segment, if any. bytes may have grown since
  // before_segment (static shared memory allocated in the segment, filled with poison).
  std::optional<SharedRace> after_segment(int thread, const std::byte* shared, size_t bytes,
                                          std::byte poison);
  // A __syncthreads completed; a warp collective of warp's lanes in mask completed.
  void block_synchronized();
  void warp_synchronized(int warp, unsigned mask);

 private:
  struct LastWrite {
    int thread = -1;
    uint32_t clock = 0;
  };
  // Whether a barrier completed after clock that orders thread a before thread b.
  bool ordered(int a, int b, uint32_t clock) const;

  std::vector<std::byte> snapshot_;
  std::vector<LastWrite> last_write_;  // per byte of shared memory
  uint32_t clock_ = 1;                 // advanced by every completed barrier
  uint32_t last_block_barrier_ = 0;
  // Per warp, the clock at which lanes i and j last completed a collective together.
  std::vector<std::array<uint32_t, 32 * 32>> warp_pair_clock_;
};

}  // namespace strata::emu
