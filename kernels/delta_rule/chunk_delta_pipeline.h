// The order of the chunked delta-rule steps, shared by the GPU launchers (chunk_delta.cuh, one
// kernel per step) and the CPU test that runs every step in a loop. `exec(step)` runs one step
// over all its units and returns a cudaError_t.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/delta_rule/chunk_delta_backward_steps.h"
#include "kernels/delta_rule/chunk_delta_steps.h"

namespace flame::kernels::delta_chunk {

inline bool Aligned(const void* ptr, size_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

inline cudaError_t Validate(const ChunkDeltaParams& p, bool gated, bool backward) {
  const bool shapes =
      p.heads > 0 && p.k_dim > 0 && p.k_dim <= kMaxK && p.v_dim > 0 && p.seq_len > 0 &&
      (p.cu_seqlens == nullptr
           ? p.batch > 0
           : p.batch == 1 && p.num_seqs > 0 && p.chunk_offsets != nullptr && p.total_chunks > 0);
  const bool gate = !gated || (p.a != nullptr &&
                               (!p.gate_in_kernel || (p.A_log != nullptr && p.dt_bias != nullptr)));
  const bool inputs = p.q && p.k && p.v && p.beta && p.workspace && Aligned(p.workspace, 256);
  const bool outputs =
      backward ? p.d_o && p.dq && p.dk && p.dv && p.dbeta && (!gated || p.da) : p.o != nullptr;
  return shapes && gate && inputs && outputs ? cudaSuccess : cudaErrorInvalidValue;
}

// Bytes of params.workspace the forward (backward = false) or backward needs.
inline size_t WorkspaceBytes(const ChunkDeltaParams& params, bool backward) {
  return CarveScratch(params, backward, nullptr, nullptr);
}

// The params and scratch every step sees: sequence and chunk counts filled in.
inline StepBase MakeStepBase(const ChunkDeltaParams& params, bool gated, bool backward) {
  StepBase base{params, Scratch{}, gated};
  base.p.num_seqs = NumSeqs(params);
  base.p.total_chunks = TotalChunks(params);
  CarveScratch(base.p, backward, params.workspace, &base.s);
  return base;
}

// Forward steps up to the per-chunk states and new values; with `output`, also o.
template <typename Exec>
cudaError_t RunForwardSteps(const StepBase& base, bool output, Exec& exec) {
  cudaError_t err = cudaSuccess;
  if ((err = exec(PrepareTokens{base})) != cudaSuccess) return err;
  if ((err = exec(GateCumsum{base})) != cudaSuccess) return err;
  if ((err = exec(Scores{base})) != cudaSuccess) return err;
  if ((err = exec(SolveTril{base})) != cudaSuccess) return err;
  if ((err = exec(ComputeWU{base})) != cudaSuccess) return err;
  if ((err = exec(StateForward{base})) != cudaSuccess) return err;
  return output ? exec(Output{base}) : cudaSuccess;
}

template <typename Exec>
cudaError_t RunForward(const ChunkDeltaParams& params, bool gated, Exec& exec) {
  if (cudaError_t err = Validate(params, gated, false); err != cudaSuccess) return err;
  return RunForwardSteps(MakeStepBase(params, gated, false), true, exec);
}

// Recomputes the forward scratch (without o and the final state), then the gradients.
template <typename Exec>
cudaError_t RunBackward(const ChunkDeltaParams& params, bool gated, Exec& exec) {
  if (cudaError_t err = Validate(params, gated, true); err != cudaSuccess) return err;
  StepBase base = MakeStepBase(params, gated, true);
  StepBase recompute = base;
  recompute.p.final_state = nullptr;
  cudaError_t err = RunForwardSteps(recompute, false, exec);
  if (err != cudaSuccess) return err;
  if ((err = exec(StateBackward{base})) != cudaSuccess) return err;
  if ((err = exec(RowTerms{base})) != cudaSuccess) return err;
  if ((err = exec(GradT{base})) != cudaSuccess) return err;
  if ((err = exec(GradXY{base})) != cudaSuccess) return err;
  if ((err = exec(GradZ{base})) != cudaSuccess) return err;
  if ((err = exec(GradA{base})) != cudaSuccess) return err;
  if ((err = exec(RowGrads{base})) != cudaSuccess) return err;
  if (!gated) return cudaSuccess;
  if ((err = exec(GateGrads{base})) != cudaSuccess) return err;
  return base.p.gate_in_kernel ? exec(HeadGrads{base}) : cudaSuccess;
}

}  // namespace flame::kernels::delta_chunk
