// A kernel planted for scripts/ptxas-check's own test: 1024 threads per block, two blocks per
// multiprocessor, leave each thread 32 registers (65,536 / 2048), fewer than the 64 values it
// keeps live across the loop, so ptxas spills them to local memory.
__global__ void __launch_bounds__(1024, 2) spills(const float* in, float* out, int n) {
  float live[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) live[i] = in[threadIdx.x * 64 + i];
  for (int step = 0; step < n; ++step) {
#pragma unroll
    for (int i = 0; i < 64; ++i) live[i] = live[i] * live[(i + 1) % 64] + live[(i + 7) % 64];
  }
  float sum = 0;
#pragma unroll
  for (int i = 0; i < 64; ++i) sum += live[i];
  out[threadIdx.x] = sum;
}
