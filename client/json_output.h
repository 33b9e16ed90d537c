// `-o json`: what scripts read. The shape, which scripts may rely on:
//   - flame.v1 messages in protobuf's canonical JSON mapping (json_util), with the .proto field
//     names (snake_case: "job_id", "total_steps"), enum values by name ("JOB_STATE_RUNNING"),
//     64-bit integers as strings ("step": "40"), as the mapping prescribes, and fields at their
//     default value printed too, so that a key is present even when it is 0 or empty.
//   - submit, status, cancel, pause, resume print one flame.v1.Job object.
//   - list prints a flame.v1.ListJobsResponse: {"jobs": [Job, ...]} in submission order.
//   - watch prints one Job object per line (JSON Lines), a complete snapshot at every change.
#pragma once

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/message.h"

namespace flame::client {

// The message as JSON: indented over several lines, or on one line (for JSON Lines).
absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message, bool one_line);

// Writes ToJson's text and a newline, and flushes (a script may be reading line by line).
absl::Status WriteJson(std::ostream& out, const google::protobuf::Message& message, bool one_line);

}  // namespace flame::client
