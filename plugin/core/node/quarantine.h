// Quarantine names of the reclaim protocol (reclaim.h): a candidate is renamed
// to kQuarantinePrefix + the agent's identity + "." + its name in its own
// directory while it is checked. The prefix is reserved in every shm
// directory the agent watches: a file named so is renamed back to its
// original name by the next scan, which is how a crash in the middle of a
// reclaim never leaves a file hidden. A scan restores its own agent's names
// at once (its reclaims never run during its scans) and another agent's (or
// a name without an identity) only once it has been in quarantine for
// kForeignQuarantineAge, far longer than any claim lasts: so a restore never
// races another agent's reclaim.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "base/status.h"

namespace shmkeeper {

inline constexpr std::string_view kQuarantinePrefix = ".shmkeeper-reclaim.";

inline constexpr int64_t kForeignQuarantineAgeSec = 60;

// The quarantine name of `base` (a single path component) whose inode is
// `ino`, for the agent `agent_id` (8 hex digits, or "" in tests: no identity):
// kQuarantinePrefix + agent_id + "." + base, or, when that would exceed
// NAME_MAX, kQuarantinePrefix + agent_id + ".#" + ino with the name kept in
// the file's kQuarantineXattr (set by the caller before the rename).
std::string QuarantineName(const std::string& base, uint64_t ino, const std::string& agent_id = "");
bool NeedsNameXattr(const std::string& quarantine_name);
inline constexpr const char* kQuarantineXattr = "trusted.shmkeeper.name";

bool IsQuarantineName(std::string_view base);
// The agent identity in a quarantine name ("" when it has none).
std::string QuarantineOwner(std::string_view base);

// Renames each file of `rel_paths` (relative to the directory open at
// `root_fd`, each with a quarantine base name) back to its original name,
// never replacing an existing file and never following a symlink: names of
// `agent_id` at once, others once their ctime is kForeignQuarantineAgeSec
// old by `clock`'s calendar (not owned). A name kept in kQuarantineXattr that
// is itself a quarantine name, or not one path component, is refused. Returns
// how many were restored; the others keep their quarantine name.
int RestoreQuarantined(int root_fd, const std::vector<std::string>& rel_paths, const std::string& agent_id = "",
                       Clock* clock = RealClock());

// Renames `quarantine_name` in `dir_fd` back to `original`, or, when a new
// file took that name meanwhile, to `original` + "~" + `ino` (shortened to
// fit NAME_MAX), so that no file stays hidden under a quarantine name.
// Never replaces a file.
Status RenameBack(int dir_fd, const std::string& quarantine_name, const std::string& original, uint64_t ino);

// renameat2(RENAME_NOREPLACE) between two names of one directory.
Status RenameNoReplace(int dir_fd, const std::string& from, const std::string& to);

}  // namespace shmkeeper
