// A kernel planted for scripts/ptxas-check's own test: 64 KiB of static shared memory, over the
// 48 KiB a kernel may declare statically (larger needs dynamic shared memory and an opt-in).
__global__ void static_smem(float* out) {
  __shared__ float tile[16384];
  tile[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = tile[(threadIdx.x + 1) % blockDim.x];
}
