// SwiGLU kernels: a grid-stride loop over 16-byte vectors of the (R, D) tensors.
#include "kernels/activations/swiglu.h"

#include "kernels/norm/row_ops.cuh"

namespace flame::kernels {
namespace {

constexpr int kThreads = 256;

int64_t StrideOr(int64_t stride, int64_t dim) { return stride == 0 ? dim : stride; }

bool ArgOk(const void* p, int64_t stride) {
  return p != nullptr && IsAligned16(p) && stride % kVecElems == 0;
}

__global__ void __launch_bounds__(kThreads) SwiGluForwardKernel(SwiGluForwardParams p) {
  const int64_t vecs_per_row = p.dim / kVecElems;
  const int64_t total = p.rows * vecs_per_row;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = i / vecs_per_row;
    const int64_t c = (i - row * vecs_per_row) * kVecElems;
    float g[kVecElems], u[kVecElems];
    LoadBf16x8(p.gate + row * p.gate_stride + c, g);
    LoadBf16x8(p.up + row * p.up_stride + c, u);
#pragma unroll
    for (int k = 0; k < kVecElems; ++k) u[k] *= g[k] * Sigmoid(g[k]);
    StoreBf16x8(p.y + row * p.y_stride + c, u);
  }
}

__global__ void __launch_bounds__(kThreads) SwiGluBackwardKernel(SwiGluBackwardParams p) {
  const int64_t vecs_per_row = p.dim / kVecElems;
  const int64_t total = p.rows * vecs_per_row;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = i / vecs_per_row;
    const int64_t c = (i - row * vecs_per_row) * kVecElems;
    float g[kVecElems], u[kVecElems], dy[kVecElems], dg[kVecElems], du[kVecElems], y[kVecElems];
    LoadBf16x8(p.gate + row * p.gate_stride + c, g);
    LoadBf16x8(p.up + row * p.up_stride + c, u);
    LoadBf16x8(p.dy + row * p.dy_stride + c, dy);
#pragma unroll
    for (int k = 0; k < kVecElems; ++k) {
      const float s = Sigmoid(g[k]);
      const float swish = g[k] * s;
      dg[k] = dy[k] * u[k] * s * (1.0f + g[k] * (1.0f - s));
      du[k] = dy[k] * swish;
      y[k] = swish * u[k];
    }
    StoreBf16x8(p.dgate + row * p.dgate_stride + c, dg);
    StoreBf16x8(p.dup + row * p.dup_stride + c, du);
    if (p.y != nullptr) StoreBf16x8(p.y + row * p.y_stride + c, y);
  }
}

// Enough blocks to fill the GPU several times over; the loop covers the rest.
unsigned GridFor(int64_t vectors) {
  const int64_t blocks = (vectors + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
}

}  // namespace

cudaError_t SwiGluForward(const SwiGluForwardParams& params, cudaStream_t stream) {
  SwiGluForwardParams p = params;
  p.gate_stride = StrideOr(p.gate_stride, p.dim);
  p.up_stride = StrideOr(p.up_stride, p.dim);
  p.y_stride = StrideOr(p.y_stride, p.dim);
  if (p.rows < 0 || p.dim <= 0 || p.dim % kVecElems != 0 || !ArgOk(p.gate, p.gate_stride) ||
      !ArgOk(p.up, p.up_stride) || !ArgOk(p.y, p.y_stride)) {
    return cudaErrorInvalidValue;
  }
  if (p.rows == 0) return cudaSuccess;
  SwiGluForwardKernel<<<GridFor(p.rows * p.dim / kVecElems), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t SwiGluBackward(const SwiGluBackwardParams& params, cudaStream_t stream) {
  SwiGluBackwardParams p = params;
  p.gate_stride = StrideOr(p.gate_stride, p.dim);
  p.up_stride = StrideOr(p.up_stride, p.dim);
  p.dy_stride = StrideOr(p.dy_stride, p.dim);
  p.dgate_stride = StrideOr(p.dgate_stride, p.dim);
  p.dup_stride = StrideOr(p.dup_stride, p.dim);
  p.y_stride = StrideOr(p.y_stride, p.dim);
  if (p.rows < 0 || p.dim <= 0 || p.dim % kVecElems != 0 || !ArgOk(p.gate, p.gate_stride) ||
      !ArgOk(p.up, p.up_stride) || !ArgOk(p.dy, p.dy_stride) ||
      !ArgOk(p.dgate, p.dgate_stride) || !ArgOk(p.dup, p.dup_stride) ||
      (p.y != nullptr && !ArgOk(p.y, p.y_stride))) {
    return cudaErrorInvalidValue;
  }
  if (p.rows == 0) return cudaSuccess;
  SwiGluBackwardKernel<<<GridFor(p.rows * p.dim / kVecElems), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace flame::kernels
