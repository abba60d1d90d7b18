// One pass over /proc: every process, its namespaces, and which of them hold
// files on the given devices (open fds and mappings, by device:inode).
//
// Every task is looked at, not only thread-group leaders: a thread with a
// private fd table (unshare(CLONE_FILES)) and the workers of an exited
// (zombie) leader hold files that /proc/<pid>/fd and /proc/<pid>/maps do not
// show. Processes forked during the pass are read in further passes (see
// ScanProcesses). A process that cannot be read is skipped: the scan's
// holders are a lower bound, which is why reclaim does not rely on them alone
// (reclaim.h).
//
// Pids are namespace-local and reused: a process is identified by host pid
// plus start time, and namespace-local pids are resolved through NSpid.
#pragma once

#include <sys/types.h>

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace shmkeeper {

struct FileKey {
  dev_t dev = 0;
  ino_t ino = 0;
  auto operator<=>(const FileKey&) const = default;
};

// What the scan reads of every process; the rest (command, start time, IPC
// namespace) is read on demand for the few processes that matter.
struct ProcInfo {
  pid_t pid = 0;  // host pid
  ino_t pid_ns = 0;
  pid_t ns_pid = 0;  // pid in its own (innermost) pid namespace
  ino_t mnt_ns = 0;  // its mount namespace (0: could not be read)
};

struct HolderRef {
  pid_t pid = 0;
  bool mapped = false;   // a mapping (else an open fd)
  int64_t bytes = 0;     // st_blocks * 512 of the held file (fd holders)
  bool deleted = false;  // the fd's file has been unlinked
};

struct ProcTable {
  std::vector<ProcInfo> procs;                        // sorted by pid
  std::map<FileKey, std::vector<HolderRef>> holders;  // files on the scanned devices only

  const ProcInfo* Find(pid_t pid) const;
  // The host pid of `ns_pid` in pid namespace `pid_ns`, or 0 when no live
  // process has it.
  pid_t HostPid(ino_t pid_ns, pid_t ns_pid) const;
  // The IPC namespace inode of `pid` (read on demand; 0 when gone).
  ino_t IpcNs(pid_t pid) const;
  std::string proc = "/proc";
  ino_t self_pid_ns = 0;  // the scanning process's pid namespace
};

// Scans `proc` (normally "/proc"), on `threads` threads. Only files on
// `devices` are recorded as held. Processes that vanish mid-scan are skipped.
// After the pass the pid list is read again and new pids are scanned, until
// no new pid appears (at most 4 passes).
ProcTable ScanProcesses(const std::set<dev_t>& devices, const std::string& proc = "/proc", unsigned threads = 0);

// The holders of `keys` only, scanned afresh (reclaim's final re-check). The
// calling process's descriptors in `own_fds` are not counted.
std::map<FileKey, std::vector<HolderRef>> ScanHolders(const std::set<FileKey>& keys, const std::string& proc = "/proc",
                                                      const std::set<int>& own_fds = {});

// One process's ProcInfo, read now (no scan); none when it is gone.
std::optional<ProcInfo> ReadProcInfo(pid_t pid, const std::string& proc = "/proc");

// The pid of `pid` in its own (innermost) pid namespace; 0 when it is gone.
pid_t NamespacePid(pid_t pid, const std::string& proc = "/proc");

// Whether process `pid` (any of its threads) has `key` open or mapped now.
// The leader's descriptors are read first, and an answer there ends it.
bool ProcessHolds(pid_t pid, const FileKey& key, const std::string& proc = "/proc");

// /proc/<pid>/cmdline joined with spaces (comm when empty).
std::string ProcCommand(pid_t pid, const std::string& proc = "/proc");

// Reads /proc/<pid>/stat: comm and start time. False when the process is gone.
bool ReadProcStat(pid_t pid, std::string* comm, uint64_t* start_ticks, const std::string& proc = "/proc");

}  // namespace shmkeeper
