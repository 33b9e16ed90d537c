// chunk_delta_rule launchers: the shared delta-rule steps without a gate.
#include "kernels/delta_rule/chunk_delta.cuh"
#include "kernels/delta_rule/chunk_delta_rule.h"

namespace flame::kernels {

size_t DeltaRuleChunkWorkspaceBytes(const ChunkDeltaParams& params, bool backward) {
  return delta_chunk::WorkspaceBytes(params, backward);
}

cudaError_t DeltaRuleChunkForward(const ChunkDeltaParams& params, cudaStream_t stream) {
  delta_chunk::DeviceExec exec{stream};
  return delta_chunk::RunForward(params, /*gated=*/false, exec);
}

cudaError_t DeltaRuleChunkBackward(const ChunkDeltaParams& params, cudaStream_t stream) {
  delta_chunk::DeviceExec exec{stream};
  return delta_chunk::RunBackward(params, /*gated=*/false, exec);
}

}  // namespace flame::kernels
