// chunk_gated_delta_rule launchers: the shared delta-rule steps (compiled in
// kernels/delta_rule/chunk_delta_rule.cu) with the per-head decay gate.
#include "kernels/delta_rule/chunk_delta_launch.h"
#include "kernels/gated_delta_rule/chunk_gated_delta_rule.h"

namespace flame::kernels {

size_t GatedDeltaRuleChunkWorkspaceBytes(const ChunkDeltaParams& params, bool backward) {
  return delta_chunk::DeviceWorkspaceBytes(params, backward);
}

size_t GatedDeltaRuleChunkStatesBytes(const ChunkDeltaParams& params) {
  return delta_chunk::DeviceStatesBytes(params);
}

cudaError_t GatedDeltaRuleChunkForward(const ChunkDeltaParams& params, cudaStream_t stream) {
  return delta_chunk::DeviceForward(params, /*gated=*/true, stream);
}

cudaError_t GatedDeltaRuleChunkBackward(const ChunkDeltaParams& params, cudaStream_t stream) {
  return delta_chunk::DeviceBackward(params, /*gated=*/true, stream);
}

}  // namespace flame::kernels
