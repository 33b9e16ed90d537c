// flame_reference_fixtures OUT_DIR: writes fixed, seeded inputs of the four linear-attention ops
// together with our CPU reference outputs, for tests/worker/fla_reference_check.py to compare
// against fla's own naive implementations on a host with Python torch and fla (the GPU host).
//
// One file per op in OUT_DIR (gla.pt, simple_gla.pt, delta_rule.pt, gated_delta_rule.pt), each a
// dict of str -> tensor written by torch::pickle_save (the torch.save format: torch.load reads it;
// with weights_only it needs torch.jit._pickle.restore_type_tag among the safe globals, the tag
// LibTorch's pickler puts on typed dicts). Layout [B, T, H, D] and float32 throughout:
//   q, k [B, T, H, K]   v [B, T, H, V]   h0 [B, H, K, V]   scale: a 0-dim tensor
//   g    [B, T, H, K] (gla) or [B, T, H] (simple_gla, gated_delta_rule)
//   beta [B, T, H] (delta rules)
//   o    [B, T, H, V] and ht [B, H, K, V]: our outputs (ChunkGla, ChunkSimpleGla, ChunkDeltaRule,
//                                          ChunkGatedDeltaRule) from those inputs
// T = 100 is not a multiple of the chunk (64), so the partial last chunk is covered. The delta
// rules get L2-normalised q and k (what the layers feed them; fla's naive functions take them as
// given) and the scale fla's naive functions use, K^-1/2.
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "worker/ops/delta_rule.h"
#include "worker/ops/gla.h"
#include "worker/ops/simple_gla.h"

namespace flame::worker {
namespace {

constexpr int64_t B = 2, T = 100, H = 2, K = 32, V = 24;

using Fixture = c10::Dict<std::string, torch::Tensor>;

torch::Tensor Randn(std::vector<int64_t> shape) { return torch::randn(shape, torch::kFloat); }

torch::Tensor UnitRows(const torch::Tensor& x) { return x / x.norm(2, -1, /*keepdim=*/true); }

bool Write(const Fixture& fixture, const std::string& path) {
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(fixture));
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "flame_reference_fixtures: cannot write %s\n", path.c_str());
    return false;
  }
  std::printf("wrote %s\n", path.c_str());
  return true;
}

Fixture Common(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
               const torch::Tensor& h0, double scale) {
  Fixture f;
  f.insert("q", q);
  f.insert("k", k);
  f.insert("v", v);
  f.insert("h0", h0);
  f.insert("scale", torch::tensor(scale, torch::kFloat));
  return f;
}

Fixture Gla() {
  const torch::Tensor q = Randn({B, T, H, K}), k = Randn({B, T, H, K}), v = Randn({B, T, H, V});
  // fla's GLA gate: logsigmoid(·) / 16.
  const torch::Tensor g = torch::log_sigmoid(Randn({B, T, H, K})) / 16;
  const torch::Tensor h0 = Randn({B, H, K, V});
  const double scale = 1.0 / std::sqrt(static_cast<double>(K));
  const ops::GlaOutput out = ops::ChunkGla(q, k, v, g, scale, h0, true);
  Fixture f = Common(q, k, v, h0, scale);
  f.insert("g", g);
  f.insert("o", out.output);
  f.insert("ht", out.final_state);
  return f;
}

Fixture SimpleGla() {
  const torch::Tensor q = Randn({B, T, H, K}), k = Randn({B, T, H, K}), v = Randn({B, T, H, V});
  const torch::Tensor g = torch::log_sigmoid(Randn({B, T, H})) / 4;  // [B, T, H]
  const torch::Tensor h0 = Randn({B, H, K, V});
  const double scale = 1.0 / std::sqrt(static_cast<double>(K));
  const ops::GlaOutput out = ops::ChunkSimpleGla(q, k, v, g, {}, scale, h0, true);
  Fixture f = Common(q, k, v, h0, scale);
  f.insert("g", g);
  f.insert("o", out.output);
  f.insert("ht", out.final_state);
  return f;
}

Fixture DeltaRule(bool gated) {
  const torch::Tensor q = UnitRows(Randn({B, T, H, K})), k = UnitRows(Randn({B, T, H, K}));
  const torch::Tensor v = Randn({B, T, H, V});
  const torch::Tensor beta = torch::sigmoid(Randn({B, T, H}));
  const torch::Tensor g = -torch::softplus(Randn({B, T, H})) / 2;  // log decay, [B, T, H]
  const torch::Tensor h0 = Randn({B, H, K, V});
  const double scale = 1.0 / std::sqrt(static_cast<double>(K));
  const ops::DeltaRuleOutput out = gated
                                       ? ops::ChunkGatedDeltaRule(q, k, v, g, beta, scale, h0, true)
                                       : ops::ChunkDeltaRule(q, k, v, beta, scale, h0, true);
  Fixture f = Common(q, k, v, h0, scale);
  f.insert("beta", beta);
  if (gated) f.insert("g", g);
  f.insert("o", out.output);
  f.insert("ht", out.final_state);
  return f;
}

int Main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: flame_reference_fixtures OUT_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    std::fprintf(stderr, "flame_reference_fixtures: cannot create %s: %s\n", dir.c_str(),
                 error.message().c_str());
    return 1;
  }
  torch::manual_seed(20260822);
  torch::NoGradGuard no_grad;
  bool ok = Write(Gla(), dir + "/gla.pt");
  ok = Write(SimpleGla(), dir + "/simple_gla.pt") && ok;
  ok = Write(DeltaRule(/*gated=*/false), dir + "/delta_rule.pt") && ok;
  ok = Write(DeltaRule(/*gated=*/true), dir + "/gated_delta_rule.pt") && ok;
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace flame::worker

int main(int argc, char** argv) { return flame::worker::Main(argc, argv); }
