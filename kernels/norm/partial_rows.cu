// SumPartialRows (row_ops.cuh): the deterministic second stage of the weight-gradient reductions.
#include "kernels/norm/row_ops.cuh"

namespace flame::kernels {
namespace {

constexpr int kCols = 32;    // columns per block: one warp reads 128 contiguous bytes
constexpr int kSlices = 32;  // row slices per block, summed in shared memory

__global__ void __launch_bounds__(kCols* kSlices)
    SumPartialRowsKernel(const float* partial, int64_t slots, int64_t cols, int64_t ld, float* out) {
  __shared__ float sums[kSlices][kCols + 1];  // 32 x 33 x 4 = 4.2 KB, padded against conflicts
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kCols + threadIdx.x;
  float sum = 0.0f;
  if (col < cols) {
    for (int64_t s = threadIdx.y; s < slots; s += kSlices) sum += partial[s * ld + col];
  }
  sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || col >= cols) return;
  float total = 0.0f;
  for (int i = 0; i < kSlices; ++i) total += sums[i][threadIdx.x];
  out[col] = total;
}

}  // namespace

cudaError_t SumPartialRows(const float* partial, int64_t slots, int64_t cols, int64_t ld,
                           float* out, cudaStream_t stream) {
  if (cols <= 0) return cudaSuccess;
  const int64_t blocks = (cols + kCols - 1) / kCols;
  SumPartialRowsKernel<<<static_cast<unsigned>(blocks), dim3(kCols, kSlices), 0, stream>>>(
      partial, slots, cols, ld, out);
  return cudaGetLastError();
}

}  // namespace flame::kernels
