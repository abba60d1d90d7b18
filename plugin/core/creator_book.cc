#include "shmkeeper/creator_book.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

#include "shmkeeper/fileutil.h"
#include "shmkeeper/json.h"
#include "shmkeeper/procfs.h"
#include "shmkeeper/safe_path.h"

namespace shmkeeper {
namespace {

// The last NSpid entry of /proc/<pid>/status: the pid in its own namespace.
pid_t NamespacePid(pid_t pid, const std::string& proc) {
  Result<std::string> status = ReadFile(proc + "/" + std::to_string(pid) + "/status", 64 << 10);
  if (!status.ok()) return 0;
  size_t at = status->find("\nNSpid:");
  if (at == std::string::npos) return pid;
  size_t end = status->find('\n', at + 1);
  std::string line = status->substr(at + 7, end == std::string::npos ? std::string::npos : end - at - 7);
  size_t last = line.find_last_of(" \t");
  return static_cast<pid_t>(std::atol(line.c_str() + (last == std::string::npos ? 0 : last + 1)));
}

}  // namespace

bool CreatorRecord::Alive(const std::string& proc) const {
  uint64_t start = 0;
  return ReadProcStat(host_pid, nullptr, &start, proc) && start == start_ticks;
}

void CreatorBook::Record(const FileKey& key, CreatorRecord rec) {
  std::lock_guard<std::mutex> l(mu_);
  records_.insert_or_assign(key, std::move(rec));
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

Result<std::pair<FileKey, CreatorRecord>> CreatorFromDatagram(const Json& doc, pid_t sender_pid,
                                                              const std::string& proc) {
  if (StringField(doc, "type") != "create") return Status::Invalid("not a create record");
  std::string path = StringField(doc, "path");
  constexpr std::string_view kShm = "/dev/shm/";
  if (!path.starts_with(kShm) || path.size() == kShm.size() || path.size() > 4096) {
    return Status::Invalid("path outside /dev/shm");
  }
  SHMK_ASSIGN_OR_RETURN(UniqueFd shm, OpenProcessDir(sender_pid, "/dev/shm", proc));
  SHMK_ASSIGN_OR_RETURN(UniqueFd file,
                        OpenInRoot(shm.get(), path.substr(kShm.size()), O_RDONLY | O_NOFOLLOW | O_NONBLOCK, false));
  struct stat st;
  if (::fstat(file.get(), &st) != 0) return Status::FromErrno(errno, "stat");
  if (!S_ISREG(st.st_mode)) return Status::Invalid("not a regular file");
  CreatorRecord rec;
  rec.host_pid = sender_pid;
  if (!ReadProcStat(sender_pid, nullptr, &rec.start_ticks, proc)) return Status::NotFound("sender is gone");
  rec.ns_pid = NamespacePid(sender_pid, proc);
  rec.command = ProcCommand(sender_pid, proc);
  return std::make_pair(FileKey{st.st_dev, st.st_ino}, rec);
}

}  // namespace shmkeeper
