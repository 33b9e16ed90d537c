// chunk_delta_rule launchers, and the GPU run of the delta-rule kernels that
// chunk_gated_delta_rule shares (chunk_delta_launch.h).
#include "kernels/delta_rule/chunk_delta.cuh"
#include "kernels/delta_rule/chunk_delta_launch.h"
#include "kernels/delta_rule/chunk_delta_rule.h"

namespace flame::kernels {
namespace delta_chunk {

size_t DeviceWorkspaceBytes(const ChunkDeltaParams& params, bool backward) {
  return WorkspaceBytes(params, backward);
}

size_t DeviceStatesBytes(const ChunkDeltaParams& params) { return StatesBytes(params); }

cudaError_t DeviceForward(const ChunkDeltaParams& params, bool gated, cudaStream_t stream) {
  return RunForward(params, gated, stream);
}

cudaError_t DeviceBackward(const ChunkDeltaParams& params, bool gated, cudaStream_t stream) {
  return RunBackward(params, gated, stream);
}

}  // namespace delta_chunk

size_t DeltaRuleChunkWorkspaceBytes(const ChunkDeltaParams& params, bool backward) {
  return delta_chunk::DeviceWorkspaceBytes(params, backward);
}

size_t DeltaRuleChunkStatesBytes(const ChunkDeltaParams& params) {
  return delta_chunk::DeviceStatesBytes(params);
}

cudaError_t DeltaRuleChunkForward(const ChunkDeltaParams& params, cudaStream_t stream) {
  return delta_chunk::DeviceForward(params, /*gated=*/false, stream);
}

cudaError_t DeltaRuleChunkBackward(const ChunkDeltaParams& params, cudaStream_t stream) {
  return delta_chunk::DeviceBackward(params, /*gated=*/false, stream);
}

}  // namespace flame::kernels
