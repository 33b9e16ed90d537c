#include "client/job_file.h"

#include <toml++/toml.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <system_error>
#include <tuple>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/spec_fields.h"
#include "common/files.h"
#include "common/job_spec.h"

namespace flame::client {
namespace {

using flame::v1::JobSpec;

// Problems found in a job file, reported together in file order (toml++ iterates tables in key
// order, not file order). A message repeated by several keys, such as one unknown section, is
// reported once, at its first place.
class ProblemList {
 public:
  explicit ProblemList(absl::string_view source_name) : source_name_(source_name) {}

  void Add(const toml::source_region& where, absl::string_view message) {
    problems_.push_back({static_cast<int>(where.begin.line), static_cast<int>(where.begin.column),
                         std::string(message)});
  }

  absl::Status ToStatus() {
    if (problems_.empty()) return absl::OkStatus();
    std::stable_sort(problems_.begin(), problems_.end(), [](const Problem& a, const Problem& b) {
      return std::tie(a.line, a.column) < std::tie(b.line, b.column);
    });
    std::vector<std::string> lines;
    std::vector<std::string> seen;
    for (const Problem& problem : problems_) {
      if (std::find(seen.begin(), seen.end(), problem.message) != seen.end()) continue;
      seen.push_back(problem.message);
      lines.push_back(absl::StrCat(source_name_, ":", problem.line, ":", problem.column, ": ",
                                   problem.message));
    }
    return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
  }

 private:
  struct Problem {
    int line;
    int column;
    std::string message;
  };
  std::string source_name_;
  std::vector<Problem> problems_;
};

std::optional<SpecValue> ToSpecValue(const toml::node& node) {
  if (const auto* value = node.as_boolean()) return SpecValue(value->get());
  if (const auto* value = node.as_integer()) return SpecValue(static_cast<int64_t>(value->get()));
  if (const auto* value = node.as_floating_point()) return SpecValue(value->get());
  if (const auto* value = node.as_string()) return SpecValue(value->get());
  return std::nullopt;
}

// A TOML array for a list key: its strings and numbers joined with commas, as flame's
// command line writes lists. Nested arrays or tables are not a list of values.
std::optional<SpecValue> JoinArray(const toml::array& array) {
  std::vector<std::string> parts;
  for (const toml::node& element : array) {
    if (const auto* text = element.as_string()) {
      parts.push_back(text->get());
    } else if (const auto* integer = element.as_integer()) {
      parts.push_back(absl::StrCat(integer->get()));
    } else if (const auto* real = element.as_floating_point()) {
      parts.push_back(absl::StrCat(real->get()));
    } else {
      return std::nullopt;
    }
  }
  return SpecValue(absl::StrJoin(parts, ","));
}

std::string DescribeNode(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    default:
      return "a value of another type";
  }
}

void ParseSection(const std::string& section, const toml::table& table,
                  const toml::source_region& where, const std::string& base_dir, JobSpec* spec,
                  ProblemList* problems) {
  if (table.empty()) {
    if (absl::Status status = CheckSection(section); !status.ok()) {
      problems->Add(where, status.message());
    }
    return;
  }
  for (const auto& [name, node] : table) {
    absl::StatusOr<SpecKey> key = FindSpecKey(section, std::string(name.str()));
    if (!key.ok()) {
      problems->Add(name.source(), key.status().message());
      continue;
    }
    std::optional<SpecValue> value =
        node.is_array() && IsListKey(*key) ? JoinArray(*node.as_array()) : ToSpecValue(node);
    if (!value.has_value()) {
      problems->Add(node.source(),
                    absl::StrCat(key->FullName(), " must be ", ExpectedTypeName(*key), " (got ",
                                 DescribeNode(node), ")"));
      continue;
    }
    if (absl::Status status = SetSpecValue(*key, *value, base_dir, spec); !status.ok()) {
      problems->Add(node.source(), status.message());
    }
  }
}

// A key outside every [section]: `name`, or a mistake.
void ParseTopLevelValue(const std::string& name, const toml::node& node, JobSpec* spec,
                        ProblemList* problems) {
  if (name == "name") {
    if (const auto* text = node.as_string()) {
      spec->set_name(text->get());
    } else {
      problems->Add(node.source(), "name must be a string");
    }
    return;
  }
  if (CheckSection(name).ok()) {
    problems->Add(node.source(), absl::StrCat("[", name, "] must be a table of keys"));
    return;
  }
  std::string message = absl::StrCat("unknown key ", name);
  if (std::optional<std::string> match = SuggestSpecKey("", name)) {
    absl::StrAppend(&message, " (did you mean ", *match, "?)");
  }
  problems->Add(node.source(), message);
}

}  // namespace

absl::StatusOr<JobSpec> ParseJobToml(absl::string_view text, absl::string_view source_name,
                                     const std::string& base_dir) {
  // toml++ reports syntax errors by exception; they end here and become a Status.
  toml::table root;
  try {
    root = toml::parse(std::string_view(text.data(), text.size()),
                       std::string_view(source_name.data(), source_name.size()));
  } catch (const toml::parse_error& error) {
    return absl::InvalidArgumentError(absl::StrCat(source_name, ":", error.source().begin.line, ":",
                                                   error.source().begin.column, ": ",
                                                   std::string(error.description())));
  }
  JobSpec spec;
  ProblemList problems(source_name);
  for (const auto& [name, node] : root) {
    if (const toml::table* table = node.as_table()) {
      ParseSection(std::string(name.str()), *table, name.source(), base_dir, &spec, &problems);
    } else {
      ParseTopLevelValue(std::string(name.str()), node, &spec, &problems);
    }
  }
  if (absl::Status status = problems.ToStatus(); !status.ok()) return status;
  return spec;
}

absl::StatusOr<JobSpec> ReadJobFile(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    return absl::InvalidArgumentError(absl::StrCat("job file ", path, " is a directory"));
  }
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read job file ", path));
  }
  const std::string absolute = AbsolutePath(path);
  const std::string base_dir = std::filesystem::path(absolute).parent_path().string();
  absl::StatusOr<JobSpec> spec = ParseJobToml(*text, path, base_dir);
  // job.config_file records the file that was read, whatever the file itself says (flame, too,
  // loads only the file named on its command line).
  if (spec.ok()) spec->mutable_job()->set_config_file(absolute);
  return spec;
}

absl::Status ApplyOverride(absl::string_view assignment, const std::string& base_dir,
                           JobSpec* spec) {
  const auto usage = [assignment]() {
    return absl::InvalidArgumentError(
        absl::StrCat("--set expects section.key=value (got \"", assignment, "\")"));
  };
  const size_t equals = assignment.find('=');
  if (equals == absl::string_view::npos) return usage();
  const absl::string_view name = absl::StripAsciiWhitespace(assignment.substr(0, equals));
  const absl::string_view text = assignment.substr(equals + 1);
  if (name == "name") {
    spec->set_name(std::string(text));
    return absl::OkStatus();
  }
  const std::vector<absl::string_view> parts = absl::StrSplit(name, '.');
  if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) return usage();
  if (name == "job.config_file") {
    // It names the file to read first; an override comes too late to be read.
    return absl::InvalidArgumentError(absl::StrCat(
        "--set ", assignment, ": give the job file as FILE or as --job.config_file FILE"));
  }

  const auto where = [assignment](const absl::Status& status) {
    return absl::InvalidArgumentError(absl::StrCat("--set ", assignment, ": ", status.message()));
  };
  absl::StatusOr<SpecKey> key = FindSpecKey(parts[0], parts[1]);
  if (!key.ok()) return where(key.status());
  absl::StatusOr<SpecValue> value = ParseSpecValue(*key, text);
  if (!value.ok()) return where(value.status());
  if (absl::Status status = SetSpecValue(*key, *value, base_dir, spec); !status.ok()) {
    return where(status);
  }
  return absl::OkStatus();
}

absl::Status CheckJobSpecLocally(const JobSpec& spec) {
  JobSpec resolved = spec;
  ApplyJobSpecDefaults(&resolved);
  return ValidateJobSpec(resolved);
}

}  // namespace flame::client
