// Reading /proc: processes by name and their command lines.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/status.h"

namespace shmkeeper {

// The argv of `pid` (from /proc/<pid>/cmdline).
Result<std::vector<std::string>> ProcCmdline(pid_t pid, const std::string& proc_root = "/proc");

// Pids whose /proc/<pid>/comm equals `comm`.
std::vector<pid_t> FindProcessesByComm(const std::string& comm, const std::string& proc_root = "/proc");

// The value of `--flag VALUE` or `--flag=VALUE` (also -flag) in argv, or "".
std::string FlagValue(const std::vector<std::string>& argv, const std::string& flag);

}  // namespace shmkeeper
