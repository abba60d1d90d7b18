#include "node/creator_book.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <sstream>

#include "base/fileutil.h"
#include "base/json.h"
#include "base/proc_args.h"
#include "base/safe_path.h"

namespace shmkeeper {

bool CreatorRecord::Alive(const std::string& proc) const {
  uint64_t start = 0;
  return ReadProcStat(host_pid, nullptr, &start, proc) && start == start_ticks;
}

Status CreatorBook::Record(const FileKey& key, CreatorRecord rec, const std::string& proc) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = records_.find(key);
  if (it != records_.end() && it->second.Alive(proc) &&
      !(it->second.host_pid == rec.host_pid && it->second.start_ticks == rec.start_ticks)) {
    return Status::Precondition("the file's creator (pid " + std::to_string(it->second.host_pid) + ") still runs");
  }
  records_.insert_or_assign(key, std::move(rec));
  return Status::Ok();
}

std::optional<CreatorRecord> CreatorBook::Find(const FileKey& key) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = records_.find(key);
  if (it == records_.end()) return std::nullopt;
  return it->second;
}

void CreatorBook::Retain(const std::set<FileKey>& live) {
  std::lock_guard<std::mutex> l(mu_);
  std::erase_if(records_, [&](const auto& kv) { return !live.count(kv.first); });
}

size_t CreatorBook::size() const {
  std::lock_guard<std::mutex> l(mu_);
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
    case ClaimRejection::kLiveCreator:
      return "live_creator";
  }
  return "?";
}

namespace {

// Whether `pid` (with host uid `uid`) is root in its own user namespace: its
// uid_map maps uid 0 of its namespace to `uid`.
bool RootInOwnUserNs(pid_t pid, uid_t uid, const std::string& proc) {
  Result<std::string> map = ReadFile(proc + "/" + std::to_string(pid) + "/uid_map", 64 << 10);
  if (!map.ok()) return false;
  std::istringstream lines(*map);
  unsigned long inside = 0, outside = 0, count = 0;
  while (lines >> inside >> outside >> count) {
    if (inside == 0 && count > 0 && outside == uid) return true;
  }
  return false;
}

Status Reject(ClaimRejection r, ClaimRejection* why, Status s) {
  *why = r;
  return s;
}

}  // namespace

Result<VerifiedClaim> VerifyCreatorClaim(const Json& doc, const SenderCreds& sender, ClaimRejection* why,
                                         const std::string& proc) {
  if (StringField(doc, "type") != "create")
    return Reject(ClaimRejection::kMalformed, why, Status::Invalid("not a create record"));
  std::string path = StringField(doc, "path");
  constexpr std::string_view kShm = "/dev/shm/";
  if (!path.starts_with(kShm) || path.size() == kShm.size() || path.size() > 4096) {
    return Reject(ClaimRejection::kMalformed, why, Status::Invalid("path outside /dev/shm"));
  }
  Result<UniqueFd> shm = OpenProcessDir(sender.pid, "/dev/shm", proc);
  if (!shm.ok()) return Reject(ClaimRejection::kNoFile, why, shm.status());
  // O_PATH: the agent's look must not open the file (it would break a
  // reclaim's lease, and it would count as a holder).
  Result<UniqueFd> file = OpenInRoot(shm->get(), path.substr(kShm.size()), O_PATH | O_NOFOLLOW, false);
  if (!file.ok()) return Reject(ClaimRejection::kNoFile, why, file.status());
  struct stat st;
  if (::fstat(file->get(), &st) != 0) return Reject(ClaimRejection::kNoFile, why, Status::FromErrno(errno, "stat"));
  if (!S_ISREG(st.st_mode)) return Reject(ClaimRejection::kNoFile, why, Status::Invalid("not a regular file"));
  VerifiedClaim claim{FileKey{st.st_dev, st.st_ino}, {}};
  if (!ProcessHolds(sender.pid, claim.key, proc)) {
    return Reject(ClaimRejection::kNotHolder, why, Status::Precondition("the sender does not hold " + path));
  }
  if (sender.uid != st.st_uid && sender.uid != 0 && !RootInOwnUserNs(sender.pid, sender.uid, proc)) {
    return Reject(ClaimRejection::kNotOwner, why,
                  Status::Precondition("uid " + std::to_string(sender.uid) + " does not own " + path));
  }
  CreatorRecord& rec = claim.record;
  rec.host_pid = sender.pid;
  if (!ReadProcStat(sender.pid, nullptr, &rec.start_ticks, proc)) {
    return Reject(ClaimRejection::kNoFile, why, Status::NotFound("sender is gone"));
  }
  rec.ns_pid = NamespacePid(sender.pid, proc);
  rec.command = ProcCommand(sender.pid, proc);
  return claim;
}

}  // namespace shmkeeper
