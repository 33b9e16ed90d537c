// Streams documents, in a fixed order, out of local JSONL and plain-text files.
//
// Formats (chosen by extension):
//   .jsonl / .json  one JSON object per line; the document is its string field "text", else
//                   "content" (flame's two column names). Blank lines are not documents.
//   anything else   plain text. A document is a paragraph: a run of non-blank lines, ended by a
//                   blank line or the end of the file. (HF's text loader makes every *line* a
//                   document, which for wrapped prose puts a BOS every 80 characters; paragraphs
//                   keep a fortune, a poem stanza or a README section together.)
// A folder stands for the matching files under it (recursively, sorted by path, hidden files
// skipped). Compressed files are refused by name.
//
// The reader's cursor (file, byte offset, document index) is a few integers: a data position in
// a checkpoint stores it, and Seek returns to it in O(1) without rereading earlier files.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace flame::worker {

struct DocumentCursor {
  int64_t file_index = 0;
  int64_t byte_offset = 0;  // of the next unread line in that file
  int64_t doc_index = 0;    // index, in the whole corpus, of the next document
};

class DocumentReader {
 public:
  // Expands folders and checks that every file can be opened.
  static absl::StatusOr<DocumentReader> Open(const std::vector<std::string>& paths);

  DocumentReader(DocumentReader&&) = default;
  DocumentReader& operator=(DocumentReader&&) = default;

  // Reads the next document. With `text` null the document is only skipped (JSON is not parsed),
  // which is how a rank steps over other ranks' documents cheaply. Returns false at the end of
  // the corpus; the cursor then stays at the end until Seek.
  absl::StatusOr<bool> Next(std::string* text);

  absl::Status Seek(const DocumentCursor& cursor);
  const DocumentCursor& cursor() const { return cursor_; }
  const std::vector<std::string>& files() const { return files_; }

 private:
  explicit DocumentReader(std::vector<std::string> files) : files_(std::move(files)) {}

  absl::Status OpenCurrentFile();
  // One line without its terminator ("\n" or "\r\n"); false at end of file.
  bool ReadLine(std::string* line);
  absl::StatusOr<bool> NextJsonl(std::string* text);
  absl::StatusOr<bool> NextParagraph(std::string* text);
  bool CurrentIsJsonl() const;

  std::vector<std::string> files_;
  DocumentCursor cursor_;
  std::ifstream stream_;
  int64_t open_file_ = -1;  // index of the file stream_ has open
};

}  // namespace flame::worker
