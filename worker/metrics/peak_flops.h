// Dense bf16 peak FLOPS of an accelerator, by the name CUDA reports (for MFU).
//
// Datasheet figures without sparsity (flame's table gives B200 the 2:4-sparse 4.5e15, which
// halves its MFU). Unknown devices get no peak, and MFU is then reported as 0 rather than
// computed against a guess.
#pragma once

#include <optional>
#include <string>

namespace flame::worker {

// "NVIDIA H200" -> 989e12, "NVIDIA A100-SXM4-80GB" -> 312e12, ...; nullopt when unknown.
std::optional<double> PeakBf16Flops(const std::string& device_name);

}  // namespace flame::worker
