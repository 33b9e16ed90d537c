// The one place that knows JobSpec's defaults and what a valid spec is. flamed resolves and
// validates every submission here (the authoritative check); flamectl may call it early to
// fail fast. Errors name the offending key as `section.key`.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "flame/v1/job_spec.pb.h"

namespace flame {

// Sets every unset field to flame's default (README, "Configuration keys"). Fields already set,
// even to a zero value, are kept.
void ApplyJobSpecDefaults(flame::v1::JobSpec* spec);

// Checks a resolved spec: ranges, enumerations, that the files it names exist on this host, and
// that flame's options the service does not act on keep the values it trains with
// (common/job_spec_options.h). Returns INVALID_ARGUMENT naming the key, e.g.
// "training.steps must be positive (got -5)" or "training.tensor_parallel_degree must be 1
// (got 2): ...".
absl::Status ValidateJobSpec(const flame::v1::JobSpec& spec);

// Hex SHA-like digest of the resolved spec's deterministic serialisation. Checkpoints record it
// so that a resume with a changed model or schedule is noticed.
std::string JobSpecHash(const flame::v1::JobSpec& spec);

}  // namespace flame
