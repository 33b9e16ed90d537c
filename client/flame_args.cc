#include "client/flame_args.h"

#include <cstdint>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/spec_fields.h"

namespace flame::client {
namespace {

// flamectl's global options that take a value in the next argument (main.cc); they may come
// before the command, and their value must not be taken for it.
constexpr absl::string_view kGlobalOptionsWithValue[] = {"--addr", "--data-dir", "--token", "-o",
                                                         "--output"};

bool IsGlobalOptionWithValue(absl::string_view arg) {
  for (absl::string_view option : kGlobalOptionsWithValue) {
    if (arg == option) return true;
  }
  return false;
}

// "--training.steps=5" -> ("training.steps", "5"); "--training.varlen" -> ("training.varlen").
struct ArgumentName {
  std::string name;
  std::optional<std::string> inline_value;
};

std::optional<ArgumentName> ParseName(absl::string_view arg) {
  if (!absl::ConsumePrefix(&arg, "--")) return std::nullopt;
  const size_t equals = arg.find('=');
  const absl::string_view name = arg.substr(0, equals);
  if (!absl::StrContains(name, '.')) return std::nullopt;
  ArgumentName result{std::string(name), std::nullopt};
  if (equals != absl::string_view::npos) result.inline_value = std::string(arg.substr(equals + 1));
  return result;
}

bool IsBooleanText(absl::string_view text) { return text == "true" || text == "false"; }

// Whether `--name` (written without "=value") takes the next argument as its value: a boolean
// key only when that argument is true or false (flame's flags take none), any other key always,
// unless the next argument is another option (then the value is missing, which parsing reports).
bool TakesNextArgument(absl::string_view name, absl::string_view next) {
  if (absl::StartsWith(next, "--")) return false;
  const std::vector<absl::string_view> parts = absl::StrSplit(name, absl::MaxSplits('.', 1));
  if (parts.size() != 2) return true;
  absl::StatusOr<SpecKey> key = FindSpecKey(parts[0], parts[1]);
  if (key.ok() && key->field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_BOOL) {
    return IsBooleanText(next);
  }
  return true;
}

absl::Status ArgumentError(absl::string_view arg, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(arg, ": ", message));
}

}  // namespace

SplitCommandLine SplitFlameArguments(const std::vector<std::string>& argv) {
  SplitCommandLine split;
  size_t i = 0;
  bool submit = false;
  // Up to the command: global options (and their values) stay flamectl's.
  for (; i < argv.size(); ++i) {
    split.own.push_back(argv[i]);
    if (i == 0) continue;
    if (IsGlobalOptionWithValue(argv[i]) && i + 1 < argv.size()) {
      split.own.push_back(argv[++i]);
      continue;
    }
    if (absl::StartsWith(argv[i], "-")) continue;
    submit = argv[i] == "submit";
    ++i;
    break;
  }
  for (; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (submit && arg == "--") {
      split.flame.insert(split.flame.end(), argv.begin() + i + 1, argv.end());
      break;
    }
    const std::optional<ArgumentName> name = submit ? ParseName(arg) : std::nullopt;
    if (!name.has_value()) {
      split.own.push_back(arg);
      continue;
    }
    split.flame.push_back(arg);
    if (!name->inline_value && i + 1 < argv.size() && TakesNextArgument(name->name, argv[i + 1])) {
      split.flame.push_back(argv[++i]);
    }
  }
  return split;
}

absl::StatusOr<FlameArguments> ParseFlameArguments(const std::vector<std::string>& args) {
  FlameArguments parsed;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    std::optional<ArgumentName> name = ParseName(arg);
    if (!name.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unexpected argument \"", arg, "\": flame-style arguments are --section.key [value]"));
    }
    if (!name->inline_value && i + 1 < args.size() && TakesNextArgument(name->name, args[i + 1])) {
      name->inline_value = args[++i];
    }
    const std::string flag = absl::StrCat("--", name->name);
    if (name->name == "job.config_file") {
      if (!name->inline_value || name->inline_value->empty()) {
        return ArgumentError(flag, "needs the path of a TOML job file");
      }
      parsed.config_file = *name->inline_value;
      continue;
    }
    const std::vector<std::string> parts = absl::StrSplit(name->name, absl::MaxSplits('.', 1));
    absl::StatusOr<SpecKey> key = FindSpecKey(parts[0], parts[1]);
    if (!key.ok()) return ArgumentError(flag, key.status().message());
    const bool boolean = key->field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_BOOL;
    if (!name->inline_value && !boolean) {
      return ArgumentError(flag, absl::StrCat("needs a value (", ExpectedTypeName(*key), ")"));
    }
    parsed.overrides.push_back({key->FullName(), name->inline_value});
  }
  return parsed;
}

absl::Status ApplyFlameArguments(const FlameArguments& args, const std::string& base_dir,
                                 flame::v1::JobSpec* spec) {
  for (const FlameArgument& argument : args.overrides) {
    const std::string flag = absl::StrCat("--", argument.key);
    const std::vector<std::string> parts = absl::StrSplit(argument.key, absl::MaxSplits('.', 1));
    absl::StatusOr<SpecKey> key = FindSpecKey(parts[0], parts[1]);
    if (!key.ok()) return ArgumentError(flag, key.status().message());
    // A flag alone is flame's store_true.
    absl::StatusOr<SpecValue> value = ParseSpecValue(*key, argument.value.value_or("true"));
    if (!value.ok()) return ArgumentError(flag, value.status().message());
    if (absl::Status status = SetSpecValue(*key, *value, base_dir, spec); !status.ok()) {
      return ArgumentError(flag, status.message());
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyNgpu(const std::optional<std::string>& ngpu, flame::v1::JobSpec* spec) {
  if (!ngpu.has_value() || spec->resources().has_ranks()) return absl::OkStatus();
  int64_t ranks = 0;
  if (!absl::SimpleAtoi(*ngpu, &ranks) || ranks <= 0 ||
      ranks > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("NGPU must be a positive integer (got \"", *ngpu,
                                                   "\"); it sets resources.ranks"));
  }
  spec->mutable_resources()->set_ranks(static_cast<int32_t>(ranks));
  return absl::OkStatus();
}

}  // namespace flame::client
