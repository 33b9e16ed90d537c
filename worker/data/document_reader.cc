#include "worker/data/document_reader.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace flame::worker {
namespace {

namespace fs = std::filesystem;

bool HasSuffix(const std::string& path, const char* suffix) {
  return absl::EndsWithIgnoreCase(path, suffix);
}

bool IsJsonl(const std::string& path) {
  return HasSuffix(path, ".jsonl") || HasSuffix(path, ".json");
}

bool IsCompressed(const std::string& path) {
  for (const char* suffix : {".gz", ".zst", ".bz2", ".xz", ".lz4", ".zip"}) {
    if (HasSuffix(path, suffix)) return true;
  }
  return false;
}

// Files a folder contributes: text-like names only, so that a stray index or binary file in a
// data folder is not read as text.
bool IsCorpusFile(const fs::path& path) {
  const std::string name = path.filename().string();
  if (name.empty() || name[0] == '.') return false;
  for (const char* suffix : {".jsonl", ".json", ".txt", ".text", ".md"}) {
    if (HasSuffix(name, suffix)) return true;
  }
  return false;
}

absl::Status ExpandPath(const std::string& path, std::vector<std::string>* files) {
  std::error_code error;
  if (fs::is_directory(path, error)) {
    std::vector<std::string> found;
    for (const auto& entry : fs::recursive_directory_iterator(path, error)) {
      if (entry.is_regular_file() && IsCorpusFile(entry.path())) {
        found.push_back(entry.path().string());
      }
    }
    if (error)
      return absl::InternalError(absl::StrCat("cannot list ", path, ": ", error.message()));
    if (found.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("training.dataset folder has no .jsonl/.json/.txt/.md files: ", path));
    }
    std::sort(found.begin(), found.end());
    files->insert(files->end(), found.begin(), found.end());
    return absl::OkStatus();
  }
  if (!fs::is_regular_file(path, error)) {
    return absl::NotFoundError(absl::StrCat("training.dataset names a missing file: ", path));
  }
  if (IsCompressed(path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.dataset: compressed files are not supported yet: ", path));
  }
  files->push_back(path);
  return absl::OkStatus();
}

// The document text of one JSONL line: field "text", else "content".
absl::StatusOr<std::string> JsonlText(const std::string& line, const std::string& where) {
  const nlohmann::json row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (row.is_discarded())
    return absl::InvalidArgumentError(absl::StrCat(where, ": not valid JSON"));
  for (const char* field : {"text", "content"}) {
    if (row.is_object() && row.contains(field) && row.at(field).is_string()) {
      return row.at(field).get<std::string>();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": expected an object with a string \"text\" or \"content\" field"));
}

bool IsBlank(const std::string& line) {
  return std::all_of(line.begin(), line.end(),
                     [](unsigned char c) { return absl::ascii_isspace(c); });
}

}  // namespace

absl::StatusOr<DocumentReader> DocumentReader::Open(const std::vector<std::string>& paths) {
  if (paths.empty()) return absl::InvalidArgumentError("training.dataset is empty");
  std::vector<std::string> files;
  for (const std::string& path : paths) FLAME_RETURN_IF_ERROR(ExpandPath(path, &files));
  DocumentReader reader(std::move(files));
  FLAME_RETURN_IF_ERROR(reader.Seek(DocumentCursor{}));
  return reader;
}

bool DocumentReader::CurrentIsJsonl() const { return IsJsonl(files_[cursor_.file_index]); }

absl::Status DocumentReader::OpenCurrentFile() {
  if (open_file_ == cursor_.file_index && stream_.is_open()) return absl::OkStatus();
  stream_.close();
  stream_.clear();
  const std::string& path = files_[cursor_.file_index];
  stream_.open(path, std::ios::binary);
  if (!stream_) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  open_file_ = cursor_.file_index;
  return absl::OkStatus();
}

absl::Status DocumentReader::Seek(const DocumentCursor& cursor) {
  if (cursor.file_index < 0 || cursor.file_index > static_cast<int64_t>(files_.size()) ||
      cursor.byte_offset < 0 || cursor.doc_index < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data position out of range: file ", cursor.file_index, " offset ", cursor.byte_offset));
  }
  cursor_ = cursor;
  if (cursor_.file_index == static_cast<int64_t>(files_.size())) return absl::OkStatus();  // end
  FLAME_RETURN_IF_ERROR(OpenCurrentFile());
  stream_.clear();
  stream_.seekg(cursor_.byte_offset);
  if (!stream_) {
    return absl::OutOfRangeError(absl::StrCat("data position beyond the end of ",
                                              files_[cursor_.file_index], " (offset ",
                                              cursor_.byte_offset, "): did the file change?"));
  }
  return absl::OkStatus();
}

bool DocumentReader::ReadLine(std::string* line) {
  if (!std::getline(stream_, *line)) return false;
  // getline consumed the line and its '\n' (absent only on a last line without one).
  cursor_.byte_offset += static_cast<int64_t>(line->size()) + (stream_.eof() ? 0 : 1);
  if (!line->empty() && line->back() == '\r') line->pop_back();
  return true;
}

absl::StatusOr<bool> DocumentReader::NextJsonl(std::string* text) {
  std::string line;
  while (true) {
    const int64_t line_offset = cursor_.byte_offset;
    if (!ReadLine(&line)) return false;
    if (IsBlank(line)) continue;
    if (text != nullptr) {
      const std::string where =
          absl::StrCat(files_[cursor_.file_index], " (byte ", line_offset, ")");
      FLAME_ASSIGN_OR_RETURN(*text, JsonlText(line, where));
    }
    return true;
  }
}

absl::StatusOr<bool> DocumentReader::NextParagraph(std::string* text) {
  std::string line;
  bool found = false;
  if (text != nullptr) text->clear();
  while (ReadLine(&line)) {
    if (IsBlank(line)) {
      if (found) return true;
      continue;
    }
    if (text != nullptr) {
      if (found) text->push_back('\n');
      text->append(line);
    }
    found = true;
  }
  return found;
}

absl::StatusOr<bool> DocumentReader::Next(std::string* text) {
  while (cursor_.file_index < static_cast<int64_t>(files_.size())) {
    FLAME_RETURN_IF_ERROR(OpenCurrentFile());
    FLAME_ASSIGN_OR_RETURN(const bool found,
                           CurrentIsJsonl() ? NextJsonl(text) : NextParagraph(text));
    if (stream_.bad()) {
      return absl::DataLossError(absl::StrCat("read error in ", files_[cursor_.file_index]));
    }
    if (found) {
      ++cursor_.doc_index;
      return true;
    }
    ++cursor_.file_index;  // this file is exhausted
    cursor_.byte_offset = 0;
    if (cursor_.file_index < static_cast<int64_t>(files_.size())) {
      FLAME_RETURN_IF_ERROR(OpenCurrentFile());
      stream_.clear();
      stream_.seekg(0);
    }
  }
  return false;
}

}  // namespace flame::worker
