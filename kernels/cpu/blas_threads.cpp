#include <cblas.h>

#include "kernels/cpu/kernels.hpp"

namespace strata::cpu {

void set_matmul_threads(int threads) { openblas_set_num_threads(threads); }

}  // namespace strata::cpu
