// Dropout (Srivastava et al. 2014) with a counter-based mask: every element's draw is a hash of
// (stream, row key, column), so a mask needs no generator state and any of its rows can be made
// alone. The hash is SplitMix64 (Steele, Lea and Flood 2014): for a fixed a, dropout_key(a, b) for
// b = 0, 1, 2, ... is SplitMix64's output sequence seeded with a (0x9e3779b97f4a7c15, the golden
// ratio in 64 bits, is its step between states), a generator that passes TestU01's BigCrush.

#include "common/error.hpp"
#include "kernels/cpu/kernels.hpp"

namespace strata::cpu {

uint64_t dropout_key(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9e3779b97f4a7c15ULL * (b + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// mask is (N,C), row_keys (N). The top 53 bits of a draw make a double uniform in [0, 1) exactly
// (2^-53 steps), as std::generate_canonical and NumPy's random() make theirs.
template <typename T>
void dropout_mask(T* mask, uint64_t stream, const uint64_t* row_keys, int64_t n, int64_t c,
                  double rate) {
  STRATA_ASSERT(rate >= 0.0 && rate < 1.0, "a dropout rate is a probability in [0, 1)");
  constexpr double kUnit = 0x1.0p-53;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t row = dropout_key(stream, row_keys[i]);
    for (int64_t j = 0; j < c; ++j) {
      const double u =
          static_cast<double>(dropout_key(row, static_cast<uint64_t>(j)) >> 11) * kUnit;
      mask[i * c + j] = u >= rate ? T(1) : T(0);
    }
  }
}

// out, in and mask are (n).
template <typename T>
void apply_dropout(T* out, const T* in, const T* mask, T dropout_scale, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] * mask[i] * dropout_scale;
}

template void dropout_mask<float>(float*, uint64_t, const uint64_t*, int64_t, int64_t, double);
template void dropout_mask<double>(double*, uint64_t, const uint64_t*, int64_t, int64_t, double);
template void apply_dropout<float>(float*, const float*, const float*, float, int64_t);
template void apply_dropout<double>(double*, const double*, const double*, double, int64_t);

}  // namespace strata::cpu
