// CUDA paths of the layer ops (layer_ops.h): one torch::autograd::Function per kernel family of
// kernels/norm, cross_entropy, conv, l2norm, rotary and activations (FLAME_CUDA builds only).
//
// Each Function takes the caller's tensors as they are (flattened to rows where the op is
// row-wise), converts them to the kernels' bf16 inside forward, and returns every gradient in its
// input's dtype: weight gradients come from the kernels in fp32 and reach an fp32 master weight
// without a bf16 rounding on the way.
#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

#include "kernels/activations/swiglu.h"
#include "kernels/conv/short_conv.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/cross_entropy/linear_cross_entropy.h"
#include "kernels/l2norm/l2norm.h"
#include "kernels/norm/rms_norm.h"
#include "kernels/rotary/rotary.h"
#include "worker/ops/cuda_ops.h"
#include "worker/ops/cuda_support.h"

// Returns nullopt from a CUDA path (the entry point then runs the reference) when `why`, an
// optional<std::string>, holds a reason; warns once per op.
#define FLAME_OPS_FALLBACK_IF(op, why)                                         \
  do {                                                                         \
    if (const std::optional<std::string> reason = (why)) {                     \
      TORCH_WARN_ONCE(op " runs the ATen reference on the GPU for ", *reason); \
      return std::nullopt;                                                     \
    }                                                                          \
  } while (false)

namespace flame::worker::ops::cuda {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The norms keep a row in registers: at most 8192 features (kernels/norm/row_ops.cuh).
constexpr int64_t kMaxNormDim = 8192;

// Reasons every kernel here shares: float64 (the reference keeps its precision), empty tensors,
// and a feature dimension that is not a multiple of 8 (16-byte bf16 vectors).
std::optional<std::string> CommonUnsupported(const torch::Tensor& x, int64_t dim) {
  if (x.scalar_type() == torch::kDouble) return "float64 inputs (the kernels compute in bf16)";
  if (x.numel() == 0) return "an empty tensor";
  if (dim % 8 != 0)
    return "a feature dimension of " + std::to_string(dim) + " (not a multiple of 8)";
  return std::nullopt;
}

std::optional<std::string> NormUnsupported(const torch::Tensor& x) {
  const int64_t D = x.size(-1);
  if (auto why = CommonUnsupported(x, D)) return why;
  if (D > kMaxNormDim) return "a row of " + std::to_string(D) + " features (at most 8192)";
  return std::nullopt;
}

// An input's dtype as saved_data holds it (-1: the input was undefined), and a gradient cast back
// to it (undefined for an undefined input).
int64_t DtypeCode(const torch::Tensor& t) {
  return t.defined() ? static_cast<int64_t>(t.scalar_type()) : -1;
}
torch::Tensor CastTo(const torch::Tensor& grad, int64_t code) {
  return grad.defined() && code >= 0 ? grad.to(static_cast<torch::ScalarType>(code))
                                     : torch::Tensor();
}

// An output without a use in the graph: a [0] tensor, non-differentiable.
torch::Tensor NoOutput(const torch::Tensor& like) { return torch::empty({0}, like.options()); }

// ---- RMSNorm -------------------------------------------------------------------------------

class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  // x, residual, gate [R, D]; weight [D]; residual, weight, gate may be undefined.
  // Returns {y [R, D], h = x + residual [R, D] (or [0] without a residual)}.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x,
                               const OptionalTensor& residual_in, const OptionalTensor& weight_in,
                               const OptionalTensor& gate_in, double eps) {
    const torch::Tensor residual = Value(residual_in), weight = Value(weight_in),
                        gate = Value(gate_in);
    const c10::cuda::CUDAGuard guard(x.device());
    const torch::Tensor xb = Bf16(x);
    const torch::Tensor rb = residual.defined() ? Bf16(residual) : torch::Tensor();
    const torch::Tensor wb = weight.defined() ? Bf16(weight) : torch::Tensor();
    const torch::Tensor gb = gate.defined() ? Bf16(gate) : torch::Tensor();
    const torch::Tensor y = torch::empty_like(xb);
    const torch::Tensor h = residual.defined() ? torch::empty_like(xb) : xb;
    const torch::Tensor rstd = torch::empty({x.size(0)}, x.options().dtype(torch::kFloat));
    kernels::RmsNormForwardParams p;
    p.x = Bf16Ptr(xb);
    p.residual = Bf16Ptr(rb);
    p.weight = Bf16Ptr(wb);
    p.gate = Bf16Ptr(gb);
    p.y = Bf16Ptr(y);
    p.residual_out = residual.defined() ? Bf16Ptr(h) : nullptr;
    p.rstd = Fp32Ptr(rstd);
    p.rows = x.size(0);
    p.dim = static_cast<int>(x.size(1));
    p.eps = static_cast<float>(eps);
    Check(kernels::RmsNormForward(p, at::cuda::getCurrentCUDAStream()), "RmsNormForward");

    ctx->save_for_backward({h, wb, gb, rstd});
    ctx->saved_data["dtypes"] =
        std::vector<int64_t>{DtypeCode(x), DtypeCode(residual), DtypeCode(weight), DtypeCode(gate)};
    const torch::Tensor residual_out = residual.defined() ? h.to(x.scalar_type()) : NoOutput(x);
    if (!residual.defined()) ctx->mark_non_differentiable({residual_out});
    return {y.to(x.scalar_type()), residual_out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const torch::Tensor &h = s[0], &wb = s[1], &gb = s[2], &rstd = s[3];
    const c10::cuda::CUDAGuard guard(h.device());
    const torch::Tensor dy = grads[0].defined() ? Bf16(grads[0]) : torch::zeros_like(h);
    const torch::Tensor dh =
        grads[1].defined() && grads[1].numel() > 0 ? Bf16(grads[1]) : torch::Tensor();
    const torch::Tensor dx = torch::empty_like(h);
    const torch::Tensor dgate = gb.defined() ? torch::empty_like(gb) : torch::Tensor();
    const torch::Tensor dweight = wb.defined()
                                      ? torch::empty(wb.sizes(), wb.options().dtype(torch::kFloat))
                                      : torch::Tensor();
    const int64_t R = h.size(0);
    const int D = static_cast<int>(h.size(1));
    const torch::Tensor workspace =
        Workspace(kernels::RmsNormBackwardWorkspaceBytes(R, D), h.device());
    kernels::RmsNormBackwardParams p;
    p.h = Bf16Ptr(h);
    p.weight = Bf16Ptr(wb);
    p.gate = Bf16Ptr(gb);
    p.rstd = Fp32Ptr(rstd);
    p.dy = Bf16Ptr(dy);
    p.dresidual_out = Bf16Ptr(dh);
    p.dx = Bf16Ptr(dx);
    p.dgate = Bf16Ptr(dgate);
    p.dweight = Fp32Ptr(dweight);
    p.workspace = reinterpret_cast<float*>(workspace.data_ptr());
    p.rows = R;
    p.dim = D;
    Check(kernels::RmsNormBackward(p, at::cuda::getCurrentCUDAStream()), "RmsNormBackward");
    // dx is the gradient of both x and the residual (h = x + residual).
    const std::vector<int64_t> dtypes = ctx->saved_data["dtypes"].toIntVector();
    return {CastTo(dx, dtypes[0]),
            CastTo(dx, dtypes[1]),
            CastTo(dweight, dtypes[2]),
            CastTo(dgate, dtypes[3]),
            {}};
  }
};

// ---- Cross-entropy -------------------------------------------------------------------------

class CrossEntropyFunction : public torch::autograd::Function<CrossEntropyFunction> {
 public:
  // logits [N, V], labels int64 [N] on logits' device. Returns {mean loss, float32 scalar}.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& logits,
                               const torch::Tensor& labels, int64_t ignore_index,
                               bool inplace_backward) {
    const c10::cuda::CUDAGuard guard(logits.device());
    // The kernel overwrites its input with the gradient: a private bf16 copy unless the caller
    // gave its bf16 logits away (inplace_backward).
    const bool reuse = inplace_backward && logits.scalar_type() == torch::kBFloat16 &&
                       logits.is_contiguous() && Aligned16(logits);
    const torch::Tensor buffer =
        reuse ? logits.detach()
              : logits.to(torch::kBFloat16, /*non_blocking=*/false, /*copy=*/true).contiguous();
    const torch::Tensor loss = torch::empty({}, logits.options().dtype(torch::kFloat));
    const torch::Tensor workspace =
        Workspace(kernels::CrossEntropyWorkspaceBytes(logits.size(0)), logits.device());
    kernels::CrossEntropyParams p;
    p.logits = Bf16Ptr(buffer);
    p.labels = labels.data_ptr<int64_t>();
    p.loss = Fp32Ptr(loss);
    p.workspace = workspace.data_ptr();
    p.rows = logits.size(0);
    p.vocab = static_cast<int>(logits.size(1));
    p.ignore_index = ignore_index;
    Check(kernels::CrossEntropyForwardBackward(p, at::cuda::getCurrentCUDAStream()),
          "CrossEntropyForwardBackward");
    // The gradient of the mean loss lives in `buffer` now; kept outside the saved-variable
    // machinery because it is no input or output of this node.
    ctx->saved_data["dlogits"] = buffer;
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    return {loss};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor dlogits = ctx->saved_data["dlogits"].toTensor();
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {(dlogits * grads[0]).to(dtype), {}, {}, {}};
  }
};

class LinearCrossEntropyFunction : public torch::autograd::Function<LinearCrossEntropyFunction> {
 public:
  // hidden [N, D], weight [V, D], labels int64 [N] on one device. Returns {mean loss}.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& hidden,
                               const torch::Tensor& weight, const torch::Tensor& labels,
                               int64_t ignore_index) {
    const c10::cuda::CUDAGuard guard(hidden.device());
    const torch::Tensor hb = Bf16(hidden), wb = Bf16(weight);
    const int64_t N = hidden.size(0);
    const int D = static_cast<int>(hidden.size(1)), V = static_cast<int>(weight.size(0));
    const torch::Tensor loss = torch::empty({}, hidden.options().dtype(torch::kFloat));
    const torch::Tensor dhidden = torch::empty_like(hb);
    const torch::Tensor dweight = torch::empty({V, D}, hidden.options().dtype(torch::kFloat));
    const int chunk = kernels::LinearCrossEntropyDefaultChunk(N, D, V);
    const torch::Tensor workspace =
        Workspace(kernels::LinearCrossEntropyWorkspaceBytes(N, V, chunk), hidden.device());
    kernels::LinearCrossEntropyParams p;
    p.hidden = Bf16Ptr(hb);
    p.weight = Bf16Ptr(wb);
    p.labels = labels.data_ptr<int64_t>();
    p.loss = Fp32Ptr(loss);
    p.dhidden = Bf16Ptr(dhidden);
    p.dweight = Fp32Ptr(dweight);
    p.workspace = workspace.data_ptr();
    // Torch's handle for this device, bound to the current stream (the launcher binds it again).
    p.cublas = at::cuda::getCurrentCUDABlasHandle();
    p.rows = N;
    p.dim = D;
    p.vocab = V;
    p.chunk_rows = chunk;
    p.ignore_index = ignore_index;
    Check(kernels::LinearCrossEntropyForwardBackward(p, at::cuda::getCurrentCUDAStream()),
          "LinearCrossEntropyForwardBackward");
    // Like fla, the gradients are made in the forward; the backward scales them.
    ctx->saved_data["dhidden"] = dhidden;
    ctx->saved_data["dweight"] = dweight;
    ctx->saved_data["hidden_dtype"] = static_cast<int64_t>(hidden.scalar_type());
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return {loss};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto dtype = [&](const char* key) {
      return static_cast<torch::ScalarType>(ctx->saved_data[key].toInt());
    };
    const torch::Tensor dhidden = ctx->saved_data["dhidden"].toTensor();
    const torch::Tensor dweight = ctx->saved_data["dweight"].toTensor();
    return {(dhidden * grads[0]).to(dtype("hidden_dtype")),
            (dweight * grads[0]).to(dtype("weight_dtype")),
            {},
            {}};
  }
};

// ---- Causal short convolution ----------------------------------------------------------------

class ShortConvFunction : public torch::autograd::Function<ShortConvFunction> {
 public:
  // x [B, T, D]; weight [D, W] or [D, 1, W]; bias [D] or undefined; cu_seqlens device int32
  // [N + 1] or undefined. Returns {y [B, T, D]}.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const OptionalTensor& bias_in,
                               const OptionalTensor& cu_seqlens_in, bool silu) {
    const torch::Tensor bias = Value(bias_in), cu_seqlens = Value(cu_seqlens_in);
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t D = x.size(2), W = weight.size(-1);
    const torch::Tensor xb = Bf16(x), wb = Bf16(weight.reshape({D, W}));
    const torch::Tensor bb = bias.defined() ? Bf16(bias) : torch::Tensor();
    const torch::Tensor y = torch::empty_like(xb);
    kernels::ShortConvForwardParams p;
    p.x = Bf16Ptr(xb);
    p.weight = Bf16Ptr(wb);
    p.bias = Bf16Ptr(bb);
    p.y = Bf16Ptr(y);
    p.tokens = x.size(0) * x.size(1);
    p.dim = static_cast<int>(D);
    p.kernel_size = static_cast<int>(W);
    p.seq_len = static_cast<int>(x.size(1));
    p.cu_seqlens = IntPtr(cu_seqlens);
    p.num_seqs = cu_seqlens.defined() ? static_cast<int>(cu_seqlens.size(0) - 1) : 0;
    p.silu = silu;
    Check(kernels::ShortConvForward(p, at::cuda::getCurrentCUDAStream()), "ShortConvForward");
    ctx->save_for_backward({xb, wb, bb, cu_seqlens});
    ctx->saved_data["silu"] = silu;
    ctx->saved_data["dtypes"] =
        std::vector<int64_t>{DtypeCode(x), DtypeCode(weight), DtypeCode(bias)};
    ctx->saved_data["weight_shape"] = weight.sizes().vec();
    return {y.to(x.scalar_type())};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const torch::Tensor &xb = s[0], &wb = s[1], &bb = s[2], &cu_seqlens = s[3];
    const c10::cuda::CUDAGuard guard(xb.device());
    const int64_t tokens = xb.size(0) * xb.size(1);
    const int D = static_cast<int>(wb.size(0)), W = static_cast<int>(wb.size(1));
    const torch::Tensor dy = Bf16(grads[0]);
    const torch::Tensor dx = torch::empty_like(xb);
    const torch::Tensor dweight = torch::empty(wb.sizes(), wb.options().dtype(torch::kFloat));
    const torch::Tensor dbias =
        bb.defined() ? torch::empty({D}, wb.options().dtype(torch::kFloat)) : torch::Tensor();
    const torch::Tensor workspace =
        Workspace(kernels::ShortConvBackwardWorkspaceBytes(tokens, D, W), xb.device());
    kernels::ShortConvBackwardParams p;
    p.x = Bf16Ptr(xb);
    p.weight = Bf16Ptr(wb);
    p.bias = Bf16Ptr(bb);
    p.dy = Bf16Ptr(dy);
    p.dx = Bf16Ptr(dx);
    p.dweight = Fp32Ptr(dweight);
    p.dbias = Fp32Ptr(dbias);
    p.workspace = reinterpret_cast<float*>(workspace.data_ptr());
    p.tokens = tokens;
    p.dim = D;
    p.kernel_size = W;
    p.seq_len = static_cast<int>(xb.size(1));
    p.cu_seqlens = IntPtr(cu_seqlens);
    p.num_seqs = cu_seqlens.defined() ? static_cast<int>(cu_seqlens.size(0) - 1) : 0;
    p.silu = ctx->saved_data["silu"].toBool();
    Check(kernels::ShortConvBackward(p, at::cuda::getCurrentCUDAStream()), "ShortConvBackward");
    const std::vector<int64_t> dtypes = ctx->saved_data["dtypes"].toIntVector();
    const std::vector<int64_t> weight_shape = ctx->saved_data["weight_shape"].toIntVector();
    return {CastTo(dx, dtypes[0]),
            CastTo(dweight.reshape(weight_shape), dtypes[1]),
            CastTo(dbias, dtypes[2]),
            {},
            {}};
  }
};

// ---- L2 norm --------------------------------------------------------------------------------

class L2NormFunction : public torch::autograd::Function<L2NormFunction> {
 public:
  // x [R, D]. Returns {y [R, D]}.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, double eps) {
    const c10::cuda::CUDAGuard guard(x.device());
    const torch::Tensor xb = Bf16(x);
    const torch::Tensor y = torch::empty_like(xb);
    kernels::L2NormForwardParams p;
    p.x = Bf16Ptr(xb);
    p.y = Bf16Ptr(y);
    p.rows = x.size(0);
    p.dim = static_cast<int>(x.size(1));
    p.eps = static_cast<float>(eps);
    Check(kernels::L2NormForward(p, at::cuda::getCurrentCUDAStream()), "L2NormForward");
    ctx->save_for_backward({xb});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["dtype"] = static_cast<int64_t>(x.scalar_type());
    return {y.to(x.scalar_type())};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor xb = ctx->get_saved_variables()[0];
    const c10::cuda::CUDAGuard guard(xb.device());
    const torch::Tensor dy = Bf16(grads[0]);
    const torch::Tensor dx = torch::empty_like(xb);
    kernels::L2NormBackwardParams p;
    p.x = Bf16Ptr(xb);
    p.dy = Bf16Ptr(dy);
    p.dx = Bf16Ptr(dx);
    p.rows = xb.size(0);
    p.dim = static_cast<int>(xb.size(1));
    p.eps = static_cast<float>(ctx->saved_data["eps"].toDouble());
    Check(kernels::L2NormBackward(p, at::cuda::getCurrentCUDAStream()), "L2NormBackward");
    return {dx.to(static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt())), {}};
  }
};

// ---- Rotary embedding -----------------------------------------------------------------------

// Params for x, y [B, T, H, D] contiguous; positions from cu_seqlens (device int32) or T.
kernels::RotaryParams RotaryParamsFor(const torch::Tensor& x, const torch::Tensor& y,
                                      const torch::Tensor& cu_seqlens, int64_t rotary_dim,
                                      double base, int64_t position_offset) {
  kernels::RotaryParams p;
  p.x = Bf16Ptr(x);
  p.y = Bf16Ptr(y);
  p.tokens = x.size(0) * x.size(1);
  p.heads = static_cast<int>(x.size(2));
  p.head_dim = static_cast<int>(x.size(3));
  p.rotary_dim = static_cast<int>(rotary_dim);
  p.seq_len = static_cast<int>(x.size(1));
  p.cu_seqlens = IntPtr(cu_seqlens);
  p.num_seqs = cu_seqlens.defined() ? static_cast<int>(cu_seqlens.size(0) - 1) : 0;
  p.position_offset = static_cast<int>(position_offset);
  p.base = static_cast<float>(base);
  return p;
}

class RotaryFunction : public torch::autograd::Function<RotaryFunction> {
 public:
  // x [B, T, H, D]; cu_seqlens device int32 [N + 1] or undefined. Returns {y [B, T, H, D]}.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x,
                               const OptionalTensor& cu_seqlens_in, int64_t rotary_dim, double base,
                               int64_t position_offset) {
    const torch::Tensor cu_seqlens = Value(cu_seqlens_in);
    const c10::cuda::CUDAGuard guard(x.device());
    const torch::Tensor xb = Bf16(x);
    const torch::Tensor y = torch::empty_like(xb);
    Check(kernels::RotaryForward(
              RotaryParamsFor(xb, y, cu_seqlens, rotary_dim, base, position_offset),
              at::cuda::getCurrentCUDAStream()),
          "RotaryForward");
    ctx->save_for_backward({cu_seqlens});
    ctx->saved_data["rotary_dim"] = rotary_dim;
    ctx->saved_data["base"] = base;
    ctx->saved_data["position_offset"] = position_offset;
    ctx->saved_data["dtype"] = static_cast<int64_t>(x.scalar_type());
    return {y.to(x.scalar_type())};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor cu_seqlens = ctx->get_saved_variables()[0];
    const c10::cuda::CUDAGuard guard(grads[0].device());
    const torch::Tensor dy = Bf16(grads[0]);
    const torch::Tensor dx = torch::empty_like(dy);
    // The gradient of a rotation is the rotation by -theta.
    Check(kernels::RotaryBackward(
              RotaryParamsFor(dy, dx, cu_seqlens, ctx->saved_data["rotary_dim"].toInt(),
                              ctx->saved_data["base"].toDouble(),
                              ctx->saved_data["position_offset"].toInt()),
              at::cuda::getCurrentCUDAStream()),
          "RotaryBackward");
    return {
        dx.to(static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt())), {}, {}, {}, {}};
  }
};

// ---- SwiGLU ---------------------------------------------------------------------------------

class SwiGluFunction : public torch::autograd::Function<SwiGluFunction> {
 public:
  // gate, up [R, D]. Returns {y [R, D]}.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& gate,
                               const torch::Tensor& up) {
    const c10::cuda::CUDAGuard guard(gate.device());
    const torch::Tensor gb = Bf16(gate), ub = Bf16(up);
    const torch::Tensor y = torch::empty_like(gb);
    kernels::SwiGluForwardParams p;
    p.gate = Bf16Ptr(gb);
    p.up = Bf16Ptr(ub);
    p.y = Bf16Ptr(y);
    p.rows = gate.size(0);
    p.dim = gate.size(1);
    Check(kernels::SwiGluForward(p, at::cuda::getCurrentCUDAStream()), "SwiGluForward");
    ctx->save_for_backward({gb, ub});
    ctx->saved_data["dtype"] = static_cast<int64_t>(gate.scalar_type());
    return {y.to(gate.scalar_type())};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const c10::cuda::CUDAGuard guard(s[0].device());
    const torch::Tensor dy = Bf16(grads[0]);
    const torch::Tensor dgate = torch::empty_like(s[0]), dup = torch::empty_like(s[1]);
    kernels::SwiGluBackwardParams p;
    p.gate = Bf16Ptr(s[0]);
    p.up = Bf16Ptr(s[1]);
    p.dy = Bf16Ptr(dy);
    p.dgate = Bf16Ptr(dgate);
    p.dup = Bf16Ptr(dup);
    p.rows = s[0].size(0);
    p.dim = s[0].size(1);
    Check(kernels::SwiGluBackward(p, at::cuda::getCurrentCUDAStream()), "SwiGluBackward");
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {dgate.to(dtype), dup.to(dtype)};
  }
};

// [..., D] -> [R, D] (a view where possible; differentiable).
torch::Tensor Rows(const torch::Tensor& x) { return x.reshape({-1, x.size(-1)}); }
torch::Tensor RowsOrNone(const torch::Tensor& x) { return x.defined() ? Rows(x) : x; }

}  // namespace

std::optional<RmsNormOutput> RmsNorm(const torch::Tensor& x, const torch::Tensor& residual,
                                     const torch::Tensor& weight, const torch::Tensor& gate,
                                     double eps) {
  CheckDevice("RmsNorm", x.device(), {residual, weight, gate});
  FLAME_OPS_FALLBACK_IF("RmsNorm", NormUnsupported(x));
  const variable_list out = RmsNormFunction::apply(
      Rows(x), Optional(RowsOrNone(residual)), Optional(weight), Optional(RowsOrNone(gate)), eps);
  RmsNormOutput result;
  result.y = out[0].view(x.sizes());
  if (residual.defined()) result.residual_out = out[1].view(x.sizes());
  return result;
}

std::optional<torch::Tensor> CrossEntropy(const torch::Tensor& logits, const torch::Tensor& labels,
                                          int64_t ignore_index, bool inplace_backward) {
  FLAME_OPS_FALLBACK_IF("CrossEntropy", CommonUnsupported(logits, logits.size(1)));
  FLAME_OPS_FALLBACK_IF("CrossEntropy", logits.size(1) > INT32_MAX
                                            ? std::optional<std::string>("V >= 2^31")
                                            : std::nullopt);
  const torch::Tensor device_labels = labels.to(logits.device()).contiguous();
  return CrossEntropyFunction::apply(logits, device_labels, ignore_index, inplace_backward)[0];
}

std::optional<torch::Tensor> LinearCrossEntropy(const torch::Tensor& hidden,
                                                const torch::Tensor& weight,
                                                const torch::Tensor& labels, int64_t ignore_index) {
  CheckDevice("LinearCrossEntropy", hidden.device(), {weight});
  FLAME_OPS_FALLBACK_IF("LinearCrossEntropy", CommonUnsupported(hidden, hidden.size(1)));
  FLAME_OPS_FALLBACK_IF("LinearCrossEntropy", CommonUnsupported(weight, weight.size(0)));
  const torch::Tensor device_labels = labels.to(hidden.device()).contiguous();
  return LinearCrossEntropyFunction::apply(hidden, weight, device_labels, ignore_index)[0];
}

std::optional<torch::Tensor> ShortConv(const torch::Tensor& x, const torch::Tensor& weight,
                                       const torch::Tensor& bias, bool silu,
                                       const torch::Tensor& cu_seqlens) {
  CheckDevice("ShortConv", x.device(), {weight, bias});
  FLAME_OPS_FALLBACK_IF("ShortConv", CommonUnsupported(x, x.size(2)));
  const int64_t W = weight.size(-1);
  FLAME_OPS_FALLBACK_IF("ShortConv", W < 1 || W > kernels::kMaxShortConvWidth
                                         ? std::optional<std::string>("a kernel wider than 4")
                                         : std::nullopt);
  return ShortConvFunction::apply(x, weight, Optional(bias),
                                  Optional(DeviceSeqlens(cu_seqlens, x.device())), silu)[0];
}

std::optional<torch::Tensor> L2Norm(const torch::Tensor& x, double eps) {
  FLAME_OPS_FALLBACK_IF("L2Norm", NormUnsupported(x));
  return L2NormFunction::apply(Rows(x), eps)[0].view(x.sizes());
}

std::optional<torch::Tensor> Rotary(const torch::Tensor& x, const RotaryOptions& options,
                                    const torch::Tensor& cu_seqlens) {
  FLAME_OPS_FALLBACK_IF("Rotary", CommonUnsupported(x, x.size(3)));
  const int64_t R = options.rotary_dim == 0 ? x.size(3) : options.rotary_dim;
  FLAME_OPS_FALLBACK_IF("Rotary", R % 16 != 0 ? std::optional<std::string>(
                                                    "a rotary_dim that is not a multiple of 16")
                                              : std::nullopt);
  return RotaryFunction::apply(x, Optional(DeviceSeqlens(cu_seqlens, x.device())), R, options.base,
                               options.position_offset)[0];
}

std::optional<torch::Tensor> SwiGlu(const torch::Tensor& gate, const torch::Tensor& up) {
  CheckDevice("SwiGlu", gate.device(), {up});
  FLAME_OPS_FALLBACK_IF("SwiGlu", CommonUnsupported(gate, gate.size(-1)));
  return SwiGluFunction::apply(Rows(gate), Rows(up))[0].view(gate.sizes());
}

}  // namespace flame::worker::ops::cuda
