#include "node/reclaim.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <set>

#include "base/fileutil.h"
#include "base/safe_path.h"
#include "scan/fs_identity.h"
#include "scan/sysv.h"

namespace shmkeeper {
namespace {

// Files claimed (leased and quarantined) at once: each holds an fd, and each
// batch costs one settle and one walk of /proc.
constexpr size_t kMaxBatch = 1024;

// How many claims fit in the descriptor limit (raised to the hard limit when
// it can be), leaving room for everything else the agent has open.
size_t BatchSize() {
  struct rlimit lim;
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return 64;
  rlim_t want = kMaxBatch * 2;
  if (lim.rlim_cur < want && lim.rlim_max > lim.rlim_cur) {
    lim.rlim_cur = std::min(want, lim.rlim_max);
    (void)::setrlimit(RLIMIT_NOFILE, &lim);
  }
  rlim_t room = lim.rlim_cur > 256 ? (lim.rlim_cur - 256) / 2 : 16;
  return static_cast<size_t>(std::clamp<rlim_t>(room, 16, kMaxBatch));
}
// Between the quarantine renames and the final checks: an open(2) that looked
// the old name up just before the rename reaches the inode (and so the lease)
// within this time unless it is descheduled for longer (docs/reclaim-safety.md, "The residual race, and crashes").
// A sleep on the run's clock: the kernel needs the time to pass, nothing
// signals its end.
constexpr auto kSettle = std::chrono::milliseconds(20);

// What holds for every claim of one ReclaimLeaks call.
struct Run {
  bool dry_run = false;
  const std::string& proc;
  const std::string& agent_id;
  Deadline deadline;
  Clock* clock;
  // The caller stopped waiting: nothing more is removed.
  bool Expired() const { return clock->Now() >= deadline; }
};

// The pod's shm root through which files can be removed: the access
// process's /dev/shm, or, when that mount is read-only, the host tmpfs the
// spec binds there (accepted only if it is the very filesystem of the leak).
Result<UniqueFd> OpenShmRoot(const LeakRecord& l, const std::string& proc) {
  SHMK_ASSIGN_OR_RETURN(UniqueFd root, OpenProcessDir(l.access_pid, "/dev/shm", proc));
  struct statvfs vfs;
  if (l.shm_host_source.empty() || ::fstatvfs(root.get(), &vfs) != 0 || !(vfs.f_flag & ST_RDONLY)) return root;
  UniqueFd host(::open(l.shm_host_source.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st;
  if (!host.valid() || ::fstat(host.get(), &st) != 0 || st.st_dev != l.key.dev) return root;
  return host;
}

// Opens the directory that contains `l.rel` inside the pod's shm root,
// refusing symlinks on the way.
Result<UniqueFd> OpenParent(const LeakRecord& l, const std::string& proc, std::string* base) {
  size_t slash = l.rel.rfind('/');
  *base = slash == std::string::npos ? l.rel : l.rel.substr(slash + 1);
  std::string sub = slash == std::string::npos ? "" : l.rel.substr(0, slash);
  UniqueFd root;
  if (!l.host_dir.empty()) {
    root.reset(::open(l.host_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!root.valid()) return Status::FromErrno(errno, "open " + l.host_dir);
  } else {
    SHMK_ASSIGN_OR_RETURN(root, OpenShmRoot(l, proc));
  }
  if (sub.empty()) return root;
  return OpenNoSymlinks(root.get(), sub, O_RDONLY | O_DIRECTORY);
}

// Leases notify their holder with SIGIO when an open breaks them; the agent
// polls F_GETLEASE instead, so the signal (default action: terminate) must be
// ignored. Only SIG_DFL is replaced: a handler someone installed stays.
void IgnoreLeaseSignal() {
  struct sigaction old {};
  if (::sigaction(SIGIO, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    ::sigaction(SIGIO, &ign, nullptr);
  }
}

// One candidate in the protocol.
struct Claim {
  LeakRecord leak;
  UniqueFd dir, file;
  std::string base, quarantine;
  bool renamed = false;
  // The inode's handle (name_to_handle_at), to tell after the removal whether it outlived the claim.
  std::vector<char> handle;
};

struct Skip {
  SkipReason reason;
  std::string message;
  bool lease_refused = false;
};

// Whether `name` in `dir` is still the inode of the claim.
bool SameInode(int dir, const std::string& name, const FileKey& key) {
  struct stat st;
  return ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) && st.st_dev == key.dev &&
         st.st_ino == key.ino;
}

// Step 1: open, check and lease. On success the caller owns a lease that no
// other open file description can coexist with.
std::optional<Skip> Lease(Claim* c, const std::string& proc) {
  Result<UniqueFd> dir = OpenParent(c->leak, proc, &c->base);
  if (!dir.ok()) return Skip{SkipReason::kError, dir.status().message()};
  c->dir = std::move(*dir);
  c->file.reset(::openat(c->dir.get(), c->base.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (!c->file.valid()) {
    // EWOULDBLOCK: someone else holds a lease on it, i.e. is using it.
    return Skip{errno == EWOULDBLOCK ? SkipReason::kHeld : SkipReason::kChanged,
                Status::FromErrno(errno, "open " + c->leak.path).message(), errno == EWOULDBLOCK};
  }
  struct stat st;
  if (::fstat(c->file.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_dev != c->leak.key.dev ||
      st.st_ino != c->leak.key.ino) {
    return Skip{SkipReason::kChanged, "replaced since the scan"};
  }
  // The same numbers on a new tmpfs (a device number the kernel reused for
  // another pod's /dev/shm): another file, whatever the scan said of the old.
  if (Result<uint64_t> fsid = FilesystemId(c->file.get()); c->leak.fsid != 0 && (!fsid.ok() || *fsid != c->leak.fsid)) {
    return Skip{SkipReason::kChanged, "on another filesystem than the scan saw (its device number was reused)"};
  }
  if (st.st_nlink != 1) return Skip{SkipReason::kLinked, "has " + std::to_string(st.st_nlink) + " names"};
  // An open that breaks the lease resumes a stopped agent (lease_probe.h).
  if (::fcntl(c->file.get(), F_SETSIG, SIGCONT) != 0)
    return Skip{SkipReason::kError, Status::FromErrno(errno, "F_SETSIG").message()};
  if (::fcntl(c->file.get(), F_SETLEASE, F_WRLCK) != 0) {
    if (errno == EAGAIN) return Skip{SkipReason::kHeld, "open or mapped (the kernel refused a lease)", true};
    return Skip{SkipReason::kError, Status::FromErrno(errno, "lease " + c->leak.path).message() +
                                        (errno == EINVAL ? " (reclaim needs file leases: fs.leases-enable=1)" : "")};
  }
  c->handle.resize(sizeof(file_handle) + MAX_HANDLE_SZ);
  auto* fh = reinterpret_cast<file_handle*>(c->handle.data());
  fh->handle_bytes = MAX_HANDLE_SZ;
  int mount_id = 0;
  if (::name_to_handle_at(c->file.get(), "", fh, &mount_id, AT_EMPTY_PATH) != 0) c->handle.clear();
  return std::nullopt;
}

// Whether the removed file's inode still exists now that the claim's own
// descriptor is closed: something else references it.
bool OutlivedClaim(Claim* c) {
  c->file.reset();  // the final fput runs before close(2) returns
  if (c->handle.empty()) return false;
  UniqueFd again(
      ::open_by_handle_at(c->dir.get(), reinterpret_cast<file_handle*>(c->handle.data()), O_PATH | O_CLOEXEC));
  return again.valid();
}

// Step 2: hide the name, so that no open by name can start any more.
std::optional<Skip> Quarantine(Claim* c, const std::string& agent_id) {
  c->quarantine = QuarantineName(c->base, c->leak.key.ino, agent_id);
  if (NeedsNameXattr(c->quarantine) &&
      ::fsetxattr(c->file.get(), kQuarantineXattr, c->base.data(), c->base.size(), 0) != 0) {
    return Skip{SkipReason::kError, Status::FromErrno(errno, "keep the long name of " + c->leak.path).message()};
  }
  Status s = RenameNoReplace(c->dir.get(), c->base, c->quarantine);
  if (!s.ok()) return Skip{SkipReason::kError, s.message()};
  c->renamed = true;
  if (!SameInode(c->dir.get(), c->quarantine, c->leak.key))
    return Skip{SkipReason::kChanged, "replaced during the rename"};
  return std::nullopt;
}

// Step 4's checks, right before the unlink.
std::optional<Skip> FinalCheck(const Claim& c, const std::map<FileKey, std::vector<HolderRef>>& holders) {
  if (auto it = holders.find(c.leak.key); it != holders.end() && !it->second.empty()) {
    return Skip{SkipReason::kHeld, "held by pid " + std::to_string(it->second.front().pid)};
  }
  // A breaking lease reads as the type it is being broken to.
  if (::fcntl(c.file.get(), F_GETLEASE) != F_WRLCK) return Skip{SkipReason::kOpened, "opened during the check"};
  // Taking the lease again re-checks that no other open file description exists.
  if (::fcntl(c.file.get(), F_SETLEASE, F_WRLCK) != 0) return Skip{SkipReason::kOpened, "opened during the check"};
  const std::string& name = c.renamed ? c.quarantine : c.base;  // a dry run renames nothing
  if (!SameInode(c.dir.get(), name, c.leak.key)) return Skip{SkipReason::kChanged, "replaced during the check"};
  // A hard link made meanwhile (link(2) opens nothing: the lease does not see it).
  struct stat st;
  if (::fstat(c.file.get(), &st) != 0 || st.st_nlink != 1) return Skip{SkipReason::kLinked, "linked during the check"};
  return std::nullopt;
}

// Puts a kept file back under its name (or leaves it in quarantine for the
// next scan to restore when the name is taken meanwhile).
void Restore(Claim* c) {
  if (!c->renamed) return;
  if (SameInode(c->dir.get(), c->quarantine, c->leak.key) &&
      RenameBack(c->dir.get(), c->quarantine, c->base, c->leak.key.ino).ok() && NeedsNameXattr(c->quarantine)) {
    (void)::fremovexattr(c->file.get(), kQuarantineXattr);
  }
  c->renamed = false;
}

void Keep(Claim* c, const Skip& why, ReclaimOutcome* out) {
  Restore(c);
  out->skipped.push_back({c->leak, why.reason, why.message, why.lease_refused});
}

Skip DeadlineSkip() { return Skip{SkipReason::kDeadline, "the caller's deadline passed before its removal"}; }

// Phase 1: each claim leased (and, for real, quarantined) or kept; returns
// the claims that go on to the final check.
std::vector<Claim*> LeaseBatch(std::vector<Claim>& batch, const Run& run, ReclaimOutcome* out) {
  std::vector<Claim*> live;
  for (Claim& c : batch) {
    std::optional<Skip> skip = Lease(&c, run.proc);
    if (!skip && !run.dry_run && run.Expired()) skip = DeadlineSkip();
    if (!skip && !run.dry_run) skip = Quarantine(&c, run.agent_id);
    if (skip) {
      Keep(&c, *skip, out);
    } else {
      live.push_back(&c);
    }
  }
  return live;
}

// Phase 2, one claim: the final check against the holders /proc shows, then
// the removal and what it freed (or why it is kept).
void RemoveClaim(Claim* c, const std::map<FileKey, std::vector<HolderRef>>& holders, const Run& run,
                 ReclaimOutcome* out) {
  const bool dry_run = run.dry_run;
  std::optional<Skip> skip = FinalCheck(*c, holders);
  if (!skip && !dry_run && run.Expired()) skip = DeadlineSkip();
  if (!skip && !dry_run && ::unlinkat(c->dir.get(), c->quarantine.c_str(), 0) != 0) {
    skip = Skip{SkipReason::kError, Status::FromErrno(errno, "unlink " + c->leak.path).message()};
  }
  if (skip) {
    Keep(c, *skip, out);
    return;
  }
  c->renamed = false;
  struct stat st;
  if (!dry_run && ::fstat(c->file.get(), &st) == 0 && st.st_nlink > 0) {  // linked after the final check
    out->skipped.push_back(
        {c->leak, SkipReason::kLinked, "linked while it was removed: it lives on under another name"});
    return;
  }
  bool raced = !dry_run && ::fcntl(c->file.get(), F_GETLEASE) != F_WRLCK;
  if (raced) ++out->raced;  // that open gets the inode once the claim lets go: not a hidden reference
  if (!dry_run && !raced && OutlivedClaim(c)) {
    out->skipped.push_back({c->leak, SkipReason::kPinned,
                            "removed, but a reference /proc does not show (an O_PATH descriptor in flight?) "
                            "still pins its memory",
                            false});
    return;
  }
  out->freed_bytes += c->leak.bytes;
  out->reclaimed.push_back(c->leak);
}

void ReclaimBatch(std::vector<Claim>& batch, const Run& run, ReclaimOutcome* out) {
  std::vector<Claim*> live = LeaseBatch(batch, run, out);
  if (live.empty()) return;
  if (!run.dry_run) run.clock->SleepFor(kSettle);
  std::set<FileKey> keys;
  std::set<int> own;  // the claims' own fds are no holders
  for (Claim* c : live) {
    keys.insert(c->leak.key);
    own.insert(c->file.get());
  }
  std::map<FileKey, std::vector<HolderRef>> holders = ScanHolders(keys, run.proc, own);
  for (Claim* c : live) RemoveClaim(c, holders, run, out);
}

Status ReclaimSysv(const LeakRecord& l, bool dry_run, const std::string& proc) {
  SysvExpect want{l.sysv_id, l.sysv_cpid, l.sysv_lpid, l.sysv_atime, l.sysv_dtime};
  return dry_run ? Status::Ok() : RemoveSysvShm(l.access_pid, want, proc);
}

}  // namespace

const char* SkipReasonName(SkipReason r) {
  switch (r) {
    case SkipReason::kHeld:
      return "held";
    case SkipReason::kOpened:
      return "opened";
    case SkipReason::kChanged:
      return "changed";
    case SkipReason::kLinked:
      return "linked";
    case SkipReason::kError:
      return "error";
    case SkipReason::kPinned:
      return "pinned";
    case SkipReason::kVerdict:
      return "verdict";
    case SkipReason::kDeadline:
      return "deadline";
  }
  return "error";
}

ReclaimOutcome ReclaimLeaks(const std::vector<LeakRecord>& candidates, bool dry_run, const std::string& proc,
                            const std::string& agent_id, Deadline deadline, Clock* clock) {
  IgnoreLeaseSignal();
  ReclaimOutcome out;
  const Run run{dry_run, proc, agent_id, deadline, clock};
  const size_t batch_size = BatchSize();
  std::vector<Claim> batch;
  auto flush = [&] {
    ReclaimBatch(batch, run, &out);
    batch.clear();  // closes the fds: the leases go with them
  };
  for (const LeakRecord& l : candidates) {
    if (!l.reclaimable) {
      out.skipped.push_back({l, SkipReason::kVerdict,
                             l.state == LeakState::kLeaked ? "unheld for less than leaks.grace"
                                                           : "unheld, but nothing shows it was leaked"});
      continue;
    }
    if (l.sysv_id >= 0) {
      if (!dry_run && run.Expired()) {
        out.skipped.push_back({l, DeadlineSkip().reason, DeadlineSkip().message});
        continue;
      }
      Status s = ReclaimSysv(l, dry_run, proc);
      if (!s.ok()) {
        out.skipped.push_back(
            {l, s.code() == Code::kFailedPrecondition ? SkipReason::kHeld : SkipReason::kError, s.message()});
        continue;
      }
      out.freed_bytes += l.bytes;
      out.reclaimed.push_back(l);
      continue;
    }
    batch.push_back(Claim{l, {}, {}, {}, {}, false, {}});
    if (batch.size() == batch_size) flush();
  }
  if (!batch.empty()) flush();
  return out;
}

}  // namespace shmkeeper
