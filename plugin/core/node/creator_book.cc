#include "node/creator_book.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <sstream>

#include "base/fileutil.h"
#include "base/json.h"
#include "base/proc_args.h"
#include "base/safe_path.h"
#include "scan/fs_identity.h"

namespace shmkeeper {

bool CreatorRecord::Alive(const std::string& proc) const {
  uint64_t start = 0;
  return ReadProcStat(host_pid, nullptr, &start, proc) && start == start_ticks;
}

Status CreatorBook::Record(const FileKey& key, CreatorRecord rec, const std::string& proc) {
  MutexLock l(&mu_);
  auto it = records_.find(key);
  // A record of another superblock's file at the same numbers is no
  // creator of this one: replaced whether that process runs or not.
  if (it != records_.end() && it->second.fsid == rec.fsid && it->second.Alive(proc) &&
      !(it->second.host_pid == rec.host_pid && it->second.start_ticks == rec.start_ticks)) {
    return Status::Precondition("the file's creator (pid " + std::to_string(it->second.host_pid) + ") still runs");
  }
  records_.insert_or_assign(key, std::move(rec));
  return Status::Ok();
}

std::optional<CreatorRecord> CreatorBook::Find(const FileKey& key, uint64_t fsid) const {
  MutexLock l(&mu_);
  auto it = records_.find(key);
  if (it == records_.end() || it->second.fsid != fsid) return std::nullopt;
  return it->second;
}

void CreatorBook::Retain(const std::set<FileKey>& live) {
  MutexLock l(&mu_);
  std::erase_if(records_, [&](const auto& kv) { return !live.count(kv.first); });
}

size_t CreatorBook::size() const {
  MutexLock l(&mu_);
  return records_.size();
}

const char* ClaimRejectionName(ClaimRejection r) {
  switch (r) {
    case ClaimRejection::kMalformed:
      return "malformed";
    case ClaimRejection::kNoFile:
      return "no_file";
    case ClaimRejection::kNotHolder:
      return "not_holder";
    case ClaimRejection::kNotOwner:
      return "not_owner";
    case ClaimRejection::kUsernsUnmapped:
      return "userns_unmapped";
    case ClaimRejection::kLiveCreator:
      return "live_creator";
  }
  return "?";
}

namespace {

// Whether `id` (in the agent's user namespace) is mapped into the user
// namespace of `pid`: its uid_map or gid_map (`which`), read by the agent,
// gives the outside ids in the agent's own namespace.
bool MappedInto(pid_t pid, const char* which, unsigned long id, const std::string& proc) {
  Result<std::string> map = ReadFile(proc + "/" + std::to_string(pid) + "/" + which, 64 << 10);
  if (!map.ok()) return false;
  std::istringstream lines(*map);
  unsigned long inside = 0, outside = 0, count = 0;
  while (lines >> inside >> outside >> count) {
    if (id >= outside && id - outside < count) return true;
  }
  return false;
}

// Whether `pid` has CAP_FOWNER in its effective set (CapEff of its status:
// capabilities in its own user namespace).
bool HasFowner(pid_t pid, const std::string& proc) {
  Result<std::string> status = ReadFile(proc + "/" + std::to_string(pid) + "/status", 64 << 10);
  if (!status.ok()) return false;
  size_t at = status->find("\nCapEff:");
  if (at == std::string::npos) return false;
  unsigned long long caps = std::strtoull(status->c_str() + at + 8, nullptr, 16);
  constexpr int kCapFowner = 3;
  return (caps >> kCapFowner) & 1;
}

// Whether `pid` lives in the agent's own user namespace (the initial one on
// a node: the agent runs on the host's).
bool InAgentUserNs(pid_t pid, const std::string& proc) {
  struct stat mine, theirs;
  return ::stat((proc + "/self/ns/user").c_str(), &mine) == 0 &&
         ::stat((proc + "/" + std::to_string(pid) + "/ns/user").c_str(), &theirs) == 0 &&
         mine.st_ino == theirs.st_ino && mine.st_dev == theirs.st_dev;
}

// Whether the sender could remove the file (`st`, in the directory `dir`)
// without shmkeeper: see the trust model in creator_book.h.
std::optional<ClaimRejection> MayRemove(const SenderCreds& sender, const struct stat& st, const struct stat& dir,
                                        const std::string& proc) {
  if (sender.uid == st.st_uid || sender.uid == dir.st_uid) return std::nullopt;
  if (!HasFowner(sender.pid, proc)) return ClaimRejection::kNotOwner;
  if (InAgentUserNs(sender.pid, proc)) return std::nullopt;
  if (MappedInto(sender.pid, "uid_map", st.st_uid, proc) && MappedInto(sender.pid, "gid_map", st.st_gid, proc)) {
    return std::nullopt;
  }
  return ClaimRejection::kUsernsUnmapped;
}

// Whether descriptor `fd` of `pid` is the file `key` now: one stat of
// /proc/<pid>/fd/<fd>, which the kernel resolves to the open file itself.
bool HoldsAt(pid_t pid, int fd, const FileKey& key, const std::string& proc) {
  struct stat st;
  std::string link = proc + "/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  return ::stat(link.c_str(), &st) == 0 && st.st_dev == key.dev && st.st_ino == key.ino;
}

// Fills the record's ns_pid and command. Read once per process (pid and
// start time, which the caller has just read) and kept for a second, per
// thread (the receiver's): a program creating segments in a loop costs one
// read of /proc/<pid>/stat per record, not also its status and cmdline.
void Describe(pid_t pid, uint64_t start_ticks, const std::string& proc, Clock* clock, CreatorRecord* rec) {
  struct Seen {
    pid_t pid = 0;
    uint64_t start_ticks = 0;
    pid_t ns_pid = 0;
    std::string command;
    Clock::TimePoint at;
  };
  thread_local std::array<Seen, 16> seen;
  thread_local size_t next = 0;
  auto now = clock->Now();
  bool cacheable = proc == "/proc";
  for (const Seen& s : seen) {
    if (cacheable && s.pid == pid && s.start_ticks == start_ticks && now - s.at < std::chrono::seconds(1)) {
      rec->ns_pid = s.ns_pid;
      rec->command = s.command;
      return;
    }
  }
  rec->ns_pid = NamespacePid(pid, proc);
  rec->command = ProcCommand(pid, proc);
  if (cacheable) seen[next++ % seen.size()] = Seen{pid, start_ticks, rec->ns_pid, rec->command, now};
}

Status Reject(ClaimRejection r, ClaimRejection* why, Status s) {
  *why = r;
  return s;
}

}  // namespace

Result<VerifiedClaim> VerifyCreatorClaim(const Json& doc, const SenderCreds& sender, ClaimRejection* why,
                                         const std::string& proc, Clock* clock) {
  if (StringField(doc, "type") != "create")
    return Reject(ClaimRejection::kMalformed, why, Status::Invalid("not a create record"));
  std::string path = StringField(doc, "path");
  constexpr std::string_view kShm = "/dev/shm/";
  if (!path.starts_with(kShm) || path.size() == kShm.size() || path.size() > 4096) {
    return Reject(ClaimRejection::kMalformed, why, Status::Invalid("path outside /dev/shm"));
  }
  int64_t named_fd = -1;  // none named: a record of a preload before #23
  if (doc.contains("fd")) {
    named_fd = IntegerField<int64_t>(doc, "fd", -1);
    if (named_fd < 0 || named_fd > std::numeric_limits<int>::max()) {
      return Reject(ClaimRejection::kMalformed, why, Status::Invalid("fd is not a descriptor number"));
    }
  }
  Result<UniqueFd> shm = OpenProcessDir(sender.pid, "/dev/shm", proc);
  if (!shm.ok()) return Reject(ClaimRejection::kNoFile, why, shm.status());
  // O_PATH: the agent's look must not open the file (it would break a
  // reclaim's lease, and it would count as a holder).
  std::string rel = path.substr(kShm.size());
  Result<UniqueFd> file = OpenInRoot(shm->get(), rel, O_PATH | O_NOFOLLOW, false);
  if (!file.ok()) return Reject(ClaimRejection::kNoFile, why, file.status());
  struct stat st, dir;
  if (::fstat(file->get(), &st) != 0) return Reject(ClaimRejection::kNoFile, why, Status::FromErrno(errno, "stat"));
  if (!S_ISREG(st.st_mode)) return Reject(ClaimRejection::kNoFile, why, Status::Invalid("not a regular file"));
  int dir_fd = shm->get();
  UniqueFd parent;
  if (size_t slash = rel.rfind('/'); slash != std::string::npos) {
    Result<UniqueFd> d = OpenInRoot(shm->get(), rel.substr(0, slash), O_PATH | O_DIRECTORY, false);
    if (!d.ok()) return Reject(ClaimRejection::kNoFile, why, d.status());
    parent = std::move(*d);
    dir_fd = parent.get();
  }
  if (::fstat(dir_fd, &dir) != 0) return Reject(ClaimRejection::kNoFile, why, Status::FromErrno(errno, "stat"));
  Result<uint64_t> fsid = FilesystemId(file->get());
  if (!fsid.ok()) return Reject(ClaimRejection::kNoFile, why, fsid.status());
  VerifiedClaim claim{FileKey{st.st_dev, st.st_ino}, {}};
  claim.record.fsid = *fsid;
  if (!(named_fd >= 0 && HoldsAt(sender.pid, static_cast<int>(named_fd), claim.key, proc)) &&
      !ProcessHolds(sender.pid, claim.key, proc)) {
    return Reject(ClaimRejection::kNotHolder, why, Status::Precondition("the sender does not hold " + path));
  }
  if (std::optional<ClaimRejection> refused = MayRemove(sender, st, dir, proc)) {
    return Reject(
        *refused, why,
        Status::Precondition("uid " + std::to_string(sender.uid) + " could not remove " + path +
                             (*refused == ClaimRejection::kUsernsUnmapped
                                  ? " (CAP_FOWNER only in a user namespace that does not map the file's owner)"
                                  : " (neither the owner of the file or its directory, nor CAP_FOWNER)")));
  }
  CreatorRecord& rec = claim.record;
  rec.host_pid = sender.pid;
  if (!ReadProcStat(sender.pid, nullptr, &rec.start_ticks, proc)) {
    return Reject(ClaimRejection::kNoFile, why, Status::NotFound("sender is gone"));
  }
  Describe(sender.pid, rec.start_ticks, proc, clock, &rec);
  return claim;
}

}  // namespace shmkeeper
