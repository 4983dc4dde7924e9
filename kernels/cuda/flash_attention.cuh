#pragma once
// What the passes of the tiled causal attention (path 2 of kernels/cuda/kernels.hpp; Dao 2023,
// FlashAttention-2's loop order) share: the tiling, the loader of a tile into shared memory, the
// products of a warp's strip with a tile (tensor cores through nvcuda::wmma for bf16, fp32 FMAs
// for float), the online softmax of the forward, and the head-size dispatch.
//
// Tiling. A block of 4 warps owns 64 rows of one (batch, head): 64 queries in the forward and the
// dQ pass, 64 keys in the dK/dV pass. Warp w owns rows 16w..16w+15 of them, its strip, and every
// product it computes is its strip against a whole 64-row tile:
//   scores:       (16,D) x (64,D)^T -> (16,64) fp32, stored to the warp's strip of scores
//   accumulation: (16,64) x (64,D)  -> (16,D) fp32, kept in registers across the tiles
// So warps share only the tiles loaded from global memory (__syncthreads around each load);
// everything else a warp writes in shared memory is its own strip (__syncwarp between phases).
// Tiles in shared memory are padded by 16 bytes a row (bank conflicts), and rows past T are
// zeros, so that every product reads defined values; the causal mask and the bound T are applied
// to the scores, never by skipping rows.

#include <cuda_bf16.h>
#include <mma.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/common.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
// cp.async and bf16 wmma are sm_80 and later.
#error "flash attention needs sm_80 or newer: set CMAKE_CUDA_ARCHITECTURES to 80 or above"
#endif

namespace strata::cuda::flash {

using bf16 = __nv_bfloat16;

constexpr int kTile = 64;                      // Br = Bc: rows of a query or key tile
constexpr int kStripRows = 16;                 // rows of a warp's strip (one wmma tile)
constexpr int kWarps = kTile / kStripRows;     // 4
constexpr int kThreads = kWarps * kWarpSize;   // 128
constexpr int kScoreLd = kTile + 4;            // row stride of fp32 score strips (floats)
constexpr float kLog2e = 1.4426950408889634f;  // log2(e)
constexpr float kLn2 = 0.6931471805599453f;    // ln(2)

// 16 bytes of padding per row, in elements of T: 8 bf16 or 4 floats. It keeps rows 16-byte
// aligned (vector stores, wmma's ldm) and moves consecutive rows to other banks.
template <typename T>
constexpr int kPad = 16 / static_cast<int>(sizeof(T));
// Row stride of a (64, D) tile of Q, K, V or dO in shared memory.
template <typename T, int D>
constexpr int kTileLd = D + kPad<T>;
// Row stride of a (16, 64) strip of probabilities (or dS) stored as T: the A operand of the
// accumulation products.
template <typename T>
constexpr int kProbLd = kTile + kPad<T>;

// Whether a warp keeps its strip of Q (and dO) in registers (bf16: wmma fragments, loaded once
// per block) or reads it from shared memory at every tile (float).
template <typename T>
constexpr bool kOperandsInRegisters = std::is_same_v<T, bf16>;

// Shared-memory regions start at multiples of 128 bytes (wmma needs 32).
constexpr int aligned_bytes(int bytes) { return (bytes + 127) / 128 * 128; }
template <typename T, int D>
constexpr int kTileBytes = aligned_bytes(static_cast<int>(sizeof(T)) * kTile * kTileLd<T, D>);
constexpr int kScoreBytes = aligned_bytes(kTile * kScoreLd * 4);
template <typename T>
constexpr int kProbBytes = aligned_bytes(static_cast<int>(sizeof(T)) * kTile * kProbLd<T>);
constexpr int kRowValueBytes = aligned_bytes(kTile * 4);
// The most dynamic shared memory a block may have on sm_90 (CUDA C++ Programming Guide, table
// of technical specifications per compute capability: 227 KB).
constexpr int kMaxSharedBytes = 227 * 1024;

// ---- Loading tiles ------------------------------------------------------------------------

// tile (64, D) in shared memory (row stride kTileLd) = rows [0, rows_valid) of g (row stride
// g_ld elements), zeros past them. Every thread of the block calls it. The rows are copied
// with cp.async (16 bytes a copy, global to shared memory without registers, all in flight at
// once), so the tile is ready only after wait_for_tiles() and then a __syncthreads(); the zeros
// are plain stores, ordered by the same __syncthreads(). g must be 16-byte aligned and
// g_ld * sizeof(T) a multiple of 16 (true for qkv, out and dout when D is a multiple of 8; the
// host checks the base pointers).
template <typename T, int D>
__device__ __forceinline__ void load_tile(T* tile, const T* g, int64_t g_ld, int rows_valid) {
  constexpr int kVector = Packed128<T>::kSize;
  constexpr int kChunksPerRow = D / kVector;
  constexpr int kChunksPerThread = kTile * kChunksPerRow / kThreads;
  static_assert(D % kVector == 0 && kTile * kChunksPerRow % kThreads == 0);
  // Not unrolled: the copies are asynchronous, so a rolled loop issues them as fast, and an
  // unrolled one lets the compiler hoist every chunk's addresses out of the caller's tile loop
  // into registers (spills, seen in ptxas -v).
#pragma unroll 1
  for (int k = 0; k < kChunksPerThread; ++k) {
    const int chunk = static_cast<int>(threadIdx.x) + k * kThreads;
    const int row = chunk / kChunksPerRow;
    const int col = chunk % kChunksPerRow * kVector;
    T* to = tile + row * kTileLd<T, D> + col;
    if (row < rows_valid) {
      copy_async16(to, g + row * g_ld + col);
    } else {
      *reinterpret_cast<uint4*>(to) = make_uint4(0u, 0u, 0u, 0u);
    }
  }
}

// Waits until this thread's cp.async copies (load_tile) have landed; a __syncthreads() after it
// makes every thread's copies visible to the block.
__device__ __forceinline__ void wait_for_tiles() { wait_async_copies(); }

// values (64) in shared memory = scale * g[r] for rows r < rows_valid, 0 past them (per-query
// lse and D of the backward). Threads 0..63 store.
__device__ __forceinline__ void load_row_values(float* values, const float* g, int rows_valid,
                                                float scale) {
  const int r = static_cast<int>(threadIdx.x);
  if (r < kTile) values[r] = r < rows_valid ? scale * g[r] : 0.0f;
}

// ---- Products of a strip with a tile: float, fp32 FMAs ------------------------------------
// Lane (rg, cg) = (lane / 8, lane % 8) owns rows 4rg..4rg+3 of the strip and the columns
// cg, cg + 8, cg + 16, ... of the result: in each step the 8 lanes of a row group read 8
// different rows (scores) or 8 consecutive columns (accumulation) of the tile, and the 4 row
// groups read the same addresses (broadcast). Sums run over d (or j) in order: reproducible.

// out (16,64) fp32, row stride kScoreLd = a (16,D) @ b (64,D)^T; a and b with row stride
// kTileLd.
template <int D>
__device__ __forceinline__ void strip_scores(float* out, const float* a, const float* b) {
  constexpr int kLd = kTileLd<float, D>;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int rg = lane / 8;
  const int cg = lane % 8;
  float acc[4][8] = {};
#pragma unroll 4
  for (int d = 0; d < D; ++d) {
    float av[4];
    float bv[8];
#pragma unroll
    for (int rr = 0; rr < 4; ++rr) av[rr] = a[(4 * rg + rr) * kLd + d];
#pragma unroll
    for (int c = 0; c < 8; ++c) bv[c] = b[(cg + 8 * c) * kLd + d];
#pragma unroll
    for (int rr = 0; rr < 4; ++rr) {
#pragma unroll
      for (int c = 0; c < 8; ++c) acc[rr][c] = fmaf(av[rr], bv[c], acc[rr][c]);
    }
  }
#pragma unroll
  for (int rr = 0; rr < 4; ++rr) {
#pragma unroll
    for (int c = 0; c < 8; ++c) out[(4 * rg + rr) * kScoreLd + cg + 8 * c] = acc[rr][c];
  }
}

// A warp's (16,D) strip of Q or dO, the A operand of every tile's scores. Float reads it from
// shared memory at each tile.
template <typename T, int D>
struct StripOperand;

template <int D>
struct StripOperand<float, D> {
  const float* strip;
  __device__ __forceinline__ void load(const float* s) { strip = s; }
};

template <int D>
__device__ __forceinline__ void strip_scores(float* out, const StripOperand<float, D>& a,
                                             const float* b) {
  strip_scores<D>(out, a.strip, b);
}

// A warp's (16,D) fp32 accumulator: acc (16,D) += a (16,64) @ b (64,D), rescaled by rows.
template <typename T, int D>
struct StripAccumulator;

template <int D>
struct StripAccumulator<float, D> {
  static constexpr int kCols = D / 8;  // columns per lane: cg, cg + 8, ...
  float acc[4][kCols];

  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int rr = 0; rr < 4; ++rr) {
#pragma unroll
      for (int c = 0; c < kCols; ++c) acc[rr][c] = 0.0f;
    }
  }

  // The rows each element lies in are known (4rg + rr): nothing to find out.
  __device__ __forceinline__ void map_rows(float* /*staging*/) {}

  // acc += a (16,64), row stride kProbLd, @ b (64,D), row stride kTileLd.
  __device__ __forceinline__ void add_product(const float* a, const float* b) {
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
    const int rg = lane / 8;
    const int cg = lane % 8;
#pragma unroll 2
    for (int j = 0; j < kTile; ++j) {
      float av[4];
#pragma unroll
      for (int rr = 0; rr < 4; ++rr) av[rr] = a[(4 * rg + rr) * kProbLd<float> + j];
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const float bv = b[j * kTileLd<float, D> + cg + 8 * c];
#pragma unroll
        for (int rr = 0; rr < 4; ++rr) acc[rr][c] = fmaf(av[rr], bv, acc[rr][c]);
      }
    }
  }

  // Row r of acc *= factors[r] (16 values in shared memory).
  __device__ __forceinline__ void scale_rows(const float* factors) {
    const int rg = static_cast<int>(threadIdx.x) % kWarpSize / 8;
#pragma unroll
    for (int rr = 0; rr < 4; ++rr) {
      const float f = factors[4 * rg + rr];
#pragma unroll
      for (int c = 0; c < kCols; ++c) acc[rr][c] *= f;
    }
  }

  // Rows [0, rows_valid) of acc to g (row stride g_ld), each lane its own elements.
  __device__ __forceinline__ void store(float* /*staging*/, float* /*strip*/, float* g,
                                        int64_t g_ld, int rows_valid) const {
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
    const int rg = lane / 8;
    const int cg = lane % 8;
#pragma unroll
    for (int rr = 0; rr < 4; ++rr) {
      const int r = 4 * rg + rr;
      if (r >= rows_valid) continue;
#pragma unroll
      for (int c = 0; c < kCols; ++c) g[r * g_ld + cg + 8 * c] = acc[rr][c];
    }
  }
};

// ---- Products of a strip with a tile: bf16, tensor cores through wmma ---------------------
// 16x16x16 bf16 fragments with fp32 accumulators. wmma leaves how a fragment's elements lie in
// the lanes unspecified, so lanes touch them only through load/store_matrix_sync, except for
// StripAccumulator's rescaling, which maps them first (map_rows).

namespace wmma = nvcuda::wmma;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// load_matrix_sync of a bf16 fragment from shared memory. nvcuda::wmma's bf16 loads reach PTX
// with generic addresses (wmma.load...bf16 without a state space: 64-bit addresses, and loads
// that must work for any space), where the compiler infers .shared for the float ones; these
// issue the same PTX instruction with .shared and a 32-bit shared address, filling the four
// 32-bit registers of the fragment exactly as the library's builtin does (PTX ISA, "Matrix
// Fragments for WMMA": a bf16 A or B fragment of m16n16k16 is four .b32 registers). The CPU
// emulation has no PTX: there they are the library's loads.
#if defined(STRATA_CUDA_EMU)
#define STRATA_WMMA_LOAD_SHARED(FragType, layout_and_shape)                                  \
  __device__ __forceinline__ void load_shared(FragType& frag, const bf16* p, unsigned ldm) { \
    __cvta_generic_to_shared(p); /* fails unless p is in shared memory, as .shared needs */  \
    wmma::load_matrix_sync(frag, p, ldm);                                                    \
  }
#else
#define STRATA_WMMA_LOAD_SHARED(FragType, layout_and_shape)                                  \
  __device__ __forceinline__ void load_shared(FragType& frag, const bf16* p, unsigned ldm) { \
    unsigned* r = reinterpret_cast<unsigned*>(frag.x);                                       \
    const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(p));             \
    asm volatile("wmma.load." layout_and_shape ".shared.bf16 {%0, %1, %2, %3}, [%4], %5;"    \
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])                            \
                 : "r"(address), "r"(ldm)                                                    \
                 : "memory");                                                                \
  }
#endif
STRATA_WMMA_LOAD_SHARED(FragA, "a.sync.aligned.row.m16n16k16")
STRATA_WMMA_LOAD_SHARED(FragBRow, "b.sync.aligned.row.m16n16k16")
STRATA_WMMA_LOAD_SHARED(FragBCol, "b.sync.aligned.col.m16n16k16")
#undef STRATA_WMMA_LOAD_SHARED

// The scores' (16,64) accumulators to out (row stride kScoreLd).
__device__ __forceinline__ void store_scores(float* out, const FragAcc (&s)[kTile / 16]) {
#pragma unroll
  for (int n = 0; n < kTile / 16; ++n) {
    wmma::store_matrix_sync(out + 16 * n, s[n], kScoreLd, wmma::mem_row_major);
  }
}

// out (16,64) fp32, row stride kScoreLd = a (16,D) @ b (64,D)^T; a and b in shared memory with
// row stride kTileLd. b^T is read as a col_major B operand: B(d, j) = b[j][d] at b + j*ld + d.
template <int D>
__device__ __forceinline__ void strip_scores(float* out, const bf16* a, const bf16* b) {
  constexpr int kLd = kTileLd<bf16, D>;
  FragAcc s[kTile / 16];
#pragma unroll
  for (int n = 0; n < kTile / 16; ++n) wmma::fill_fragment(s[n], 0.0f);
#pragma unroll
  for (int k = 0; k < D / 16; ++k) {
    FragA fa;
    load_shared(fa, a + 16 * k, kLd);
#pragma unroll
    for (int n = 0; n < kTile / 16; ++n) {
      FragBCol fb;
      load_shared(fb, b + 16 * n * kLd + 16 * k, kLd);
      wmma::mma_sync(s[n], fa, fb, s[n]);
    }
  }
  store_scores(out, s);
}

// bf16 keeps the strip in registers: D/16 A fragments, loaded once.
template <int D>
struct StripOperand<bf16, D> {
  FragA frag[D / 16];
  // s: the strip in shared memory, row stride kTileLd.
  __device__ __forceinline__ void load(const bf16* s) {
#pragma unroll
    for (int k = 0; k < D / 16; ++k) load_shared(frag[k], s + 16 * k, kTileLd<bf16, D>);
  }
};

// As strip_scores above with a from registers.
template <int D>
__device__ __forceinline__ void strip_scores(float* out, const StripOperand<bf16, D>& a,
                                             const bf16* b) {
  constexpr int kLd = kTileLd<bf16, D>;
  FragAcc s[kTile / 16];
#pragma unroll
  for (int n = 0; n < kTile / 16; ++n) wmma::fill_fragment(s[n], 0.0f);
#pragma unroll
  for (int k = 0; k < D / 16; ++k) {
#pragma unroll
    for (int n = 0; n < kTile / 16; ++n) {
      FragBCol fb;
      load_shared(fb, b + 16 * n * kLd + 16 * k, kLd);
      wmma::mma_sync(s[n], a.frag[k], fb, s[n]);
    }
  }
  store_scores(out, s);
}

template <int D>
struct StripAccumulator<bf16, D> {
  static constexpr int kFrags = D / 16;  // column blocks of 16
  static constexpr int kElements = FragAcc::num_elements;
  FragAcc frag[kFrags];
  int row_of[kElements];  // the strip row of each of this lane's elements (map_rows)

  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int n = 0; n < kFrags; ++n) wmma::fill_fragment(frag[n], 0.0f);
  }

  // Finds the strip row of each element this lane holds, for scale_rows. The element-to-lane
  // mapping of an accumulator fragment is unspecified but fixed for the fragment type, the same
  // whether it was loaded or computed (mma_sync takes and returns such fragments), so loading
  // the 16x16 matrix whose element (r, c) is r reveals it. staging: the warp's own (16, 16) or
  // larger fp32 buffer, row stride kScoreLd; free again when this returns.
  __device__ __forceinline__ void map_rows(float* staging) {
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
    for (int e = lane; e < 16 * 16; e += kWarpSize) {
      staging[e / 16 * kScoreLd + e % 16] = static_cast<float>(e / 16);
    }
    __syncwarp();
    FragAcc rows;
    wmma::load_matrix_sync(rows, staging, kScoreLd, wmma::mem_row_major);
#pragma unroll
    for (int e = 0; e < kElements; ++e) row_of[e] = static_cast<int>(rows.x[e]);
    __syncwarp();
  }

  // acc += a (16,64), row stride kProbLd, @ b (64,D), row stride kTileLd; both row_major.
  __device__ __forceinline__ void add_product(const bf16* a, const bf16* b) {
    constexpr int kLd = kTileLd<bf16, D>;
#pragma unroll
    for (int k = 0; k < kTile / 16; ++k) {
      FragA fa;
      load_shared(fa, a + 16 * k, kProbLd<bf16>);
#pragma unroll
      for (int n = 0; n < kFrags; ++n) {
        FragBRow fb;
        load_shared(fb, b + 16 * k * kLd + 16 * n, kLd);
        wmma::mma_sync(frag[n], fa, fb, frag[n]);
      }
    }
  }

  // Row r of acc *= factors[r] (16 values in shared memory). Needs map_rows first.
  __device__ __forceinline__ void scale_rows(const float* factors) {
#pragma unroll
    for (int e = 0; e < kElements; ++e) {
      const float f = factors[row_of[e]];
#pragma unroll
      for (int n = 0; n < kFrags; ++n) frag[n].x[e] *= f;
    }
  }

  // Rows [0, rows_valid) of acc to g (row stride g_ld) as bf16. Each 16x16 block goes through
  // staging (the warp's fp32 (16,16) buffer, row stride kScoreLd) into strip (the warp's (16,D)
  // bf16 buffer, row stride kTileLd), which is then written with 16-byte stores. Both buffers
  // must be the warp's own.
  __device__ __forceinline__ void store(float* staging, bf16* strip, bf16* g, int64_t g_ld,
                                        int rows_valid) const {
    constexpr int kLd = kTileLd<bf16, D>;
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
    const int r = lane / 2;
    const int c0 = lane % 2 * 8;
#pragma unroll
    for (int n = 0; n < kFrags; ++n) {
      wmma::store_matrix_sync(staging, frag[n], kScoreLd, wmma::mem_row_major);
      __syncwarp();
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        strip[r * kLd + 16 * n + c0 + c] = from_float<bf16>(staging[r * kScoreLd + c0 + c]);
      }
      __syncwarp();  // staging is overwritten by the next block
    }
    constexpr int kChunksPerRow = D / 8;
    static_assert(kStripRows * kChunksPerRow % kWarpSize == 0);
#pragma unroll
    for (int k = 0; k < kStripRows * kChunksPerRow / kWarpSize; ++k) {
      const int chunk = lane + k * kWarpSize;
      const int row = chunk / kChunksPerRow;
      const int col = chunk % kChunksPerRow * 8;
      if (row < rows_valid) store128(g + row * g_ld + col, load128(strip + row * kLd + col));
    }
    __syncwarp();  // strip and staging may be reused when this returns
  }
};

// ---- Host side ------------------------------------------------------------------------------

// Calls launch(std::integral_constant<int, HS>{}) for the head sizes with a kernel instance;
// throws std::invalid_argument naming hs for the others.
template <typename Launch>
void dispatch_head_size(int64_t hs, Launch&& launch) {
  switch (hs) {
    case 32:
      launch(std::integral_constant<int, 32>{});
      return;
    case 64:
      launch(std::integral_constant<int, 64>{});
      return;
    case 80:
      launch(std::integral_constant<int, 80>{});
      return;
    case 96:
      launch(std::integral_constant<int, 96>{});
      return;
    case 128:
      launch(std::integral_constant<int, 128>{});
      return;
    default:
      throw std::invalid_argument(
          "flash attention: head size hs = " + std::to_string(hs) +
          " has no kernel instance; supported head sizes are 32, 64, 80, 96 and 128 (path 1, "
          "attention_forward, takes any)");
  }
}

// The sizes the kernels take, checked: the grid is (NH, B, ceil(T/64)), so B and the number of
// tiles must fit gridDim.y and gridDim.z (65535), and 3*NH*HS an int. Throws
// std::invalid_argument naming the size otherwise, or when a pointer is not 16-byte aligned (the
// tiles move with 16-byte loads and stores).
struct GridSizes {
  int b, t, nh, tiles;
};

inline GridSizes checked_grid_sizes(int64_t b, int64_t t, int64_t nh, int64_t hs) {
  constexpr int64_t kMaxGridYz = 65535;
  GridSizes s{};
  s.b = checked_int(b, "flash attention B");
  s.t = checked_int(t, "flash attention T");
  s.nh = checked_int(nh, "flash attention NH");
  checked_int(3 * nh * hs, "flash attention 3*NH*HS");
  s.tiles = static_cast<int>(ceil_div(t, kTile));
  if (b > kMaxGridYz) {
    throw std::invalid_argument("flash attention: B = " + std::to_string(b) +
                                " is over 65535 (gridDim.y): split the batch");
  }
  if (s.tiles > kMaxGridYz) {
    throw std::invalid_argument("flash attention: T = " + std::to_string(t) +
                                " is over 65535 tiles of 64 (gridDim.z)");
  }
  return s;
}

inline void check_aligned(const void* pointer, const char* what) {
  if (!is_aligned16(pointer)) {
    throw std::invalid_argument(std::string("flash attention: ") + what +
                                " is not 16-byte aligned (the tiles move in 16-byte vectors)");
  }
}

// 1/sqrt(HS) and 1/sqrt(HS) * log2(e): the kernels work in base 2 (exp2f).
inline float softmax_scale(int64_t hs) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(hs)));
}
inline float softmax_scale_log2(int64_t hs) {
  return static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(hs)));
}

}  // namespace strata::cuda::flash
