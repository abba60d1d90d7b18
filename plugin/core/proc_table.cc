#include "shmkeeper/proc_table.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "shmkeeper/fileutil.h"

namespace shmkeeper {
namespace {

using DirPtr = std::unique_ptr<DIR, int (*)(DIR*)>;

std::vector<pid_t> ListPids(const std::string& proc) {
  std::vector<pid_t> pids;
  DirPtr dir(::opendir(proc.c_str()), ::closedir);
  if (!dir) return pids;
  while (struct dirent* e = ::readdir(dir.get())) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid > 0 && *end == '\0') pids.push_back(static_cast<pid_t>(pid));
  }
  std::sort(pids.begin(), pids.end());
  return pids;
}

ino_t NsInode(const std::string& base, const char* ns) {
  struct stat st;
  return ::stat((base + "/ns/" + ns).c_str(), &st) == 0 ? st.st_ino : 0;
}

// The last NSpid column of /proc/<pid>/status: the pid in its own namespace.
pid_t InnermostPid(const std::string& base, pid_t fallback) {
  Result<std::string> status = ReadFile(base + "/status", 1 << 16);
  if (!status.ok()) return fallback;
  size_t at = status->find("\nNSpid:");
  if (at == std::string::npos) return fallback;
  size_t end = status->find('\n', at + 1);
  std::string line = status->substr(at + 7, end - at - 7);
  size_t last = line.find_last_of(" \t");
  return static_cast<pid_t>(std::atol(line.c_str() + (last == std::string::npos ? 0 : last + 1)));
}

// Open fds that refer to files on `devices`.
template <typename Want>
void ScanFds(const std::string& base, pid_t pid, const Want& want,
             std::map<FileKey, std::vector<HolderRef>>* out) {
  std::string fd_dir = base + "/fd";
  UniqueFd dfd(::open(fd_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dfd.valid()) return;
  DirPtr dir(::fdopendir(::dup(dfd.get())), ::closedir);
  if (!dir) return;
  while (struct dirent* e = ::readdir(dir.get())) {
    if (e->d_name[0] == '.') continue;
    struct stat st;
    if (::fstatat(dfd.get(), e->d_name, &st, 0) != 0 || !S_ISREG(st.st_mode)) continue;
    FileKey key{st.st_dev, st.st_ino};
    if (!want(key)) continue;
    (*out)[key].push_back(HolderRef{pid, false, static_cast<int64_t>(st.st_blocks) * 512, st.st_nlink == 0});
  }
}

// Mappings of files on `devices`: "addr perms offset MAJ:MIN inode path".
template <typename Want>
void ScanMaps(const std::string& base, pid_t pid, const Want& want,
              std::map<FileKey, std::vector<HolderRef>>* out) {
  Result<std::string> maps = ReadFile(base + "/maps", 64 << 20);
  if (!maps.ok()) return;
  std::set<FileKey> seen;
  const char* p = maps->c_str();
  while (*p) {
    const char* eol = std::strchr(p, '\n');
    if (!eol) eol = p + std::strlen(p);
    unsigned maj = 0, min = 0;
    unsigned long long ino = 0;
    if (std::sscanf(p, "%*s %*s %*s %x:%x %llu", &maj, &min, &ino) == 3 && ino != 0) {
      FileKey key{makedev(maj, min), static_cast<ino_t>(ino)};
      if (want(key) && seen.insert(key).second) {
        bool deleted = std::string_view(p, static_cast<size_t>(eol - p)).ends_with(" (deleted)");
        (*out)[key].push_back(HolderRef{pid, true, 0, deleted});
      }
    }
    p = *eol ? eol + 1 : eol;
  }
}

}  // namespace

bool ReadProcStat(pid_t pid, std::string* comm, uint64_t* start_ticks, const std::string& proc) {
  Result<std::string> stat = ReadFile(proc + "/" + std::to_string(pid) + "/stat", 4096);
  if (!stat.ok()) return false;
  size_t open = stat->find('('), close = stat->rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return false;
  if (comm) *comm = stat->substr(open + 1, close - open - 1);
  // Fields after ")": state(3) ... starttime(22) is the 20th token from there.
  const char* p = stat->c_str() + close + 1;
  for (int field = 3; field < 22 && *p; ++field) {
    while (*p == ' ') ++p;
    while (*p && *p != ' ') ++p;
  }
  if (start_ticks) *start_ticks = std::strtoull(p, nullptr, 10);
  return true;
}

const ProcInfo* ProcTable::Find(pid_t pid) const {
  auto it = std::lower_bound(procs.begin(), procs.end(), pid,
                             [](const ProcInfo& p, pid_t v) { return p.pid < v; });
  return it != procs.end() && it->pid == pid ? &*it : nullptr;
}

pid_t ProcTable::HostPid(ino_t pid_ns, pid_t ns_pid) const {
  for (const ProcInfo& p : procs) {
    if (p.pid_ns == pid_ns && p.ns_pid == ns_pid) return p.pid;
  }
  return 0;
}

ProcTable ScanProcesses(const std::set<dev_t>& devices, const std::string& proc) {
  ProcTable t;
  auto want = [&](const FileKey& k) { return devices.count(k.dev) > 0; };
  for (pid_t pid : ListPids(proc)) {
    std::string base = proc + "/" + std::to_string(pid);
    ProcInfo info;
    info.pid = pid;
    if (!ReadProcStat(pid, &info.comm, &info.start_ticks, proc)) continue;
    info.pid_ns = NsInode(base, "pid");
    info.ipc_ns = NsInode(base, "ipc");
    info.ns_pid = InnermostPid(base, pid);
    t.procs.push_back(std::move(info));
    if (devices.empty()) continue;
    ScanFds(base, pid, want, &t.holders);
    ScanMaps(base, pid, want, &t.holders);
  }
  return t;
}

std::map<FileKey, std::vector<HolderRef>> ScanHolders(const std::set<FileKey>& keys,
                                                      const std::string& proc) {
  std::map<FileKey, std::vector<HolderRef>> out;
  auto want = [&](const FileKey& k) { return keys.count(k) > 0; };
  for (pid_t pid : ListPids(proc)) {
    std::string base = proc + "/" + std::to_string(pid);
    ScanFds(base, pid, want, &out);
    ScanMaps(base, pid, want, &out);
  }
  return out;
}

std::string ProcCommand(pid_t pid, const std::string& proc) {
  Result<std::string> raw = ReadFile(proc + "/" + std::to_string(pid) + "/cmdline", 4096);
  std::string cmd = raw.ok() ? *raw : "";
  while (!cmd.empty() && cmd.back() == '\0') cmd.pop_back();
  std::replace(cmd.begin(), cmd.end(), '\0', ' ');
  if (cmd.empty()) ReadProcStat(pid, &cmd, nullptr, proc);
  return cmd;
}

}  // namespace shmkeeper
