// Internal to the delta-rule families: the GPU run of the chunked kernels, compiled once in
// chunk_delta_rule.cu and shared by both launchers (the gated flag is a runtime value, so the
// gated op adds no kernel instantiations).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/delta_rule/chunk_delta_params.h"

namespace flame::kernels::delta_chunk {

size_t DeviceWorkspaceBytes(const ChunkDeltaParams& params, bool backward);
size_t DeviceStatesBytes(const ChunkDeltaParams& params);
cudaError_t DeviceForward(const ChunkDeltaParams& params, bool gated, cudaStream_t stream);
cudaError_t DeviceBackward(const ChunkDeltaParams& params, bool gated, cudaStream_t stream);

}  // namespace flame::kernels::delta_chunk
