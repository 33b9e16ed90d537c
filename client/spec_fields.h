// JobSpec's user-facing keys, found by protobuf reflection so that the proto is the only list.
//
// A key is `section.key`: `section` names a message field of flame.v1.JobSpec (job, model,
// optimizer, ...) and `key` a scalar field of that section's message. The job file parser and
// `--set` both go through here, so they accept the same keys, types and paths.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "flame/v1/job_spec.pb.h"
#include "google/protobuf/descriptor.h"

namespace flame::client {

struct SpecKey {
  const google::protobuf::FieldDescriptor* section;  // a message field of JobSpec
  const google::protobuf::FieldDescriptor* field;    // a scalar field of that message
  // flame's store_false alias of a boolean field (checkpoint.no_initial_load_model_weights_only):
  // setting the key sets the field to the opposite value.
  bool negated = false;
  std::string FullName() const;  // "training.steps", or the alias's name
};

// A value as the user wrote it, before it is checked against the field's type.
using SpecValue = std::variant<bool, int64_t, double, std::string>;

// Checks that `section` is a JobSpec section; an unknown one is INVALID_ARGUMENT naming the
// closest known section. Every section of flame's JobConfig is a JobSpec section.
absl::Status CheckSection(absl::string_view section);

// Resolves `section.key`, including flame's alias checkpoint.no_initial_load_model_weights_only.
// Errors as for CheckSection, plus unknown keys ("unknown key training.stpes (did you mean
// training.steps?)"). Whether a value is acceptable is ValidateJobSpec's business.
absl::StatusOr<SpecKey> FindSpecKey(absl::string_view section, absl::string_view key);

// What the user probably meant by `section.key`: the same key name in another section ("lr" in
// [training] -> optimizer.lr), else the closest key by spelling. An empty `section` stands for
// a key written outside any section.
std::optional<std::string> SuggestSpecKey(absl::string_view section, absl::string_view key);

// Every supported key as "section.key", in proto order (for suggestions and documentation).
std::vector<std::string> AllSpecKeys();

// "an integer", "a number", "a boolean" or "a string": what the field accepts.
std::string ExpectedTypeName(const SpecKey& key);

// Sets the field to `value`. Integers accept only integers; numbers accept integers and
// floating point; booleans and strings accept only their own kind. A path key given as a
// relative path is made absolute against `base_dir` (flamed does not share our directory).
absl::Status SetSpecValue(const SpecKey& key, const SpecValue& value, const std::string& base_dir,
                          flame::v1::JobSpec* spec);

// Parses command-line text by the field's type: "true"/"false", decimal numbers, or the text
// itself for strings.
absl::StatusOr<SpecValue> ParseSpecValue(const SpecKey& key, absl::string_view text);

// True for comma-separated list keys (flame's string_list options and per-dataset lists), which
// a job file may also write as a TOML array.
bool IsListKey(const SpecKey& key);

// True for keys whose values are file system paths (training.dataset and metrics.eval_dataset
// are comma-separated lists of paths).
bool IsPathKey(const SpecKey& key);

}  // namespace flame::client
