#include "client/spec_fields.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/suggest.h"

namespace flame::client {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// flame's store_false alias: `--checkpoint.no_initial_load_model_weights_only` sets
// checkpoint.initial_load_model_weights_only to false. The alias is not a JobSpec field.
struct NegatedAlias {
  absl::string_view section;
  absl::string_view alias;
  absl::string_view field;
};
constexpr NegatedAlias kNegatedAliases[] = {
    {"checkpoint", "no_initial_load_model_weights_only", "initial_load_model_weights_only"},
};

// flame's string_list options and per-dataset lists: comma-separated, and in a job file also
// a TOML array, whose elements are joined with commas.
constexpr absl::string_view kListKeys[] = {
    "model.converters",
    "training.dataset",
    "training.dataset_name",
    "training.dataset_split",
    "training.data_dir",
    "training.data_files",
    "training.data_probs",
    "experimental.pipeline_parallel_split_points",
    "checkpoint.exclude_from_loading",
    "metrics.eval_dataset",
};

// Keys whose values are paths; `true` marks a comma-separated list of paths.
struct PathKey {
  absl::string_view name;
  bool is_list;
};
constexpr PathKey kPathKeys[] = {
    {"job.dump_folder", false},
    {"job.config_file", false},
    {"model.config", false},
    {"model.tokenizer_path", false},
    {"training.dataset", true},
    {"checkpoint.initial_load_path", false},
    {"metrics.eval_dataset", true},
};

const Descriptor* SpecDescriptor() { return flame::v1::JobSpec::descriptor(); }

// JobSpec's field named `section` if it is a section (a message field), else null.
const FieldDescriptor* FindSection(absl::string_view section) {
  const FieldDescriptor* field = SpecDescriptor()->FindFieldByName(std::string(section));
  if (field == nullptr || field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) return nullptr;
  return field;
}

std::vector<std::string> SectionNames() {
  std::vector<std::string> names;
  for (int i = 0; i < SpecDescriptor()->field_count(); ++i) {
    const FieldDescriptor* field = SpecDescriptor()->field(i);
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) names.push_back(field->name());
  }
  return names;
}

absl::Status UnknownSection(absl::string_view section) {
  std::string message = absl::StrCat("unknown section [", section, "]");
  if (std::optional<std::string> match = ClosestMatch(section, SectionNames())) {
    absl::StrAppend(&message, " (did you mean [", *match, "]?)");
  }
  return absl::InvalidArgumentError(message);
}

std::string Quoted(absl::string_view text) { return absl::StrCat("\"", text, "\""); }

std::string DescribeValue(const SpecValue& value) {
  if (const auto* b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  if (const auto* i = std::get_if<int64_t>(&value)) return absl::StrCat(*i);
  if (const auto* d = std::get_if<double>(&value)) return absl::StrCat(*d);
  return absl::StrCat("the string ", Quoted(std::get<std::string>(value)));
}

absl::Status WrongType(const SpecKey& key, const SpecValue& value) {
  return absl::InvalidArgumentError(absl::StrCat(key.FullName(), " must be ", ExpectedTypeName(key),
                                                 " (got ", DescribeValue(value), ")"));
}

std::string MakeAbsolute(absl::string_view path, const std::string& base_dir) {
  std::string text(absl::StripAsciiWhitespace(path));
  if (text.empty()) return text;
  if (absl::StartsWith(text, "~/")) {
    if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
      text = absl::StrCat(home, text.substr(1));
    }
  }
  std::filesystem::path result(text);
  if (result.is_relative()) result = std::filesystem::path(base_dir) / result;
  return result.lexically_normal().string();
}

std::string ResolvePathValue(const SpecKey& key, const std::string& value,
                             const std::string& base_dir) {
  const std::string name = key.FullName();
  for (const PathKey& path_key : kPathKeys) {
    if (path_key.name != name) continue;
    if (!path_key.is_list) return MakeAbsolute(value, base_dir);
    std::vector<std::string> parts;
    for (absl::string_view part : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
      parts.push_back(MakeAbsolute(part, base_dir));
    }
    return absl::StrJoin(parts, ",");
  }
  return value;
}

}  // namespace

std::string SpecKey::FullName() const {
  return absl::StrCat(section->name(), ".", negated ? "no_" : "", field->name());
}

absl::Status CheckSection(absl::string_view section) {
  if (FindSection(section) != nullptr) return absl::OkStatus();
  return UnknownSection(section);
}

absl::StatusOr<SpecKey> FindSpecKey(absl::string_view section, absl::string_view key) {
  const FieldDescriptor* section_field = FindSection(section);
  if (section_field == nullptr) return UnknownSection(section);
  const Descriptor* fields = section_field->message_type();
  for (const NegatedAlias& alias : kNegatedAliases) {
    if (alias.section == section && alias.alias == key) {
      return SpecKey{section_field, fields->FindFieldByName(std::string(alias.field)),
                     /*negated=*/true};
    }
  }
  const FieldDescriptor* field = fields->FindFieldByName(std::string(key));
  if (field == nullptr) {
    std::string message = absl::StrCat("unknown key ", section, ".", key);
    if (std::optional<std::string> match = SuggestSpecKey(section, key)) {
      absl::StrAppend(&message, " (did you mean ", *match, "?)");
    }
    return absl::InvalidArgumentError(message);
  }
  if (field->is_repeated() || field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    // JobSpec sections hold scalars only; a new kind of field needs support here first.
    return absl::InternalError(absl::StrCat(section, ".", key, " cannot be set by flamectl"));
  }
  return SpecKey{section_field, field};
}

std::vector<std::string> AllSpecKeys() {
  std::vector<std::string> keys;
  for (const std::string& section : SectionNames()) {
    const Descriptor* message = FindSection(section)->message_type();
    for (int i = 0; i < message->field_count(); ++i) {
      keys.push_back(absl::StrCat(section, ".", message->field(i)->name()));
    }
    for (const NegatedAlias& alias : kNegatedAliases) {
      if (alias.section == section) keys.push_back(absl::StrCat(section, ".", alias.alias));
    }
  }
  return keys;
}

std::optional<std::string> SuggestSpecKey(absl::string_view section, absl::string_view key) {
  for (const std::string& name : SectionNames()) {
    if (name != section && FindSection(name)->message_type()->FindFieldByName(std::string(key))) {
      return absl::StrCat(name, ".", key);
    }
  }
  if (section.empty()) return ClosestMatch(key, AllSpecKeys());
  return ClosestMatch(absl::StrCat(section, ".", key), AllSpecKeys());
}

std::string ExpectedTypeName(const SpecKey& key) {
  switch (key.field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
      return "an integer";
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT:
      return "a number";
    case FieldDescriptor::CPPTYPE_BOOL:
      return "a boolean";
    default:
      return "a string";
  }
}

absl::Status SetSpecValue(const SpecKey& key, const SpecValue& value, const std::string& base_dir,
                          flame::v1::JobSpec* spec) {
  Message* section = spec->GetReflection()->MutableMessage(spec, key.section);
  const Reflection* reflection = section->GetReflection();
  const auto* integer = std::get_if<int64_t>(&value);
  switch (key.field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT64:
      if (integer == nullptr) return WrongType(key, value);
      reflection->SetInt64(section, key.field, *integer);
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_INT32:
      if (integer == nullptr) return WrongType(key, value);
      if (*integer < std::numeric_limits<int32_t>::min() ||
          *integer > std::numeric_limits<int32_t>::max()) {
        return absl::InvalidArgumentError(
            absl::StrCat(key.FullName(), " is out of range (got ", *integer, ")"));
      }
      reflection->SetInt32(section, key.field, static_cast<int32_t>(*integer));
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      const auto* real = std::get_if<double>(&value);
      if (integer == nullptr && real == nullptr) return WrongType(key, value);
      const double number = real != nullptr ? *real : static_cast<double>(*integer);
      if (!std::isfinite(number)) {
        return absl::InvalidArgumentError(
            absl::StrCat(key.FullName(), " must be a finite number (got ", number, ")"));
      }
      reflection->SetDouble(section, key.field, number);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      const auto* flag = std::get_if<bool>(&value);
      if (flag == nullptr) return WrongType(key, value);
      reflection->SetBool(section, key.field, key.negated ? !*flag : *flag);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      const auto* text = std::get_if<std::string>(&value);
      if (text == nullptr) return WrongType(key, value);
      reflection->SetString(section, key.field, ResolvePathValue(key, *text, base_dir));
      return absl::OkStatus();
    }
    default:
      return absl::InternalError(absl::StrCat(key.FullName(), " has a type flamectl cannot set"));
  }
}

absl::StatusOr<SpecValue> ParseSpecValue(const SpecKey& key, absl::string_view text) {
  const absl::string_view trimmed = absl::StripAsciiWhitespace(text);
  auto wrong = [&key, text]() {
    return absl::InvalidArgumentError(absl::StrCat(
        key.FullName(), " must be ", ExpectedTypeName(key), " (got ", Quoted(text), ")"));
  };
  switch (key.field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64: {
      int64_t integer = 0;
      if (!absl::SimpleAtoi(trimmed, &integer)) return wrong();
      return SpecValue(integer);
    }
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      double number = 0;
      if (!absl::SimpleAtod(trimmed, &number)) return wrong();
      return SpecValue(number);
    }
    case FieldDescriptor::CPPTYPE_BOOL:
      if (trimmed == "true") return SpecValue(true);
      if (trimmed == "false") return SpecValue(false);
      return wrong();
    default:
      // A value copied from TOML may keep its quotes: name="demo" means the string demo.
      if (text.size() >= 2 && text.front() == '"' && text.back() == '"') {
        text = text.substr(1, text.size() - 2);
      }
      return SpecValue(std::string(text));
  }
}

bool IsListKey(const SpecKey& key) {
  const std::string name = key.FullName();
  for (absl::string_view list_key : kListKeys) {
    if (list_key == name) return true;
  }
  return false;
}

bool IsPathKey(const SpecKey& key) {
  const std::string name = key.FullName();
  for (const PathKey& path_key : kPathKeys) {
    if (path_key.name == name) return true;
  }
  return false;
}

}  // namespace flame::client
