// Quarantine names of the reclaim protocol (reclaim.h): a candidate is renamed
// to kQuarantinePrefix + its name in its own directory while it is checked.
// The prefix is reserved in every shm directory the agent watches: a file
// named so is renamed back to its original name by the next scan, which is
// how a crash in the middle of a reclaim never leaves a file hidden.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace shmkeeper {

inline constexpr std::string_view kQuarantinePrefix = ".shmkeeper-reclaim.";

// The quarantine name of `base` (a single path component) whose inode is
// `ino`: kQuarantinePrefix + base, or, when that would exceed NAME_MAX,
// kQuarantinePrefix + "#" + ino with the name kept in the file's
// kQuarantineXattr (set by the caller before the rename).
std::string QuarantineName(const std::string& base, uint64_t ino);
bool NeedsNameXattr(const std::string& quarantine_name);
inline constexpr const char* kQuarantineXattr = "trusted.shmkeeper.name";

bool IsQuarantineName(std::string_view base);

// Renames each file of `rel_paths` (relative to the directory open at
// `root_fd`, each with a quarantine base name) back to its original name,
// never replacing an existing file and never following a symlink. Returns
// how many were restored; the others keep their quarantine name.
int RestoreQuarantined(int root_fd, const std::vector<std::string>& rel_paths);

// Renames `quarantine_name` in `dir_fd` back to `original`, or, when a new
// file took that name meanwhile, to `original` + "~" + `ino` (shortened to
// fit NAME_MAX), so that no file stays hidden under a quarantine name.
// Never replaces a file.
Status RenameBack(int dir_fd, const std::string& quarantine_name, const std::string& original, uint64_t ino);

// renameat2(RENAME_NOREPLACE) between two names of one directory.
Status RenameNoReplace(int dir_fd, const std::string& from, const std::string& to);

}  // namespace shmkeeper
