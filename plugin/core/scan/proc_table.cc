#include "scan/proc_table.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/kcmp.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "base/fileutil.h"

namespace shmkeeper {
namespace {

using DirPtr = std::unique_ptr<DIR, int (*)(DIR*)>;
using HolderMap = std::map<FileKey, std::vector<HolderRef>>;

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

// Reads a small file relative to `dir_fd` into `buf`; returns its length or -1.
ssize_t ReadAt(int dir_fd, const char* name, char* buf, size_t cap) {
  UniqueFd fd(::openat(dir_fd, name, O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return -1;
  ssize_t total = 0;
  while (static_cast<size_t>(total) < cap - 1) {
    ssize_t n = ::read(fd.get(), buf + total, cap - 1 - static_cast<size_t>(total));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    total += n;
  }
  buf[total] = '\0';
  return total;
}

ino_t NsInodeAt(int dir_fd, const char* ns) {
  struct stat st;
  return ::fstatat(dir_fd, ns, &st, 0) == 0 ? st.st_ino : 0;
}

bool ParseStat(const char* text, std::string* comm, uint64_t* start_ticks) {
  const char* open = std::strchr(text, '(');
  const char* close = std::strrchr(text, ')');
  if (!open || !close || close < open) return false;
  if (comm) comm->assign(open + 1, static_cast<size_t>(close - open - 1));
  // Fields after ")": state is field 3; starttime is field 22.
  const char* p = close + 1;
  for (int field = 3; field < 22 && *p; ++field) {
    while (*p == ' ') ++p;
    while (*p && *p != ' ') ++p;
  }
  if (start_ticks) *start_ticks = std::strtoull(p, nullptr, 10);
  return true;
}

// The last NSpid column of /proc/<pid>/status: the pid in its own namespace.
pid_t InnermostPid(int dir_fd, pid_t fallback) {
  char buf[8192];
  if (ReadAt(dir_fd, "status", buf, sizeof buf) < 0) return fallback;
  const char* at = std::strstr(buf, "\nNSpid:");
  if (!at) return fallback;
  const char* end = std::strchr(at + 1, '\n');
  std::string line(at + 7, end ? static_cast<size_t>(end - at - 7) : std::strlen(at + 7));
  size_t last = line.find_last_of(" \t");
  return static_cast<pid_t>(std::atol(line.c_str() + (last == std::string::npos ? 0 : last + 1)));
}

constexpr size_t kMaxDirent = offsetof(struct dirent64, d_name) + 256 + 8;  // name, NUL and alignment

// Open fds of wanted files. The fd directory is read with getdents64 on the
// descriptor itself: no dup/fdopendir/closedir per process on this hot path.
// Descriptors of the scanning process itself not to count (reclaim's own
// claim fds); null for none.
using SkipFds = const std::set<int>*;

template <typename Want>
void ScanFds(int dir_fd, pid_t pid, const Want& want, HolderMap* out, SkipFds skip) {
  UniqueFd dfd(::openat(dir_fd, "fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dfd.valid()) return;
  alignas(8) char buf[16384];
  for (;;) {
    long n = ::syscall(SYS_getdents64, dfd.get(), buf, sizeof buf);
    if (n <= 0) return;
    for (long off = 0; off < n;) {
      auto* e = reinterpret_cast<struct dirent64*>(buf + off);
      off += e->d_reclen;
      if (e->d_name[0] == '.') continue;
      if (skip && skip->count(std::atoi(e->d_name))) continue;
      struct stat st;
      if (::fstatat(dfd.get(), e->d_name, &st, 0) != 0 || !S_ISREG(st.st_mode)) continue;
      FileKey key{st.st_dev, st.st_ino};
      if (!want(key)) continue;
      (*out)[key].push_back(HolderRef{pid, false, static_cast<int64_t>(st.st_blocks) * 512, st.st_nlink == 0});
    }
    // getdents64 stops only when the next entry does not fit: with room for
    // the largest one left over, the directory is done (saves a call per process).
    if (static_cast<size_t>(n) + kMaxDirent <= sizeof buf) return;
  }
}

unsigned HexField(const char*& p) {
  unsigned v = 0;
  for (;; ++p) {
    char c = *p;
    if (c >= '0' && c <= '9')
      v = v * 16 + static_cast<unsigned>(c - '0');
    else if (c >= 'a' && c <= 'f')
      v = v * 16 + static_cast<unsigned>(c - 'a' + 10);
    else
      return v;
  }
}

// Mappings of wanted files: "addr perms offset MAJ:MIN inode path". Lines
// whose device major is not a wanted major are skipped before any parsing
// beyond the device column.
// Returns whether the process had any mapping at all (a zombie leader has none).
template <typename Want>
bool ScanMaps(int dir_fd, pid_t pid, const std::set<unsigned>& majors, const Want& want, HolderMap* out) {
  Result<std::string> maps = [&]() -> Result<std::string> {
    UniqueFd fd(::openat(dir_fd, "maps", O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return Status::FromErrno(errno, "maps");
    std::string s;
    char buf[65536];
    for (;;) {
      ssize_t n = ::read(fd.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      s.append(buf, static_cast<size_t>(n));
    }
    return s;
  }();
  if (!maps.ok()) return false;
  std::set<FileKey> seen;
  const char* p = maps->c_str();
  while (*p) {
    const char* eol = std::strchr(p, '\n');
    if (!eol) eol = p + std::strlen(p);
    const char* f = p;
    for (int spaces = 0; f < eol && spaces < 3; ++f) spaces += *f == ' ';
    unsigned maj = HexField(f);
    if (*f == ':' && majors.count(maj)) {
      ++f;
      unsigned min = HexField(f);
      unsigned long long ino = std::strtoull(f, nullptr, 10);
      FileKey key{makedev(maj, min), static_cast<ino_t>(ino)};
      if (ino != 0 && want(key) && seen.insert(key).second) {
        bool deleted = std::string_view(p, static_cast<size_t>(eol - p)).ends_with(" (deleted)");
        (*out)[key].push_back(HolderRef{pid, true, 0, deleted});
      }
    }
    p = *eol ? eol + 1 : eol;
  }
  return !maps->empty();
}

struct Partial {
  std::vector<ProcInfo> procs;
  HolderMap holders;
};

// The task ids of a thread group other than its leader (empty for a
// single-threaded process, the common case).
std::vector<pid_t> OtherTasks(int dir_fd, pid_t pid) {
  std::vector<pid_t> tids;
  UniqueFd dfd(::openat(dir_fd, "task", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dfd.valid()) return tids;
  alignas(8) char buf[16384];
  for (;;) {
    long n = ::syscall(SYS_getdents64, dfd.get(), buf, sizeof buf);
    if (n <= 0) return tids;
    for (long off = 0; off < n;) {
      auto* e = reinterpret_cast<struct dirent64*>(buf + off);
      off += e->d_reclen;
      char* end = nullptr;
      long tid = std::strtol(e->d_name, &end, 10);
      if (tid > 0 && *end == '\0' && tid != pid) tids.push_back(static_cast<pid_t>(tid));
    }
  }
}

// Whether two tasks share one fd table (kcmp KCMP_FILES). False when the
// kernel cannot tell: the caller then reads both tables.
bool SameFdTable(pid_t a, pid_t b) { return ::syscall(SYS_kcmp, a, b, KCMP_FILES, 0, 0) == 0; }

// The holders among the threads of `pid`: a thread with a private fd table
// (unshare(CLONE_FILES)) shows its fds only under task/<tid>/fd, and a
// thread-group leader that has exited (a zombie while workers run) shows no
// fds and no mappings at all under /proc/<pid>.
template <typename Want>
void ScanTasks(int dir_fd, pid_t pid, const std::vector<pid_t>& tids, bool maps_read, const std::set<unsigned>& majors,
               const Want& want, HolderMap* out, SkipFds skip) {
  std::vector<pid_t> tables = {pid};  // one task per distinct fd table already read
  for (pid_t tid : tids) {
    UniqueFd tdir(::openat(dir_fd, ("task/" + std::to_string(tid)).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!tdir.valid()) continue;
    bool shared = std::any_of(tables.begin(), tables.end(), [&](pid_t t) { return SameFdTable(t, tid); });
    if (!shared) {
      ScanFds(tdir.get(), pid, want, out, skip);
      tables.push_back(tid);
    }
    if (!maps_read) maps_read = ScanMaps(tdir.get(), pid, majors, want, out);
  }
}

// Everything one process holds: the leader's fds and mappings, then those of
// its other threads.
template <typename Want>
void ScanProcess(int dir_fd, pid_t pid, const std::set<unsigned>& majors, const Want& want, HolderMap* out,
                 SkipFds own_fds = nullptr) {
  SkipFds skip = own_fds && pid == ::getpid() ? own_fds : nullptr;
  ScanFds(dir_fd, pid, want, out, skip);
  bool maps_read = ScanMaps(dir_fd, pid, majors, want, out);
  std::vector<pid_t> tids = OtherTasks(dir_fd, pid);
  if (!tids.empty()) ScanTasks(dir_fd, pid, tids, maps_read, majors, want, out, skip);
}

template <typename Want>
void ScanRange(const std::string& proc, const std::vector<pid_t>& pids, size_t begin, size_t end, ino_t self_pid_ns,
               const std::set<unsigned>& majors, bool scan_files, const Want& want, Partial* out, SkipFds own_fds) {
  for (size_t i = begin; i < end; ++i) {
    pid_t pid = pids[i];
    UniqueFd dir(::open((proc + "/" + std::to_string(pid)).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!dir.valid()) continue;
    ProcInfo info;
    info.pid = pid;
    info.pid_ns = NsInodeAt(dir.get(), "ns/pid");
    if (info.pid_ns != 0) {  // 0: gone, or a kernel thread we cannot inspect
      // NSpid is only needed inside other pid namespaces: the host's pid is the pid.
      info.ns_pid = info.pid_ns == self_pid_ns ? pid : InnermostPid(dir.get(), pid);
      info.mnt_ns = NsInodeAt(dir.get(), "ns/mnt");
      out->procs.push_back(std::move(info));
    }
    // Holders are read even when the namespace could not be: keeping a file
    // on doubt is always safe, missing a holder is not.
    if (scan_files) ScanProcess(dir.get(), pid, majors, want, &out->holders, own_fds);
  }
}

void Merge(Partial* from, ProcTable* into) {
  into->procs.insert(into->procs.end(), std::make_move_iterator(from->procs.begin()),
                     std::make_move_iterator(from->procs.end()));
  for (auto& [k, v] : from->holders) {
    std::vector<HolderRef>& dst = into->holders[k];
    dst.insert(dst.end(), v.begin(), v.end());
  }
}

// A process forked while /proc is read can inherit a holder's fd after its
// parent was read and before the parent exits (a "fork relay"). The pid list
// is therefore read again after the pass, and processes not seen yet are
// read too, until a pass finds no new pid (at most kMaxRounds passes).
constexpr int kMaxRounds = 4;

template <typename Want>
ProcTable Scan(const std::string& proc, const Want& want, const std::set<unsigned>& majors, bool scan_files,
               unsigned threads, SkipFds own_fds = nullptr) {
  std::vector<pid_t> pids = ListPids(proc);
  struct stat self;
  ino_t self_pid_ns = ::stat((proc + "/self/ns/pid").c_str(), &self) == 0 ? self.st_ino : 0;
  if (threads == 0) threads = std::max(1u, std::min(4u, std::thread::hardware_concurrency()));
  std::vector<Partial> parts(threads);
  std::vector<std::thread> workers;
  size_t chunk = (pids.size() + threads - 1) / threads;
  for (unsigned t = 0; t < threads; ++t) {
    size_t b = std::min(pids.size(), t * chunk), e = std::min(pids.size(), b + chunk);
    workers.emplace_back(
        [&, b, e, t] { ScanRange(proc, pids, b, e, self_pid_ns, majors, scan_files, want, &parts[t], own_fds); });
  }
  for (std::thread& w : workers) w.join();
  ProcTable table;
  table.proc = proc;
  table.self_pid_ns = self_pid_ns;
  for (Partial& p : parts) Merge(&p, &table);  // ranges are in pid order
  std::set<pid_t> seen(pids.begin(), pids.end());
  for (int round = 1; round < kMaxRounds; ++round) {
    std::vector<pid_t> fresh;
    for (pid_t pid : ListPids(proc)) {
      if (seen.insert(pid).second) fresh.push_back(pid);
    }
    if (fresh.empty()) break;
    Partial late;
    ScanRange(proc, fresh, 0, fresh.size(), self_pid_ns, majors, scan_files, want, &late, own_fds);
    Merge(&late, &table);
  }
  std::sort(table.procs.begin(), table.procs.end(), [](const ProcInfo& a, const ProcInfo& b) { return a.pid < b.pid; });
  return table;
}

}  // namespace

bool ReadProcStat(pid_t pid, std::string* comm, uint64_t* start_ticks, const std::string& proc) {
  Result<std::string> stat = ReadFile(proc + "/" + std::to_string(pid) + "/stat", 4096);
  return stat.ok() && ParseStat(stat->c_str(), comm, start_ticks);
}

const ProcInfo* ProcTable::Find(pid_t pid) const {
  auto it = std::lower_bound(procs.begin(), procs.end(), pid, [](const ProcInfo& p, pid_t v) { return p.pid < v; });
  return it != procs.end() && it->pid == pid ? &*it : nullptr;
}

pid_t ProcTable::HostPid(ino_t pid_ns, pid_t ns_pid) const {
  if (pid_ns == self_pid_ns) {  // the scanner's own namespace: the pid is the host pid
    const ProcInfo* p = Find(ns_pid);
    return p && p->pid_ns == pid_ns ? p->pid : 0;
  }
  for (const ProcInfo& p : procs) {
    if (p.pid_ns == pid_ns && p.ns_pid == ns_pid) return p.pid;
  }
  return 0;
}

ino_t ProcTable::IpcNs(pid_t pid) const {
  struct stat st;
  return ::stat((proc + "/" + std::to_string(pid) + "/ns/ipc").c_str(), &st) == 0 ? st.st_ino : 0;
}

ProcTable ScanProcesses(const std::set<dev_t>& devices, const std::string& proc, unsigned threads) {
  std::set<unsigned> majors;
  for (dev_t d : devices) majors.insert(major(d));
  auto want = [&](const FileKey& k) { return devices.count(k.dev) > 0; };
  return Scan(proc, want, majors, !devices.empty(), threads);
}

HolderMap ScanHolders(const std::set<FileKey>& keys, const std::string& proc, const std::set<int>& own_fds) {
  std::set<dev_t> devices;
  for (const FileKey& k : keys) devices.insert(k.dev);
  std::set<unsigned> majors;
  for (dev_t d : devices) majors.insert(major(d));
  auto want = [&](const FileKey& k) { return keys.count(k) > 0; };
  return Scan(proc, want, majors, !keys.empty(), 0, &own_fds).holders;
}

std::optional<ProcInfo> ReadProcInfo(pid_t pid, const std::string& proc) {
  UniqueFd dir(::open((proc + "/" + std::to_string(pid)).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return std::nullopt;
  struct stat self;
  ino_t self_pid_ns = ::stat((proc + "/self/ns/pid").c_str(), &self) == 0 ? self.st_ino : 0;
  ProcInfo info;
  info.pid = pid;
  info.pid_ns = NsInodeAt(dir.get(), "ns/pid");
  if (info.pid_ns == 0) return std::nullopt;
  info.ns_pid = info.pid_ns == self_pid_ns ? pid : InnermostPid(dir.get(), pid);
  return info;
}

pid_t NamespacePid(pid_t pid, const std::string& proc) {
  UniqueFd dir(::open((proc + "/" + std::to_string(pid)).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  return dir.valid() ? InnermostPid(dir.get(), pid) : 0;
}

bool ProcessHolds(pid_t pid, const FileKey& key, const std::string& proc) {
  UniqueFd dir(::open((proc + "/" + std::to_string(pid)).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return false;
  HolderMap held;
  auto want = [&](const FileKey& k) { return k == key; };
  // An open descriptor answers it: the mappings (thousands of lines in a
  // process that imported a large library) and the other threads are read
  // only when the leader's descriptors do not hold it.
  ScanFds(dir.get(), pid, want, &held, nullptr);
  if (held.count(key) > 0) return true;
  ScanProcess(dir.get(), pid, {major(key.dev)}, want, &held);
  return held.count(key) > 0;
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
