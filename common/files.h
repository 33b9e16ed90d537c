// File helpers with the durability the job store and checkpoints rely on.
#pragma once

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace flame {

absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Writes `contents` to `path` so that a reader sees either the old file or the whole new one,
// also across a crash: write to a temporary sibling, fsync it, rename, fsync the directory.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

// mkdir -p.
absl::Status MakeDirectories(const std::string& path);

// fsync of a file or directory by path (directories make renames inside them durable).
absl::Status SyncPath(const std::string& path);

bool PathExists(const std::string& path);

// Size of a regular file in bytes.
absl::StatusOr<int64_t> FileSize(const std::string& path);

// `path` made absolute against the current working directory (no symlink resolution).
std::string AbsolutePath(const std::string& path);

// The default per-user state directory for flamed: $XDG_STATE_HOME/flame, else
// $HOME/.local/state/flame.
std::string DefaultDataDirectory();

}  // namespace flame
