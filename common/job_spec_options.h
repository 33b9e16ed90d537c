// The flame options that this service does not act on (reference: flame's JobConfig): each is
// accepted only at the values that match what flame-the-service trains, or refused by name with
// what to do instead. Split from common/job_spec.cc, which calls it from ValidateJobSpec.
#pragma once

#include "absl/status/status.h"
#include "flame/v1/job_spec.pb.h"

namespace flame {

// Checks a resolved spec's data-source, parallelism, precision and experimental options.
absl::Status ValidateFlameOptions(const flame::v1::JobSpec& spec);

}  // namespace flame
