#include "common/job_spec_checks.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/files.h"

namespace flame::spec_checks {

absl::Status Invalid(absl::string_view key, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(key, " ", why));
}

absl::Status RequirePositive(absl::string_view key, int64_t value) {
  if (value > 0) return absl::OkStatus();
  return Invalid(key, absl::StrCat("must be positive (got ", value, ")"));
}

absl::Status RequireNonNegative(absl::string_view key, int64_t value) {
  if (value >= 0) return absl::OkStatus();
  return Invalid(key, absl::StrCat("must not be negative (got ", value, ")"));
}

absl::Status RequireFinitePositive(absl::string_view key, double value) {
  if (std::isfinite(value) && value > 0) return absl::OkStatus();
  return Invalid(key, absl::StrCat("must be a positive number (got ", value, ")"));
}

absl::Status RequireInRange(absl::string_view key, double value, double low, double high) {
  if (std::isfinite(value) && value >= low && value <= high) return absl::OkStatus();
  return Invalid(key, absl::StrFormat("must be in [%g, %g] (got %g)", low, high, value));
}

absl::Status RequireOneOf(absl::string_view key, const std::string& value,
                          const std::vector<std::string>& allowed) {
  for (const std::string& option : allowed) {
    if (value == option) return absl::OkStatus();
  }
  return Invalid(
      key, absl::StrCat("must be one of ", absl::StrJoin(allowed, ", "), " (got \"", value, "\")"));
}

absl::Status RequireValue(absl::string_view key, bool ok, absl::string_view expected,
                          absl::string_view got, absl::string_view why) {
  if (ok) return absl::OkStatus();
  return Invalid(key, absl::StrCat("must be ", expected, " (got ", got, "): ", why));
}

absl::Status Unsupported(absl::string_view key, absl::string_view instead) {
  return absl::InvalidArgumentError(
      absl::StrCat(key, " is a flame option this service does not support: ", instead));
}

absl::Status RequireFile(absl::string_view key, const std::string& path) {
  if (path.empty()) return Invalid(key, "is required");
  if (!PathExists(path)) return Invalid(key, absl::StrCat("names a missing file: ", path));
  return absl::OkStatus();
}

std::vector<std::string> SplitList(absl::string_view csv, bool keep_empty) {
  std::vector<std::string> entries;
  if (absl::StripAsciiWhitespace(csv).empty()) return entries;
  for (absl::string_view part : absl::StrSplit(csv, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (!part.empty() || keep_empty) entries.emplace_back(part);
  }
  return entries;
}

}  // namespace flame::spec_checks
