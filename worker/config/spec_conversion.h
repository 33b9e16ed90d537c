// JobSpec (proto) -> TrainConfig (plain C++). Only non-Torch targets may include this header: it
// pulls in generated protobuf code (see DESIGN.md, "Protobuf and gRPC code and LibTorch code live
// in different targets").
#pragma once

#include "flame/v1/job_spec.pb.h"
#include "worker/config/train_config.h"

namespace flame::worker {

// Copies a resolved spec (common/job_spec.h: ApplyJobSpecDefaults) field by field. Fields the
// spec leaves unset keep TrainConfig's defaults, which are the same values. `dataset` is split at
// commas. spec_hash is left empty (the caller knows whether the spec is the resolved one).
TrainConfig TrainConfigFromSpec(const flame::v1::JobSpec& spec);

}  // namespace flame::worker
