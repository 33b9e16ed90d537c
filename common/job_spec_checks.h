// Small checks shared by the JobSpec validators (common/job_spec.cc and
// common/job_spec_options.cc). Each returns INVALID_ARGUMENT whose message starts with the key,
// so that flamectl and flamed report every problem the same way: "training.steps must be ...".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace flame::spec_checks {

// "<key> <why>".
absl::Status Invalid(absl::string_view key, absl::string_view why);

absl::Status RequirePositive(absl::string_view key, int64_t value);
absl::Status RequireNonNegative(absl::string_view key, int64_t value);
absl::Status RequireFinitePositive(absl::string_view key, double value);
absl::Status RequireInRange(absl::string_view key, double value, double low, double high);
absl::Status RequireOneOf(absl::string_view key, const std::string& value,
                          const std::vector<std::string>& allowed);

// A flame option kept at the one value this service trains with: "<key> must be <expected>
// (got <got>): <why>".
absl::Status RequireValue(absl::string_view key, bool ok, absl::string_view expected,
                          absl::string_view got, absl::string_view why);

// A flame option this service refuses whatever its value: "<key> is a flame option this
// service does not support: <instead>".
absl::Status Unsupported(absl::string_view key, absl::string_view instead);

// `path` must name an existing file or folder.
absl::Status RequireFile(absl::string_view key, const std::string& path);

// The entries of a comma-separated value, trimmed; empty entries are kept when `keep_empty`
// (flame's per-dataset lists use an empty entry for "the default").
std::vector<std::string> SplitList(absl::string_view csv, bool keep_empty = false);

}  // namespace flame::spec_checks
