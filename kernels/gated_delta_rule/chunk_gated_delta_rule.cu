// chunk_gated_delta_rule launchers: the shared delta-rule steps with the per-head decay gate.
#include "kernels/delta_rule/chunk_delta.cuh"
#include "kernels/gated_delta_rule/chunk_gated_delta_rule.h"

namespace flame::kernels {

size_t GatedDeltaRuleChunkWorkspaceBytes(const ChunkDeltaParams& params, bool backward) {
  return delta_chunk::WorkspaceBytes(params, backward);
}

cudaError_t GatedDeltaRuleChunkForward(const ChunkDeltaParams& params, cudaStream_t stream) {
  delta_chunk::DeviceExec exec{stream};
  return delta_chunk::RunForward(params, /*gated=*/true, exec);
}

cudaError_t GatedDeltaRuleChunkBackward(const ChunkDeltaParams& params, cudaStream_t stream) {
  delta_chunk::DeviceExec exec{stream};
  return delta_chunk::RunBackward(params, /*gated=*/true, exec);
}

}  // namespace flame::kernels
