#include "client/json_output.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"

namespace flame::client {

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message, bool one_line) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = !one_line;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("cannot print JSON: ", status.ToString()));
  }
  // add_whitespace ends with a newline, one-line output does not: callers add their own.
  while (!json.empty() && json.back() == '\n') json.pop_back();
  return json;
}

absl::Status WriteJson(std::ostream& out, const google::protobuf::Message& message, bool one_line) {
  absl::StatusOr<std::string> json = ToJson(message, one_line);
  if (!json.ok()) return json.status();
  out << *json << std::endl;
  return absl::OkStatus();
}

}  // namespace flame::client
