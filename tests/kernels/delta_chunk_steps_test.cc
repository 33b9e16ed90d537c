// The chunked delta-rule algorithm (kernels/delta_rule/chunk_delta_*.h) run on the CPU: the same
// unit steps the GPU kernels execute, called in a loop, against the naive recurrence. This checks
// the chunk math (WY representation, triangular inverse, state passes, every gradient, the
// in-kernel gate, beta sigmoid and l2norm) in CI without a GPU. fp32 outputs (states, dbeta, da,
// dA_log, ddt_bias) must match to fp32 accuracy; bf16 outputs to their rounding.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/delta_rule/chunk_delta_pipeline.h"
#include "tests/kernels/delta_rule_testing.h"

namespace flame::kernels::chunk_testing {
namespace {

struct HostExec {
  template <typename Step>
  cudaError_t operator()(const Step& step) const {
    for (int64_t u = 0; u < step.Units(); ++u) step(u);
    return cudaSuccess;
  }
};

std::vector<__nv_bfloat16> ToBf16(const std::vector<float>& x) {
  std::vector<__nv_bfloat16> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = __float2bfloat16(x[i]);
  return out;
}

std::vector<float> ToFloat(const std::vector<__nv_bfloat16>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = __bfloat162float(x[i]);
  return out;
}

std::vector<float> RoundedToBf16(const std::vector<float>& x) { return ToFloat(ToBf16(x)); }

// Outputs start as NaN so that an unwritten element fails the comparison.
template <typename T>
std::vector<T> Poisoned(size_t n) {
  std::vector<T> out(n);
  if (n > 0) std::memset(static_cast<void*>(out.data()), 0xff, n * sizeof(T));
  return out;
}

class DeltaChunkSteps : public ::testing::TestWithParam<DeltaCase> {};

TEST_P(DeltaChunkSteps, MatchNaiveRecurrenceOnTheCpu) {
  const DeltaProblem pr(GetParam());
  const auto q = ToBf16(pr.q), k = ToBf16(pr.k), v = ToBf16(pr.v), d_o = ToBf16(pr.d_o);
  auto o = Poisoned<__nv_bfloat16>(pr.o.size()), dq = Poisoned<__nv_bfloat16>(pr.dq.size()),
       dk = Poisoned<__nv_bfloat16>(pr.dk.size()), dv = Poisoned<__nv_bfloat16>(pr.dv.size());
  DeltaResult r;
  r.ht = Poisoned<float>(pr.ht.size());
  r.dh0 = Poisoned<float>(pr.dh0.size());
  r.dbeta = Poisoned<float>(pr.dbeta.size());
  r.da = Poisoned<float>(pr.da.size());
  r.dA_log = Poisoned<float>(pr.dA_log.size());
  r.ddt_bias = Poisoned<float>(pr.ddt_bias.size());
  const std::vector<int32_t> offsets = ChunkOffsets(pr.c.cu_seqlens);
  DeltaBuffers b{q.data(),
                 k.data(),
                 v.data(),
                 d_o.data(),
                 pr.beta.data(),
                 pr.a.data(),
                 pr.A_log.data(),
                 pr.dt_bias.data(),
                 pr.h0.data(),
                 pr.dht.data(),
                 pr.c.cu_seqlens.data(),
                 offsets.data(),
                 o.data(),
                 dq.data(),
                 dk.data(),
                 dv.data(),
                 r.ht.data(),
                 r.dbeta.data(),
                 r.da.data(),
                 r.dA_log.data(),
                 r.ddt_bias.data(),
                 r.dh0.data(),
                 nullptr};
  ChunkDeltaParams p = MakeDeltaParams(pr, b);
  const size_t bytes = delta_chunk::WorkspaceBytes(p, true);
  std::vector<float> workspace(bytes / sizeof(float) + 64);
  const uintptr_t base = reinterpret_cast<uintptr_t>(workspace.data());
  p.workspace = reinterpret_cast<void*>((base + 255) / 256 * 256);

  HostExec exec;
  ASSERT_EQ(delta_chunk::RunForward(p, pr.c.gated, exec), cudaSuccess);
  ASSERT_EQ(delta_chunk::RunBackward(p, pr.c.gated, exec), cudaSuccess);
  r.o = ToFloat(o);
  r.dq = ToFloat(dq);
  r.dk = ToFloat(dk);
  r.dv = ToFloat(dv);
  // bf16 outputs against the reference rounded to bf16 (so that only the rare rounding flips
  // remain); fp32 outputs to fp32 accuracy.
  ExpectClose("o", r.o, RoundedToBf16(pr.o), 3e-4);
  ExpectClose("dq", r.dq, RoundedToBf16(pr.dq), 3e-4);
  ExpectClose("dk", r.dk, RoundedToBf16(pr.dk), 3e-4);
  ExpectClose("dv", r.dv, RoundedToBf16(pr.dv), 3e-4);
  ExpectClose("ht", r.ht, pr.ht, 1e-4);
  ExpectClose("dh0", r.dh0, pr.dh0, 1e-4);
  ExpectClose("db", r.dbeta, pr.dbeta, 1e-4);
  if (pr.c.gated) {
    ExpectClose("da", r.da, pr.da, 1e-4);
    ExpectClose("dA_log", r.dA_log, pr.dA_log, 1e-4);
    ExpectClose("ddt_bias", r.ddt_bias, pr.ddt_bias, 1e-4);
  }
}

TEST(DeltaChunkSteps, InvalidParamsAreRejectedBeforeAnyWork) {
  const DeltaProblem pr(DeltaCase{true, 1, 70, 1, 16, 16, {}, 1.0f, true, false, 8});
  const auto q = ToBf16(pr.q), k = ToBf16(pr.k), v = ToBf16(pr.v);
  auto o = Poisoned<__nv_bfloat16>(pr.o.size());
  DeltaBuffers b{};
  b.q = q.data(), b.k = k.data(), b.v = v.data(), b.o = o.data();
  b.beta = pr.beta.data(), b.a = pr.a.data(), b.A_log = pr.A_log.data();
  b.dt_bias = pr.dt_bias.data();
  std::vector<float> workspace(1 << 16);
  const uintptr_t base = reinterpret_cast<uintptr_t>(workspace.data());
  b.workspace = reinterpret_cast<void*>((base + 255) / 256 * 256);
  HostExec exec;
  ChunkDeltaParams p = MakeDeltaParams(pr, b);
  EXPECT_EQ(delta_chunk::Validate(p, true, false), cudaSuccess) << "the valid baseline";
  p.workspace = static_cast<char*>(b.workspace) + 4;
  EXPECT_EQ(delta_chunk::RunForward(p, true, exec), cudaErrorInvalidValue) << "misaligned";
  p.workspace = nullptr;
  EXPECT_EQ(delta_chunk::RunForward(p, true, exec), cudaErrorInvalidValue) << "no workspace";
  p = MakeDeltaParams(pr, b);
  p.k_dim = kDeltaMaxKDim + 1;
  EXPECT_EQ(delta_chunk::RunForward(p, true, exec), cudaErrorInvalidValue) << "K > 256";
  p = MakeDeltaParams(pr, b);
  p.A_log = nullptr;
  EXPECT_EQ(delta_chunk::RunForward(p, true, exec), cudaErrorInvalidValue) << "no A_log";
  p = MakeDeltaParams(pr, b);
  EXPECT_EQ(delta_chunk::RunBackward(p, true, exec), cudaErrorInvalidValue) << "no gradients";
}

const std::vector<int32_t> kOddLengths = {0, 1, 64, 129, 200, 263};  // 1, 63, 65, 71, 63

INSTANTIATE_TEST_SUITE_P(
    Grid, DeltaChunkSteps,
    ::testing::Values(DeltaCase{false, 2, 150, 2, 32, 16, {}, 0, true, true, 1},
                      DeltaCase{false, 1, 100, 2, 16, 32, {}, 0, false, true, 2},
                      DeltaCase{false, 1, 263, 2, 32, 16, kOddLengths, 0, true, false, 3},
                      DeltaCase{true, 2, 150, 2, 32, 16, {}, 1.0f, true, true, 4},
                      DeltaCase{true, 1, 263, 2, 16, 32, kOddLengths, 0.01f, true, true, 5},
                      DeltaCase{true, 1, 263, 2, 32, 16, kOddLengths, 10.0f, true, false, 6},
                      DeltaCase{true, 1, 130, 1, 32, 16, {}, 100.0f, true, true, 7},
                      // The GPU tests' largest head dims.
                      DeltaCase{false, 2, 77, 1, 256, 256, {}, 0, true, true, 33},
                      DeltaCase{true, 2, 77, 1, 256, 256, {}, 10.0f, true, true, 43},
                      DeltaCase{true, 1, 150, 4, 128, 128, {}, 100.0f, true, true, 46}),
    [](const ::testing::TestParamInfo<DeltaCase>& info) { return DeltaCaseName(info.param); });

}  // namespace
}  // namespace flame::kernels::chunk_testing
