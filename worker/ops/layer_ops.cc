// Layer op entry points (layer_ops.h): device dispatch and the differentiable ATen references.
// The references follow the kernels' headers formula for formula, in fp32 (fp64 for fp64 inputs),
// so that the CUDA paths can be tested against them.
#include "worker/ops/layer_ops.h"

#include <torch/torch.h>

#include <utility>
#include <vector>

#include "worker/ops/cuda_ops.h"

namespace flame::worker::ops {
namespace {

torch::ScalarType MathType(const torch::Tensor& x) {
  return x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}

torch::Tensor Swish(const torch::Tensor& x) { return x * torch::sigmoid(x); }

// Sequence bounds of cu_seqlens (any integer dtype, any device) on the host, checked.
std::vector<int64_t> SequenceBounds(const torch::Tensor& cu_seqlens, int64_t batch, int64_t tokens,
                                    const char* op) {
  TORCH_CHECK(batch == 1, op, ": cu_seqlens needs B == 1 (packed sequences), got B = ", batch);
  TORCH_CHECK(cu_seqlens.dim() == 1 && cu_seqlens.size(0) >= 2, op,
              ": cu_seqlens must be [N + 1] with N >= 1");
  const torch::Tensor host = cu_seqlens.to(torch::kCPU, torch::kLong).contiguous();
  std::vector<int64_t> bounds(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel());
  TORCH_CHECK(bounds.front() == 0 && bounds.back() == tokens, op,
              ": cu_seqlens must start at 0 and end at T = ", tokens);
  for (size_t n = 1; n < bounds.size(); ++n) {
    TORCH_CHECK(bounds[n] > bounds[n - 1], op, ": cu_seqlens must be strictly increasing");
  }
  return bounds;
}

// Runs `dense` on each packed sequence of x [1, T, ...] (dim 1) and concatenates the outputs.
template <typename Dense>
torch::Tensor PerSequence(const torch::Tensor& x, const torch::Tensor& cu_seqlens, const char* op,
                          Dense dense) {
  if (!cu_seqlens.defined()) return dense(x);
  const std::vector<int64_t> bounds = SequenceBounds(cu_seqlens, x.size(0), x.size(1), op);
  std::vector<torch::Tensor> parts;
  for (size_t n = 0; n + 1 < bounds.size(); ++n) {
    parts.push_back(dense(x.narrow(1, bounds[n], bounds[n + 1] - bounds[n])));
  }
  return torch::cat(parts, 1);
}

}  // namespace

// ---- RMSNorm -------------------------------------------------------------------------------

RmsNormOutput RmsNormReference(const torch::Tensor& x, const torch::Tensor& residual,
                               const torch::Tensor& weight, const torch::Tensor& gate, double eps) {
  const torch::ScalarType type = MathType(x);
  torch::Tensor h = x.to(type);
  if (residual.defined()) h = h + residual.to(type);
  torch::Tensor y = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
  if (weight.defined()) y = y * weight.to(type);
  if (gate.defined()) y = y * Swish(gate.to(type));
  RmsNormOutput out;
  out.y = y.to(x.scalar_type());
  if (residual.defined()) out.residual_out = h.to(x.scalar_type());
  return out;
}

RmsNormOutput RmsNorm(const torch::Tensor& x, const torch::Tensor& residual,
                      const torch::Tensor& weight, const torch::Tensor& gate, double eps) {
  TORCH_CHECK(x.dim() >= 1 && x.is_floating_point(), "RmsNorm: x must be floating [..., D]");
  TORCH_CHECK(!residual.defined() || residual.sizes() == x.sizes(), "RmsNorm: residual ",
              residual.sizes(), " must match x ", x.sizes());
  TORCH_CHECK(!gate.defined() || gate.sizes() == x.sizes(), "RmsNorm: gate ", gate.sizes(),
              " must match x ", x.sizes());
  TORCH_CHECK(!weight.defined() || (weight.dim() == 1 && weight.size(0) == x.size(-1)),
              "RmsNorm: weight must be [D] = [", x.size(-1), "]");
#ifdef FLAME_WITH_CUDA
  if (x.is_cuda()) {
    if (auto out = cuda::RmsNorm(x, residual, weight, gate, eps)) return *std::move(out);
  }
#endif
  return RmsNormReference(x, residual, weight, gate, eps);
}

// ---- Cross-entropy -------------------------------------------------------------------------

torch::Tensor CrossEntropyReference(const torch::Tensor& logits, const torch::Tensor& labels,
                                    int64_t ignore_index) {
  const torch::Tensor logp = torch::log_softmax(logits.to(MathType(logits)), -1);
  const torch::Tensor target = labels.to(logits.device());
  const torch::Tensor valid = target != ignore_index;  // [N]
  const torch::Tensor safe = torch::where(valid, target, torch::zeros_like(target));
  const torch::Tensor nll = -logp.gather(1, safe.unsqueeze(1)).squeeze(1);  // [N]
  // The mean over valid rows, 0 (not 0/0) when there are none: the kernel's convention.
  const torch::Tensor count = valid.sum().clamp_min(1).to(nll.scalar_type());
  return (nll * valid.to(nll.scalar_type())).sum() / count;
}

torch::Tensor CrossEntropy(const torch::Tensor& logits, const torch::Tensor& labels,
                           int64_t ignore_index, bool inplace_backward) {
  TORCH_CHECK(logits.dim() == 2 && logits.is_floating_point(),
              "CrossEntropy: logits must be floating [N, V], got ", logits.sizes());
  TORCH_CHECK(
      labels.dim() == 1 && labels.size(0) == logits.size(0) && labels.scalar_type() == torch::kLong,
      "CrossEntropy: labels must be int64 [N] = [", logits.size(0), "]");
#ifdef FLAME_WITH_CUDA
  if (logits.is_cuda()) {
    if (auto loss = cuda::CrossEntropy(logits, labels, ignore_index, inplace_backward)) {
      return *std::move(loss);
    }
  }
#endif
  return CrossEntropyReference(logits, labels, ignore_index);
}

torch::Tensor LinearCrossEntropyReference(const torch::Tensor& hidden, const torch::Tensor& weight,
                                          const torch::Tensor& labels, int64_t ignore_index) {
  const torch::ScalarType type = MathType(hidden);
  return CrossEntropyReference(torch::matmul(hidden.to(type), weight.to(type).t()), labels,
                               ignore_index);
}

torch::Tensor LinearCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                 const torch::Tensor& labels, int64_t ignore_index) {
  TORCH_CHECK(hidden.dim() == 2 && hidden.is_floating_point(),
              "LinearCrossEntropy: hidden must be floating [N, D], got ", hidden.sizes());
  TORCH_CHECK(weight.dim() == 2 && weight.size(1) == hidden.size(1),
              "LinearCrossEntropy: weight must be [V, D] with D = ", hidden.size(1), ", got ",
              weight.sizes());
  TORCH_CHECK(
      labels.dim() == 1 && labels.size(0) == hidden.size(0) && labels.scalar_type() == torch::kLong,
      "LinearCrossEntropy: labels must be int64 [N] = [", hidden.size(0), "]");
#ifdef FLAME_WITH_CUDA
  if (hidden.is_cuda()) {
    if (auto loss = cuda::LinearCrossEntropy(hidden, weight, labels, ignore_index)) {
      return *std::move(loss);
    }
  }
#endif
  return LinearCrossEntropyReference(hidden, weight, labels, ignore_index);
}

// ---- Causal short convolution ----------------------------------------------------------------

torch::Tensor ShortConvReference(const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& bias, bool silu,
                                 const torch::Tensor& cu_seqlens) {
  const torch::ScalarType type = MathType(x);
  const torch::Tensor w = weight.reshape({weight.size(0), 1, weight.size(-1)}).to(type);  // [D,1,W]
  const torch::Tensor b = bias.defined() ? bias.to(type) : torch::Tensor();
  const int64_t W = w.size(-1);
  auto dense = [&](const torch::Tensor& part) {  // [B, T, D] -> [B, T, D]
    const int64_t T = part.size(1);
    // Left padding of W - 1 steps: output t sees inputs t - W + 1 .. t, zeros before the start.
    torch::Tensor z = torch::conv1d(part.to(type).transpose(1, 2), w, b, /*stride=*/1,
                                    /*padding=*/W - 1, /*dilation=*/1, /*groups=*/part.size(2));
    z = z.narrow(2, 0, T).transpose(1, 2);
    return silu ? Swish(z) : z;
  };
  return PerSequence(x, cu_seqlens, "ShortConv", dense).to(x.scalar_type());
}

torch::Tensor ShortConv(const torch::Tensor& x, const torch::Tensor& weight,
                        const torch::Tensor& bias, bool silu, const torch::Tensor& cu_seqlens) {
  TORCH_CHECK(x.dim() == 3 && x.is_floating_point(),
              "ShortConv: x must be floating [B, T, D], got ", x.sizes());
  const int64_t D = x.size(2);
  TORCH_CHECK(
      (weight.dim() == 2 || (weight.dim() == 3 && weight.size(1) == 1)) && weight.size(0) == D,
      "ShortConv: weight must be [D, W] or [D, 1, W] with D = ", D, ", got ", weight.sizes());
  TORCH_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == D),
              "ShortConv: bias must be [D] = [", D, "]");
  if (cu_seqlens.defined()) SequenceBounds(cu_seqlens, x.size(0), x.size(1), "ShortConv");
#ifdef FLAME_WITH_CUDA
  if (x.is_cuda()) {
    if (auto y = cuda::ShortConv(x, weight, bias, silu, cu_seqlens)) return *std::move(y);
  }
#endif
  return ShortConvReference(x, weight, bias, silu, cu_seqlens);
}

// ---- L2 norm --------------------------------------------------------------------------------

torch::Tensor L2NormReference(const torch::Tensor& x, double eps) {
  const torch::Tensor xf = x.to(MathType(x));
  return (xf * torch::rsqrt(xf.pow(2).sum(-1, /*keepdim=*/true) + eps)).to(x.scalar_type());
}

torch::Tensor L2Norm(const torch::Tensor& x, double eps) {
  TORCH_CHECK(x.dim() >= 1 && x.is_floating_point(), "L2Norm: x must be floating [..., D]");
#ifdef FLAME_WITH_CUDA
  if (x.is_cuda()) {
    if (auto y = cuda::L2Norm(x, eps)) return *std::move(y);
  }
#endif
  return L2NormReference(x, eps);
}

// ---- Rotary embedding -----------------------------------------------------------------------

torch::Tensor RotaryReference(const torch::Tensor& x, const RotaryOptions& options,
                              const torch::Tensor& cu_seqlens) {
  const int64_t D = x.size(3);
  const int64_t R = options.rotary_dim == 0 ? D : options.rotary_dim;
  // fp32 angles as fla (fp64 for fp64 inputs): inv_freq_i = base^(-2i / R).
  const torch::ScalarType type = MathType(x);
  const auto opts = x.options().dtype(type);
  const torch::Tensor inv_freq =
      torch::pow(options.base, -torch::arange(0, R, 2, opts) / static_cast<double>(R));  // [R/2]
  auto dense = [&](const torch::Tensor& part) {  // [B, T, H, D]
    const torch::Tensor positions =
        torch::arange(part.size(1), opts) + static_cast<double>(options.position_offset);
    const torch::Tensor theta = positions.unsqueeze(1) * inv_freq;  // [T, R/2]
    const torch::Tensor cos = theta.cos().view({1, -1, 1, R / 2});
    const torch::Tensor sin = theta.sin().view({1, -1, 1, R / 2});
    const torch::Tensor xf = part.to(type);
    const torch::Tensor x1 = xf.narrow(3, 0, R / 2), x2 = xf.narrow(3, R / 2, R / 2);
    std::vector<torch::Tensor> pieces = {x1 * cos - x2 * sin, x2 * cos + x1 * sin};
    if (R < D) pieces.push_back(xf.narrow(3, R, D - R));
    return torch::cat(pieces, 3);
  };
  return PerSequence(x, cu_seqlens, "Rotary", dense).to(x.scalar_type());
}

torch::Tensor Rotary(const torch::Tensor& x, const RotaryOptions& options,
                     const torch::Tensor& cu_seqlens) {
  TORCH_CHECK(x.dim() == 4 && x.is_floating_point(),
              "Rotary: x must be floating [B, T, H, D], got ", x.sizes());
  const int64_t R = options.rotary_dim == 0 ? x.size(3) : options.rotary_dim;
  TORCH_CHECK(R > 0 && R % 2 == 0 && R <= x.size(3), "Rotary: rotary_dim ", R,
              " must be even and at most D = ", x.size(3));
  if (cu_seqlens.defined()) SequenceBounds(cu_seqlens, x.size(0), x.size(1), "Rotary");
#ifdef FLAME_WITH_CUDA
  if (x.is_cuda()) {
    if (auto y = cuda::Rotary(x, options, cu_seqlens)) return *std::move(y);
  }
#endif
  return RotaryReference(x, options, cu_seqlens);
}

// ---- SwiGLU ---------------------------------------------------------------------------------

torch::Tensor SwiGluReference(const torch::Tensor& gate, const torch::Tensor& up) {
  const torch::ScalarType type = MathType(gate);
  return (Swish(gate.to(type)) * up.to(type)).to(gate.scalar_type());
}

torch::Tensor SwiGlu(const torch::Tensor& gate, const torch::Tensor& up) {
  TORCH_CHECK(gate.is_floating_point() && up.sizes() == gate.sizes() &&
                  up.scalar_type() == gate.scalar_type(),
              "SwiGlu: gate and up must be floating tensors of one shape and dtype, got ",
              gate.sizes(), " and ", up.sizes());
#ifdef FLAME_WITH_CUDA
  if (gate.is_cuda()) {
    if (auto y = cuda::SwiGlu(gate, up)) return *std::move(y);
  }
#endif
  return SwiGluReference(gate, up);
}

}  // namespace flame::worker::ops
