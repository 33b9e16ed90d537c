// chunk_gla launchers: the shared gated chunk kernels with a per-channel gate.
#include "kernels/gla/chunk_gla.h"

#include "kernels/common/chunk_gated.cuh"

namespace flame::kernels {

size_t GlaChunkWorkspaceBytes(const ChunkGatedParams& params, bool backward) {
  return gated_chunk::WorkspaceBytes(params, gated_chunk::Gate::kChannel, backward);
}

size_t GlaChunkScoresBytes(const ChunkGatedParams& params) {
  return gated_chunk::ScoresBytes(params, gated_chunk::TotalChunks(params));
}

size_t GlaChunkStatesBytes(const ChunkGatedParams& params) {
  return gated_chunk::StateBytes(params, gated_chunk::TotalChunks(params));
}

cudaError_t GlaChunkForward(const ChunkGatedParams& params, cudaStream_t stream) {
  if (params.g_gamma != nullptr) return cudaErrorInvalidValue;
  return gated_chunk::Forward<gated_chunk::Gate::kChannel>(params, stream);
}

cudaError_t GlaChunkBackward(const ChunkGatedParams& params, cudaStream_t stream) {
  if (params.g_gamma != nullptr) return cudaErrorInvalidValue;
  return gated_chunk::Backward<gated_chunk::Gate::kChannel>(params, stream);
}

cudaError_t GlaChunkUsesStatePass(const ChunkGatedParams& params, bool backward, bool* uses) {
  ChunkGatedParams p = params;
  p.num_seqs = gated_chunk::NumSeqs(params);
  return gated_chunk::UseChannelStatePass<gated_chunk::Gate::kChannel>(
      p, gated_chunk::StatePasses(p, backward), uses);
}

}  // namespace flame::kernels
