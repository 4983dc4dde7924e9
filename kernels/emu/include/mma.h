#pragma once
// nvcuda::wmma for the CPU emulation of CUDA (kernels/emu/README.md): the m16n16k16 fragments
// with bf16 or fp32 elements that kernels/cuda/flash_attention.cuh uses, and their warp-collective
// load, store and product.
//
// A fragment holds 8 of the tile's 256 elements in each of the 32 lanes. CUDA leaves which ones
// unspecified, so the emulation picks a fixed permutation that is not the identity and differs
// between A, B and accumulator fragments: element i of lane l is tile element
// (kStep * (8 l + i) + kOffset) mod 256, row-major (row = e / 16, column = e % 16). Code that
// assumes a layout instead of discovering it (as StripAccumulator::map_rows does) gets wrong
// numbers here. Products accumulate in fp32 with one fmaf per k, in k order.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulation has the m16n16k16 shape only");
  using use = Use;
  using element_type = T;
  static constexpr int num_elements = 8;  // 256 elements of a 16x16 tile over 32 lanes
  T x[num_elements];
};

namespace detail {

constexpr int kTile = 16;
constexpr int kElements = kTile * kTile;
constexpr unsigned kFullWarp = 0xffffffffu;

template <typename Use>
struct Permutation;
template <>
struct Permutation<matrix_a> {
  static constexpr int kStep = 37, kOffset = 11;
};
template <>
struct Permutation<matrix_b> {
  static constexpr int kStep = 53, kOffset = 5;
};
template <>
struct Permutation<accumulator> {
  static constexpr int kStep = 97, kOffset = 13;
};

// The tile element (row * 16 + column) that element i of lane holds (kStep odd: a bijection).
template <typename Use>
constexpr int tile_element(int lane, int i) {
  return (Permutation<Use>::kStep * (lane * 8 + i) + Permutation<Use>::kOffset) % kElements;
}

inline float as_float(float value) { return value; }
inline float as_float(__nv_bfloat16 value) { return __bfloat162float(value); }

// What a lane passes to load_matrix_sync or store_matrix_sync.
template <typename Fragment, typename Pointer>
struct MatrixAccess {
  Fragment* fragment;
  Pointer pointer;
  unsigned ldm;
  bool row_major;
};

// Every lane must pass the same pointer, ldm and layout; the pointer 256-bit aligned and ldm a
// multiple of 16 bytes (CUDA C++ Programming Guide, warp matrix functions).
template <typename Access>
void check_access(Access* const* lanes, const char* what) {
  const Access& first = *lanes[0];
  for (int lane = 1; lane < 32; ++lane) {
    if (lanes[lane]->pointer != first.pointer || lanes[lane]->ldm != first.ldm ||
        lanes[lane]->row_major != first.row_major) {
      strata::emu::detail::fail_in_kernel(std::string(what) + ": lane " + std::to_string(lane) +
                                          " passes another pointer, ldm or layout than lane 0");
    }
  }
  if (reinterpret_cast<uintptr_t>(first.pointer) % 32 != 0) {
    strata::emu::detail::fail_in_kernel(std::string(what) +
                                        ": the pointer is not 256-bit (32-byte) aligned");
  }
  if (first.ldm * sizeof(*first.pointer) % 16 != 0) {
    strata::emu::detail::fail_in_kernel(std::string(what) + ": ldm = " + std::to_string(first.ldm) +
                                        " elements is not a multiple of 16 bytes");
  }
}

// Offset in memory of tile element e.
inline unsigned memory_offset(int e, unsigned ldm, bool row_major) {
  const unsigned row = static_cast<unsigned>(e / kTile);
  const unsigned column = static_cast<unsigned>(e % kTile);
  return row_major ? row * ldm + column : column * ldm + row;
}

template <typename Fragment>
void complete_load(MatrixAccess<Fragment, const typename Fragment::element_type*>* const* lanes) {
  check_access(lanes, "wmma::load_matrix_sync");
  for (int lane = 0; lane < 32; ++lane) {
    const auto& access = *lanes[lane];
    for (int i = 0; i < Fragment::num_elements; ++i) {
      const int e = tile_element<typename Fragment::use>(lane, i);
      access.fragment->x[i] = access.pointer[memory_offset(e, access.ldm, access.row_major)];
    }
  }
}

template <typename Fragment>
void complete_store(MatrixAccess<const Fragment, typename Fragment::element_type*>* const* lanes) {
  check_access(lanes, "wmma::store_matrix_sync");
  for (int lane = 0; lane < 32; ++lane) {
    const auto& access = *lanes[lane];
    for (int i = 0; i < Fragment::num_elements; ++i) {
      const int e = tile_element<typename Fragment::use>(lane, i);
      access.pointer[memory_offset(e, access.ldm, access.row_major)] = access.fragment->x[i];
    }
  }
}

template <typename D, typename A, typename B, typename C>
struct ProductOperands {
  D* d;
  const A* a;
  const B* b;
  const C* c;
};

// The 16x16 tile of fragment f of every lane, as floats.
template <typename Fragment, typename Operands, typename Member>
void gather(Operands* const* lanes, Member member, float (&tile)[kElements]) {
  for (int lane = 0; lane < 32; ++lane) {
    const Fragment& f = *(lanes[lane]->*member);
    for (int i = 0; i < Fragment::num_elements; ++i) {
      tile[tile_element<typename Fragment::use>(lane, i)] = as_float(f.x[i]);
    }
  }
}

// d = a b + c over the warp's fragments (d may be c).
template <typename D, typename A, typename B, typename C>
void complete_product(ProductOperands<D, A, B, C>* const* lanes) {
  using Operands = ProductOperands<D, A, B, C>;
  float a[kElements], b[kElements], c[kElements];
  gather<A>(lanes, &Operands::a, a);
  gather<B>(lanes, &Operands::b, b);
  gather<C>(lanes, &Operands::c, c);
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < D::num_elements; ++i) {
      const int e = tile_element<accumulator>(lane, i);
      const int row = e / kTile;
      const int column = e % kTile;
      float sum = c[e];
      for (int k = 0; k < kTile; ++k) sum = fmaf(a[row * kTile + k], b[k * kTile + column], sum);
      lanes[lane]->d->x[i] = sum;
    }
  }
}

}  // namespace detail

// Every element of f = value; each lane its own (no synchronization).
template <typename Use, int M, int N, int K, typename T, typename Layout>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, const T& value) {
  for (T& element : f.x) element = value;
}

// An A or B fragment from memory (its layout is the fragment's); warp-collective.
template <typename Use, typename T, typename Layout>
requires(!std::is_same_v<Use, accumulator>) void load_matrix_sync(
    fragment<Use, 16, 16, 16, T, Layout>& f, const T* pointer, unsigned ldm) {
  using Fragment = fragment<Use, 16, 16, 16, T, Layout>;
  using Access = detail::MatrixAccess<Fragment, const T*>;
  Access access{&f, pointer, ldm, std::is_same_v<Layout, row_major>};
  strata::emu::detail::typed_warp_collective<Access, &detail::complete_load<Fragment>>(
      "wmma::load_matrix_sync", detail::kFullWarp, access);
}

// An accumulator fragment from memory laid out as layout; warp-collective.
template <typename T>
void load_matrix_sync(fragment<accumulator, 16, 16, 16, T>& f, const T* pointer, unsigned ldm,
                      layout_t layout) {
  using Fragment = fragment<accumulator, 16, 16, 16, T>;
  using Access = detail::MatrixAccess<Fragment, const T*>;
  Access access{&f, pointer, ldm, layout == mem_row_major};
  strata::emu::detail::typed_warp_collective<Access, &detail::complete_load<Fragment>>(
      "wmma::load_matrix_sync", detail::kFullWarp, access);
}

// An accumulator fragment to memory laid out as layout; warp-collective.
template <typename T>
void store_matrix_sync(T* pointer, const fragment<accumulator, 16, 16, 16, T>& f, unsigned ldm,
                       layout_t layout) {
  using Fragment = fragment<accumulator, 16, 16, 16, T>;
  using Access = detail::MatrixAccess<const Fragment, T*>;
  Access access{&f, pointer, ldm, layout == mem_row_major};
  strata::emu::detail::typed_warp_collective<Access, &detail::complete_store<Fragment>>(
      "wmma::store_matrix_sync", detail::kFullWarp, access);
}

// d = a b + c; warp-collective.
template <typename Tc, typename Tab, typename LayoutA, typename LayoutB>
void mma_sync(fragment<accumulator, 16, 16, 16, Tc>& d,
              const fragment<matrix_a, 16, 16, 16, Tab, LayoutA>& a,
              const fragment<matrix_b, 16, 16, 16, Tab, LayoutB>& b,
              const fragment<accumulator, 16, 16, 16, Tc>& c) {
  using D = fragment<accumulator, 16, 16, 16, Tc>;
  using A = fragment<matrix_a, 16, 16, 16, Tab, LayoutA>;
  using B = fragment<matrix_b, 16, 16, 16, Tab, LayoutB>;
  using Operands = detail::ProductOperands<D, A, B, D>;
  Operands operands{&d, &a, &b, &c};
  strata::emu::detail::typed_warp_collective<Operands, &detail::complete_product<D, A, B, D>>(
      "wmma::mma_sync", detail::kFullWarp, operands);
}

}  // namespace nvcuda::wmma
