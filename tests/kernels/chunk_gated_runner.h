// Runs one chunk_gla / chunk_simple_gla problem on the GPU and against the fp32 reference, and
// checks outputs and every gradient (issue 3's bar: relative RMS <= 5e-3, gate gradients 2e-2).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kernels/gla/chunk_gla.h"
#include "kernels/gla/chunk_gla_reference.h"
#include "kernels/simple_gla/chunk_simple_gla.h"
#include "kernels/simple_gla/chunk_simple_gla_reference.h"
#include "tests/kernels/chunk_gated_testing.h"

namespace flame::kernels::chunk_testing {

enum class Family { kGla, kSimpleGla, kRetention };

struct Case {
  Family family;
  int batch, seq_len, heads, k_dim, v_dim;
  std::vector<int32_t> cu_seqlens;  // non-empty: packed varlen batch (batch must be 1)
  float normalizer;                 // gate = logsigmoid(N(0,1)) / normalizer
  bool states;                      // initial state, final state and its gradient
  uint32_t seed;
};

inline std::string CaseName(const Case& c) {
  std::ostringstream s;
  s << (c.family == Family::kGla ? "gla" : c.family == Family::kSimpleGla ? "simple_gla" : "retention")
    << "_B" << c.batch << "_T" << c.seq_len << "_H" << c.heads << "_K" << c.k_dim << "_V" << c.v_dim
    << (c.cu_seqlens.empty() ? "" : "_varlen" + std::to_string(c.cu_seqlens.size() - 1))
    << "_gate" << std::lround(c.normalizer * 100) << "e_2"
    << (c.states ? "_states" : "");
  return s.str();
}

inline void RunCase(const Case& c) {
  const bool gla = c.family == Family::kGla;
  RecurrenceShape shape{c.batch, c.seq_len, c.heads, c.k_dim, c.v_dim, c.cu_seqlens};
  const int B = c.batch, T = c.seq_len, H = c.heads, K = c.k_dim, V = c.v_dim;
  const int N = shape.NumSeqs();
  const size_t rows = static_cast<size_t>(B) * T * H;
  const size_t nk = rows * K, nv = rows * V, ns = static_cast<size_t>(N) * H * K * V;
  const float scale = 1.0f / std::sqrt(static_cast<float>(K));

  const std::vector<float> q = Normal(nk, c.seed + 1, true), k = Normal(nk, c.seed + 2, true),
                           v = Normal(nv, c.seed + 3, true), d_o = Normal(nv, c.seed + 4, true);
  std::vector<float> g, gamma;
  if (c.family == Family::kRetention) {
    for (int h = 0; h < H; ++h) gamma.push_back(std::log(1.0f - std::exp2(-5.0f - h)));
    for (size_t r = 0; r < rows; ++r) g.push_back(gamma[r % H]);
  } else {
    g = LogSigmoidGate(gla ? nk : rows, c.normalizer, c.seed + 5);
  }
  std::vector<float> h0, dht;
  if (c.states) {
    h0 = Normal(ns, c.seed + 6, false);
    dht = Normal(ns, c.seed + 7, false);
  }
  const float* h0p = c.states ? h0.data() : nullptr;
  const float* dhtp = c.states ? dht.data() : nullptr;

  // Reference.
  std::vector<float> o_ref(nv), ht_ref(ns), dq_ref(nk), dk_ref(nk), dv_ref(nv), dg_ref(g.size()),
      dh0_ref(ns);
  if (gla) {
    GlaReferenceForward(shape, scale, q.data(), k.data(), v.data(), g.data(), h0p, o_ref.data(),
                        ht_ref.data());
    GlaReferenceBackward(shape, scale, q.data(), k.data(), v.data(), g.data(), h0p, d_o.data(),
                         dhtp, dq_ref.data(), dk_ref.data(), dv_ref.data(), dg_ref.data(),
                         dh0_ref.data());
  } else {
    SimpleGlaReferenceForward(shape, scale, q.data(), k.data(), v.data(), g.data(), h0p,
                              o_ref.data(), ht_ref.data());
    SimpleGlaReferenceBackward(shape, scale, q.data(), k.data(), v.data(), g.data(), h0p,
                               d_o.data(), dhtp, dq_ref.data(), dk_ref.data(), dv_ref.data(),
                               dg_ref.data(), dh0_ref.data());
  }

  // GPU.
  std::unique_ptr<Device<__nv_bfloat16>> dq_(NewBf16(q)), dk_(NewBf16(k)), dv_(NewBf16(v)),
      ddo(NewBf16(d_o));
  std::unique_ptr<Device<float>> dg_in(NewCopy(g)), dgamma(NewCopy(gamma.empty() ? std::vector<float>{0} : gamma));
  std::unique_ptr<Device<float>> dh0(NewCopy(c.states ? h0 : std::vector<float>{0})),
      ddht(NewCopy(c.states ? dht : std::vector<float>{0}));
  Device<__nv_bfloat16> o(nv), gq(nk), gk(nk), gv(nv);
  Device<float> ht(ns), gg(g.size()), gh0(ns);
  std::vector<int32_t> offsets = ChunkOffsets(c.cu_seqlens);
  std::unique_ptr<Device<int32_t>> dcu(NewCopy(c.cu_seqlens.empty() ? std::vector<int32_t>{0} : c.cu_seqlens)),
      doff(NewCopy(c.cu_seqlens.empty() ? std::vector<int32_t>{0} : offsets));

  ChunkGatedParams p;
  p.batch = B;
  p.seq_len = T;
  p.heads = H;
  p.k_dim = K;
  p.v_dim = V;
  p.scale = scale;
  if (!c.cu_seqlens.empty()) {
    p.num_seqs = N;
    p.cu_seqlens = dcu->get();
    p.chunk_offsets = doff->get();
    p.total_chunks = offsets.back();
  }
  p.q = dq_->get();
  p.k = dk_->get();
  p.v = dv_->get();
  p.qk_strides = ContiguousStrides(T, H, K);
  p.v_strides = ContiguousStrides(T, H, V);
  p.g_strides = gla ? ContiguousStrides(T, H, K) : ContiguousStrides(T, H, 1);
  if (c.family == Family::kRetention) {
    p.g_gamma = dgamma->get();
  } else {
    p.g = dg_in->get();
    p.dg = gg.get();
  }
  p.initial_state = c.states ? dh0->get() : nullptr;
  p.final_state = ht.get();
  p.o = o.get();
  p.d_o = ddo->get();
  p.d_final_state = c.states ? ddht->get() : nullptr;
  p.dq = gq.get();
  p.dk = gk.get();
  p.dv = gv.get();
  p.d_initial_state = gh0.get();
  // The forward keeps the per-chunk states for the first backward; the second recomputes them.
  Device<unsigned char> kept(gla ? GlaChunkStatesBytes(p) : SimpleGlaChunkStatesBytes(p));
  const auto workspace_bytes = [&](bool backward) {
    return gla ? GlaChunkWorkspaceBytes(p, backward) : SimpleGlaChunkWorkspaceBytes(p, backward);
  };
  size_t ws_bytes = workspace_bytes(true);  // recomputing: the largest
  p.chunk_states = reinterpret_cast<__nv_bfloat16*>(kept.get());
  ws_bytes = std::max({ws_bytes, workspace_bytes(false), workspace_bytes(true)});
  Device<unsigned char> ws(ws_bytes);
  p.workspace = ws.get();
  // The forward leaves its scores here for the backward.
  Device<unsigned char> scores(gla ? GlaChunkScoresBytes(p) : SimpleGlaChunkScoresBytes(p));
  p.intra_scores = reinterpret_cast<__nv_bfloat16*>(scores.get());

  ASSERT_EQ(gla ? GlaChunkForward(p, nullptr) : SimpleGlaChunkForward(p, nullptr), cudaSuccess);
  ASSERT_EQ(gla ? GlaChunkBackward(p, nullptr) : SimpleGlaChunkBackward(p, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  std::printf("%s\n", CaseName(c).c_str());
  ExpectClose("o", ToHost(o), o_ref, 5e-3);
  ExpectClose("ht", ToHost(ht), ht_ref, 5e-3);
  const auto expect_grads = [&](const char* suffix) {
    const auto name = [&](const char* grad) { return std::string(grad) + suffix; };
    ExpectClose(name("dq"), ToHost(gq), dq_ref, 5e-3);
    ExpectClose(name("dk"), ToHost(gk), dk_ref, 5e-3);
    ExpectClose(name("dv"), ToHost(gv), dv_ref, 5e-3);
    ExpectClose(name("dh0"), ToHost(gh0), dh0_ref, 5e-3);
    if (c.family != Family::kRetention) ExpectClose(name("dg"), ToHost(gg), dg_ref, 2e-2);
  };
  expect_grads("");

  // Again without the kept states (the gradients reset to NaN first, so stale ones fail).
  p.chunk_states = nullptr;
  for (const auto& [ptr, bytes] : {std::pair<void*, size_t>{gq.get(), nk * 2},
                                   {gk.get(), nk * 2},
                                   {gv.get(), nv * 2},
                                   {gh0.get(), ns * 4},
                                   {gg.get(), g.size() * 4}}) {
    ASSERT_EQ(cudaMemset(ptr, 0xff, bytes), cudaSuccess);
  }
  ASSERT_EQ(gla ? GlaChunkBackward(p, nullptr) : SimpleGlaChunkBackward(p, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_grads("_recomputed");
}

}  // namespace flame::kernels::chunk_testing
