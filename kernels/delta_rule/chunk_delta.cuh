// GPU execution of the chunked delta-rule steps (chunk_delta_pipeline.h): one kernel per step,
// one thread per unit. Included only by kernels/delta_rule/chunk_delta_rule.cu, which serves both
// ops through chunk_delta_launch.h; StepKernel is instantiated once per step type (16 small
// kernels; the gated flag is a runtime value).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/delta_rule/chunk_delta_pipeline.h"

namespace flame::kernels::delta_chunk {

constexpr int kStepThreads = 128;

template <typename Step>
__global__ void __launch_bounds__(kStepThreads) StepKernel(Step step) {
  const int64_t unit = int64_t{blockIdx.x} * kStepThreads + threadIdx.x;
  if (unit < step.Units()) step(unit);
}

struct DeviceExec {
  cudaStream_t stream;

  template <typename Step>
  cudaError_t operator()(const Step& step) const {
    const int64_t units = step.Units();
    if (units == 0) return cudaSuccess;
    const int64_t blocks = (units + kStepThreads - 1) / kStepThreads;
    StepKernel<Step><<<static_cast<unsigned>(blocks), kStepThreads, 0, stream>>>(step);
    return cudaGetLastError();
  }
};

}  // namespace flame::kernels::delta_chunk
