// README.md's "Configuration keys" table against the JobSpec proto: every key flamectl accepts
// has exactly one row, no row names a key that does not exist, and each row's type and default
// are the field's. This keeps the one table of keys from drifting when JobSpec changes.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/spec_fields.h"
#include "common/files.h"
#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flame::client {
namespace {

// One row: | section | key | type | default | status |.
struct Row {
  std::string type;
  std::string default_value;
  std::string status;
};

// The rows of the table under "## Configuration keys", by "section.key" (backticks removed).
std::map<std::string, Row> ReadConfigTable(const std::string& readme,
                                           std::vector<std::string>* duplicates) {
  std::map<std::string, Row> rows;
  bool in_section = false;
  for (absl::string_view line : absl::StrSplit(readme, '\n')) {
    if (absl::StartsWith(line, "## ")) in_section = line == "## Configuration keys";
    if (!in_section || !absl::StartsWith(line, "|") || absl::StartsWith(line, "| section") ||
        absl::StartsWith(line, "| ---")) {
      continue;
    }
    std::vector<std::string> cells;
    for (absl::string_view cell : absl::StrSplit(line, '|')) {
      cells.emplace_back(absl::StripAsciiWhitespace(cell));
    }
    // A leading and a trailing empty cell around the five columns.
    if (cells.size() != 7) {
      ADD_FAILURE() << "a row of the configuration table needs 5 cells: " << line;
      continue;
    }
    const auto unquote = [](std::string text) {
      absl::StrReplaceAll({{"`", ""}}, &text);
      return text;
    };
    const std::string key = unquote(cells[1]) + "." + unquote(cells[2]);
    if (rows.contains(key)) duplicates->push_back(key);
    rows[key] = Row{cells[3], cells[4], cells[5]};
  }
  return rows;
}

std::string TypeOf(const SpecKey& key) {
  if (IsListKey(key)) return "list";
  switch (key.field->cpp_type()) {
    case google::protobuf::FieldDescriptor::CPPTYPE_INT32:
    case google::protobuf::FieldDescriptor::CPPTYPE_INT64:
      return "int";
    case google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE:
      return "float";
    case google::protobuf::FieldDescriptor::CPPTYPE_BOOL:
      return "bool";
    default:
      return "str";
  }
}

// Whether the README's default cell says what ApplyJobSpecDefaults gives an empty spec. Cells
// for values flamed or the user must supply (`required`, a `<...>` path, the alias's `–`) are
// not compared; `unset` means flame's None, which stays unset.
void ExpectDocumentedDefault(const SpecKey& key, std::string cell) {
  absl::StrReplaceAll({{"`", ""}, {"★", ""}}, &cell);
  cell = std::string(absl::StripAsciiWhitespace(cell));
  if (key.negated || absl::StrContains(cell, "required") || absl::StrContains(cell, "<")) return;
  flame::v1::JobSpec spec;
  ApplyJobSpecDefaults(&spec);
  const google::protobuf::Message& section = spec.GetReflection()->GetMessage(spec, key.section);
  const google::protobuf::Reflection* reflection = section.GetReflection();
  const std::string name = key.FullName();
  if (cell == "unset") {
    EXPECT_FALSE(reflection->HasField(section, key.field)) << name << " has a default";
    return;
  }
  ASSERT_TRUE(reflection->HasField(section, key.field)) << name << " has no default";
  switch (key.field->cpp_type()) {
    case google::protobuf::FieldDescriptor::CPPTYPE_INT32:
      EXPECT_EQ(cell, absl::StrCat(reflection->GetInt32(section, key.field))) << name;
      break;
    case google::protobuf::FieldDescriptor::CPPTYPE_INT64:
      EXPECT_EQ(cell, absl::StrCat(reflection->GetInt64(section, key.field))) << name;
      break;
    case google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE: {
      double documented = 0;
      EXPECT_TRUE(absl::SimpleAtod(cell, &documented)) << name << ": " << cell;
      EXPECT_DOUBLE_EQ(documented, reflection->GetDouble(section, key.field)) << name;
      break;
    }
    case google::protobuf::FieldDescriptor::CPPTYPE_BOOL:
      EXPECT_EQ(cell, reflection->GetBool(section, key.field) ? "true" : "false") << name;
      break;
    default: {
      const std::string value = reflection->GetString(section, key.field);
      EXPECT_EQ(cell == "empty" || cell == "\"\"" ? "" : cell, value) << name;
    }
  }
}

TEST(ReadmeTable, ListsEveryJobSpecKeyOnceWithItsType) {
  absl::StatusOr<std::string> readme = ReadFileToString(FLAME_SOURCE_DIR "/README.md");
  ASSERT_TRUE(readme.ok()) << readme.status();
  std::vector<std::string> duplicates;
  std::map<std::string, Row> rows = ReadConfigTable(*readme, &duplicates);
  EXPECT_THAT(duplicates, ::testing::IsEmpty());
  for (const std::string& name : AllSpecKeys()) {
    auto row = rows.find(name);
    if (row == rows.end()) {
      ADD_FAILURE() << name << " has no row in README.md's configuration table";
      continue;
    }
    const std::vector<std::string> parts = absl::StrSplit(name, '.');
    absl::StatusOr<SpecKey> key = FindSpecKey(parts[0], parts[1]);
    ASSERT_TRUE(key.ok()) << key.status();
    EXPECT_EQ(row->second.type, TypeOf(*key)) << name;
    ExpectDocumentedDefault(*key, row->second.default_value);
    EXPECT_FALSE(row->second.status.empty()) << name << " needs a status";
    rows.erase(row);
  }
  rows.erase(".name");  // the top-level label, not a section key
  for (const auto& [name, row] : rows) {
    ADD_FAILURE() << "README.md's configuration table names " << name << ", which is no key";
  }
}

}  // namespace
}  // namespace flame::client
