// Job files: flame's TOML (sections job, model, optimizer, lr_scheduler, training, checkpoint,
// metrics, plus our resources) -> flame.v1.JobSpec, `--set` overrides, and an early local check.
//
// Only what the user wrote is set: defaults are flamed's business (common/job_spec.h), so that a
// later change of a default reaches jobs submitted by an older flamectl. Paths are made absolute
// here because flamed runs in another directory: values from a file are relative to the file's
// folder, values from the command line to the current directory.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "flame/v1/job_spec.pb.h"

namespace flame::client {

// Reads and parses the job file at `path`. Every error is INVALID_ARGUMENT (exit code 2).
absl::StatusOr<flame::v1::JobSpec> ReadJobFile(const std::string& path);

// Parses TOML text. `source_name` prefixes error positions ("job.toml:3:1: ..."); relative paths
// resolve against `base_dir`. All problems are reported, one per line, in file order.
absl::StatusOr<flame::v1::JobSpec> ParseJobToml(absl::string_view text,
                                                absl::string_view source_name,
                                                const std::string& base_dir);

// Applies one `--set section.key=value` (or `name=value`); relative paths resolve against
// `base_dir`.
absl::Status ApplyOverride(absl::string_view assignment, const std::string& base_dir,
                           flame::v1::JobSpec* spec);

// The checks flamed will make, done here first so that a bad value or a missing file fails
// before any RPC. `spec` is left as the user wrote it; defaults go onto a copy.
absl::Status CheckJobSpecLocally(const flame::v1::JobSpec& spec);

}  // namespace flame::client
