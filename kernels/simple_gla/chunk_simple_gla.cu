// chunk_simple_gla launchers: the shared gated chunk kernels with a per-head gate.
#include "kernels/simple_gla/chunk_simple_gla.h"

#include "kernels/common/chunk_gated.cuh"

namespace flame::kernels {

size_t SimpleGlaChunkWorkspaceBytes(const ChunkGatedParams& params, bool backward) {
  return gated_chunk::WorkspaceBytes(params, gated_chunk::Gate::kHead, backward);
}

size_t SimpleGlaChunkScoresBytes(const ChunkGatedParams& params) {
  return gated_chunk::ScoresBytes(params, gated_chunk::TotalChunks(params));
}

size_t SimpleGlaChunkStatesBytes(const ChunkGatedParams& params) {
  return gated_chunk::StateBytes(params, gated_chunk::TotalChunks(params));
}

cudaError_t SimpleGlaChunkForward(const ChunkGatedParams& params, cudaStream_t stream) {
  return gated_chunk::Forward<gated_chunk::Gate::kHead>(params, stream);
}

cudaError_t SimpleGlaChunkBackward(const ChunkGatedParams& params, cudaStream_t stream) {
  return gated_chunk::Backward<gated_chunk::Gate::kHead>(params, stream);
}

}  // namespace flame::kernels
