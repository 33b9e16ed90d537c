// L2 norm kernels: one row group per row (row_ops.cuh), the row held in registers.
#include "kernels/l2norm/l2norm.h"

#include "kernels/norm/row_ops.cuh"

namespace flame::kernels {
namespace {

int64_t StrideOr(int64_t stride, int dim) { return stride == 0 ? dim : stride; }

bool RowArgOk(const void* p, int64_t stride) {
  return p != nullptr && IsAligned16(p) && stride % kVecElems == 0;
}

__global__ void __launch_bounds__(kMaxRowThreads) L2NormForwardKernel(L2NormForwardParams p, RowLayout l) {
  __shared__ float scratch[32];
  const int tpr = l.threads_per_row;
  const int lane = threadIdx.x % tpr;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * l.rows_per_block + threadIdx.x / tpr;
  const bool active = row < p.rows;
  float x[kRowVecs][kVecElems];
  float sum_sq = 0.0f;
#pragma unroll
  for (int v = 0; v < kRowVecs; ++v) {
    const int c = (v * tpr + lane) * kVecElems;
    if (!active || c >= p.dim) continue;
    LoadBf16x8(p.x + row * p.x_stride + c, x[v]);
#pragma unroll
    for (int i = 0; i < kVecElems; ++i) sum_sq += x[v][i] * x[v][i];
  }
  const float rstd = rsqrtf(RowGroupSum(sum_sq, tpr, scratch) + p.eps);
  if (!active) return;
  if (lane == 0 && p.rstd != nullptr) p.rstd[row] = rstd;
#pragma unroll
  for (int v = 0; v < kRowVecs; ++v) {
    const int c = (v * tpr + lane) * kVecElems;
    if (c >= p.dim) continue;
#pragma unroll
    for (int i = 0; i < kVecElems; ++i) x[v][i] *= rstd;
    StoreBf16x8(p.y + row * p.y_stride + c, x[v]);
  }
}

__global__ void __launch_bounds__(kMaxRowThreads) L2NormBackwardKernel(L2NormBackwardParams p, RowLayout l) {
  __shared__ float scratch[32];
  const int tpr = l.threads_per_row;
  const int lane = threadIdx.x % tpr;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * l.rows_per_block + threadIdx.x / tpr;
  const bool active = row < p.rows;
  float x[kRowVecs][kVecElems], dy[kRowVecs][kVecElems];
  float sum_sq = 0.0f, dot = 0.0f;  // sum x^2 and sum dy * x
#pragma unroll
  for (int v = 0; v < kRowVecs; ++v) {
    const int c = (v * tpr + lane) * kVecElems;
    if (!active || c >= p.dim) continue;
    LoadBf16x8(p.x + row * p.x_stride + c, x[v]);
    LoadBf16x8(p.dy + row * p.dy_stride + c, dy[v]);
#pragma unroll
    for (int i = 0; i < kVecElems; ++i) {
      sum_sq += x[v][i] * x[v][i];
      dot += dy[v][i] * x[v][i];
    }
  }
  sum_sq = RowGroupSum(sum_sq, tpr, scratch);
  dot = RowGroupSum(dot, tpr, scratch);
  if (!active) return;
  const float rstd = rsqrtf(sum_sq + p.eps);
  const float dot_y = dot * rstd;  // sum dy * y
#pragma unroll
  for (int v = 0; v < kRowVecs; ++v) {
    const int c = (v * tpr + lane) * kVecElems;
    if (c >= p.dim) continue;
    float dx[kVecElems];
#pragma unroll
    for (int i = 0; i < kVecElems; ++i) dx[i] = rstd * (dy[v][i] - x[v][i] * rstd * dot_y);
    StoreBf16x8(p.dx + row * p.dx_stride + c, dx);
  }
}

bool DimOk(int64_t rows, int dim) {
  return rows >= 0 && dim > 0 && dim % kVecElems == 0 && dim <= kMaxRowDim;
}

}  // namespace

cudaError_t L2NormForward(const L2NormForwardParams& params, cudaStream_t stream) {
  L2NormForwardParams p = params;
  p.x_stride = StrideOr(p.x_stride, p.dim);
  p.y_stride = StrideOr(p.y_stride, p.dim);
  if (!DimOk(p.rows, p.dim) || !RowArgOk(p.x, p.x_stride) || !RowArgOk(p.y, p.y_stride)) {
    return cudaErrorInvalidValue;
  }
  if (p.rows == 0) return cudaSuccess;
  const RowLayout l = ChooseRowLayout(p.dim);
  const int64_t blocks = (p.rows + l.rows_per_block - 1) / l.rows_per_block;
  L2NormForwardKernel<<<static_cast<unsigned>(blocks), l.threads_per_row * l.rows_per_block, 0,
                        stream>>>(p, l);
  return cudaGetLastError();
}

cudaError_t L2NormBackward(const L2NormBackwardParams& params, cudaStream_t stream) {
  L2NormBackwardParams p = params;
  p.x_stride = StrideOr(p.x_stride, p.dim);
  p.dy_stride = StrideOr(p.dy_stride, p.dim);
  p.dx_stride = StrideOr(p.dx_stride, p.dim);
  if (!DimOk(p.rows, p.dim) || !RowArgOk(p.x, p.x_stride) || !RowArgOk(p.dy, p.dy_stride) ||
      !RowArgOk(p.dx, p.dx_stride)) {
    return cudaErrorInvalidValue;
  }
  if (p.rows == 0) return cudaSuccess;
  const RowLayout l = ChooseRowLayout(p.dim);
  const int64_t blocks = (p.rows + l.rows_per_block - 1) / l.rows_per_block;
  L2NormBackwardKernel<<<static_cast<unsigned>(blocks), l.threads_per_row * l.rows_per_block, 0,
                         stream>>>(p, l);
  return cudaGetLastError();
}

}  // namespace flame::kernels
