// RMSNorm kernels: one row group (ChooseRowLayout) per row, the row held in registers, so h is
// read once and y written once. See rms_norm.h for the math.
#include "kernels/norm/rms_norm.h"

#include "kernels/norm/row_ops.cuh"

namespace flame::kernels {
namespace {

int64_t StrideOr(int64_t stride, int dim) { return stride == 0 ? dim : stride; }

bool RowArgOk(const void* p, int64_t stride) { return IsAligned16(p) && stride % kVecElems == 0; }

__global__ void __launch_bounds__(kMaxRowThreads) RmsNormForwardKernel(RmsNormForwardParams p, RowLayout l) {
  __shared__ float scratch[32];
  const int tpr = l.threads_per_row;
  const int lane = threadIdx.x % tpr;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * l.rows_per_block + threadIdx.x / tpr;
  const bool active = row < p.rows;

  float h[kRowVecs][kVecElems];
  float sum_sq = 0.0f;
#pragma unroll
  for (int v = 0; v < kRowVecs; ++v) {
    const int c = (v * tpr + lane) * kVecElems;
    if (active && c < p.dim) {
      LoadBf16x8(p.x + row * p.x_stride + c, h[v]);
      if (p.residual != nullptr) {
        float r[kVecElems];
        LoadBf16x8(p.residual + row * p.residual_stride + c, r);
#pragma unroll
        for (int i = 0; i < kVecElems; ++i) h[v][i] += r[i];
      }
      if (p.residual_out != nullptr) StoreBf16x8(p.residual_out + row * p.residual_out_stride + c, h[v]);
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) sum_sq += h[v][i] * h[v][i];
    }
  }
  sum_sq = RowGroupSum(sum_sq, tpr, scratch);
  const float rstd = rsqrtf(sum_sq / static_cast<float>(p.dim) + p.eps);
  if (!active) return;  // no barrier follows
  if (lane == 0 && p.rstd != nullptr) p.rstd[row] = rstd;

#pragma unroll
  for (int v = 0; v < kRowVecs; ++v) {
    const int c = (v * tpr + lane) * kVecElems;
    if (c >= p.dim) continue;
    float w[kVecElems], g[kVecElems], y[kVecElems];
    if (p.weight != nullptr) {
      LoadBf16x8(p.weight + c, w);
    } else {
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) w[i] = 1.0f;
    }
#pragma unroll
    for (int i = 0; i < kVecElems; ++i) y[i] = h[v][i] * rstd * w[i];
    if (p.gate != nullptr) {
      LoadBf16x8(p.gate + row * p.gate_stride + c, g);
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) y[i] *= g[i] * Sigmoid(g[i]);
    }
    StoreBf16x8(p.y + row * p.y_stride + c, y);
  }
}

// Row groups stride over the rows; each thread keeps the dweight sums of its own columns in
// registers, the block adds its row groups' sums in shared memory and writes one partial row.
// kVecs = 1 (up to D = 4096) halves the registers of kVecs = 2, so more warps hide the latency.
template <int kVecs>
__global__ void __launch_bounds__(kMaxRowThreads) RmsNormBackwardKernel(RmsNormBackwardParams p, RowLayout l) {
  __shared__ float scratch[32];
  __shared__ float red[kMaxRowThreads * kVecs * kVecElems];  // 512 x kVecs x 8 x 4 = 16 or 32 KB
  const int tpr = l.threads_per_row;
  const int lane = threadIdx.x % tpr;
  const int64_t num_groups = static_cast<int64_t>(gridDim.x) * l.rows_per_block;
  const float inv_dim = 1.0f / static_cast<float>(p.dim);

  float w[kVecs][kVecElems], dw[kVecs][kVecElems];
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    const int c = (v * tpr + lane) * kVecElems;
#pragma unroll
    for (int i = 0; i < kVecElems; ++i) w[v][i] = 1.0f, dw[v][i] = 0.0f;
    if (p.weight != nullptr && c < p.dim) LoadBf16x8(p.weight + c, w[v]);
  }

  // Every thread runs the same number of iterations (RowGroupSum may hold a barrier).
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * l.rows_per_block; base < p.rows;
       base += num_groups) {
    const int64_t row = base + threadIdx.x / tpr;
    const bool active = row < p.rows;
    const float rstd = active ? p.rstd[row] : 0.0f;
    float xhat[kVecs][kVecElems], dn[kVecs][kVecElems];
    float dot = 0.0f;  // sum over the row of (dn * w) * xhat
#pragma unroll
    for (int v = 0; v < kVecs; ++v) {
      const int c = (v * tpr + lane) * kVecElems;
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) xhat[v][i] = 0.0f, dn[v][i] = 0.0f;
      if (!active || c >= p.dim) continue;
      LoadBf16x8(p.h + row * p.h_stride + c, xhat[v]);
      LoadBf16x8(p.dy + row * p.dy_stride + c, dn[v]);
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) xhat[v][i] *= rstd;
      if (p.gate != nullptr) {
        // y = n * g * s(g) with n = xhat * w:  dn = dy * g * s,  dg = dy * n * s * (1 + g (1 - s)).
        float g[kVecElems], dg[kVecElems];
        LoadBf16x8(p.gate + row * p.gate_stride + c, g);
#pragma unroll
        for (int i = 0; i < kVecElems; ++i) {
          const float s = Sigmoid(g[i]);
          const float dy = dn[v][i];
          dg[i] = dy * xhat[v][i] * w[v][i] * s * (1.0f + g[i] * (1.0f - s));
          dn[v][i] = dy * g[i] * s;
        }
        StoreBf16x8(p.dgate + row * p.dgate_stride + c, dg);
      }
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) {
        dw[v][i] += dn[v][i] * xhat[v][i];
        dot += dn[v][i] * w[v][i] * xhat[v][i];
      }
    }
    dot = RowGroupSum(dot, tpr, scratch) * inv_dim;
    if (!active) continue;
#pragma unroll
    for (int v = 0; v < kVecs; ++v) {
      const int c = (v * tpr + lane) * kVecElems;
      if (c >= p.dim) continue;
      float dx[kVecElems];
      if (p.dresidual_out != nullptr) {
        LoadBf16x8(p.dresidual_out + row * p.dresidual_out_stride + c, dx);
      } else {
#pragma unroll
        for (int i = 0; i < kVecElems; ++i) dx[i] = 0.0f;
      }
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) {
        dx[i] += rstd * (dn[v][i] * w[v][i] - xhat[v][i] * dot);
      }
      StoreBf16x8(p.dx + row * p.dx_stride + c, dx);
    }
  }

  if (p.weight == nullptr) return;  // uniform over the block
  // rows_per_block x D <= blockDim x kVecs x 8 floats fit in red.
  const int group = threadIdx.x / tpr;
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    const int c = (v * tpr + lane) * kVecElems;
    if (c >= p.dim) continue;
#pragma unroll
    for (int i = 0; i < kVecElems; ++i) red[group * p.dim + c + i] = dw[v][i];
  }
  __syncthreads();
  float* out = p.workspace + static_cast<int64_t>(blockIdx.x) * p.dim;
  for (int col = threadIdx.x; col < p.dim; col += blockDim.x) {
    float sum = 0.0f;
    for (int r = 0; r < l.rows_per_block; ++r) sum += red[r * p.dim + col];
    out[col] = sum;
  }
}

// Blocks of the backward: one per rows_per_block rows, at most kMaxBackwardBlocks (each then
// loops over several row groups); one partial dweight row per block.
constexpr int kMaxBackwardBlocks = 1024;

int BackwardVecs(int dim) { return dim <= kMaxRowThreads * kVecElems ? 1 : 2; }

int BackwardBlocks(int64_t rows, const RowLayout& l) {
  const int64_t needed = (rows + l.rows_per_block - 1) / l.rows_per_block;
  return static_cast<int>(needed < 1 ? 1 : (needed < kMaxBackwardBlocks ? needed : kMaxBackwardBlocks));
}

}  // namespace

cudaError_t RmsNormForward(const RmsNormForwardParams& params, cudaStream_t stream) {
  RmsNormForwardParams p = params;
  if (p.dim <= 0 || p.dim % kVecElems != 0 || p.dim > kMaxRowDim || p.rows < 0) {
    return cudaErrorInvalidValue;
  }
  p.x_stride = StrideOr(p.x_stride, p.dim);
  p.residual_stride = StrideOr(p.residual_stride, p.dim);
  p.gate_stride = StrideOr(p.gate_stride, p.dim);
  p.y_stride = StrideOr(p.y_stride, p.dim);
  p.residual_out_stride = StrideOr(p.residual_out_stride, p.dim);
  if (p.x == nullptr || p.y == nullptr || !RowArgOk(p.x, p.x_stride) ||
      !RowArgOk(p.y, p.y_stride) || !RowArgOk(p.residual, p.residual_stride) ||
      !RowArgOk(p.gate, p.gate_stride) || !RowArgOk(p.residual_out, p.residual_out_stride) ||
      !IsAligned16(p.weight)) {
    return cudaErrorInvalidValue;
  }
  if (p.rows == 0) return cudaSuccess;
  const RowLayout l = ChooseRowLayout(p.dim);
  const int64_t blocks = (p.rows + l.rows_per_block - 1) / l.rows_per_block;
  RmsNormForwardKernel<<<static_cast<unsigned>(blocks), l.threads_per_row * l.rows_per_block, 0,
                         stream>>>(p, l);
  return cudaGetLastError();
}

size_t RmsNormBackwardWorkspaceBytes(int64_t rows, int dim) {
  const RowLayout l = ChooseRowLayout(dim, BackwardVecs(dim));
  return static_cast<size_t>(BackwardBlocks(rows, l)) * dim * sizeof(float);
}

cudaError_t RmsNormBackward(const RmsNormBackwardParams& params, cudaStream_t stream) {
  RmsNormBackwardParams p = params;
  if (p.dim <= 0 || p.dim % kVecElems != 0 || p.dim > kMaxRowDim || p.rows < 0) {
    return cudaErrorInvalidValue;
  }
  p.h_stride = StrideOr(p.h_stride, p.dim);
  p.gate_stride = StrideOr(p.gate_stride, p.dim);
  p.dy_stride = StrideOr(p.dy_stride, p.dim);
  p.dresidual_out_stride = StrideOr(p.dresidual_out_stride, p.dim);
  p.dx_stride = StrideOr(p.dx_stride, p.dim);
  p.dgate_stride = StrideOr(p.dgate_stride, p.dim);
  if (p.h == nullptr || p.dy == nullptr || p.dx == nullptr || p.rstd == nullptr ||
      (p.gate != nullptr && p.dgate == nullptr) ||
      (p.weight != nullptr && (p.dweight == nullptr || p.workspace == nullptr)) ||
      !RowArgOk(p.h, p.h_stride) || !RowArgOk(p.dy, p.dy_stride) || !RowArgOk(p.dx, p.dx_stride) ||
      !RowArgOk(p.gate, p.gate_stride) || !RowArgOk(p.dgate, p.dgate_stride) ||
      !RowArgOk(p.dresidual_out, p.dresidual_out_stride) || !IsAligned16(p.weight) ||
      !IsAligned16(p.workspace)) {
    return cudaErrorInvalidValue;
  }
  const int vecs = BackwardVecs(p.dim);
  const RowLayout l = ChooseRowLayout(p.dim, vecs);
  const int blocks = BackwardBlocks(p.rows, l);
  const int threads = l.threads_per_row * l.rows_per_block;
  if (p.rows > 0) {
    if (vecs == 1) {
      RmsNormBackwardKernel<1><<<blocks, threads, 0, stream>>>(p, l);
    } else {
      RmsNormBackwardKernel<2><<<blocks, threads, 0, stream>>>(p, l);
    }
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  }
  if (p.weight == nullptr) return cudaSuccess;
  if (p.rows == 0) return cudaMemsetAsync(p.dweight, 0, sizeof(float) * p.dim, stream);
  return SumPartialRows(p.workspace, blocks, p.dim, p.dim, p.dweight, stream);
}

}  // namespace flame::kernels
