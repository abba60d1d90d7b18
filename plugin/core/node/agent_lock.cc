#include "node/agent_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace shmkeeper {
namespace {

std::string LockPath(const std::string& dir) { return dir + "/shmkeeperd.lock"; }

}  // namespace

pid_t AgentLock::Holder(const std::string& state_dir) {
  Result<std::string> text = ReadFile(LockPath(state_dir), 64);
  return text.ok() ? static_cast<pid_t>(std::atol(text->c_str())) : 0;
}

Result<AgentLock> AgentLock::Acquire(const std::string& state_dir) {
  SHMK_RETURN_IF_ERROR(MakeDirs(state_dir));
  std::string path = LockPath(state_dir);
  AgentLock lock;
  lock.fd_.reset(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!lock.fd_.valid()) return Status::FromErrno(errno, "open " + path);
  if (::flock(lock.fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return Status::FromErrno(errno, "flock " + path);
    pid_t other = Holder(state_dir);
    return Status::Precondition("another shmkeeperd (pid " + (other ? std::to_string(other) : "unknown") + ") holds " +
                                path + ": one agent per node; stop it, or start this one with --read-only");
  }
  std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(lock.fd_.get(), 0) != 0 || ::pwrite(lock.fd_.get(), pid.data(), pid.size(), 0) < 0) {
    return Status::FromErrno(errno, "write " + path);
  }
  return lock;
}

Result<std::string> AgentIdentity(const std::string& state_dir) {
  std::string path = state_dir + "/agent-id";
  if (Result<std::string> text = ReadFile(path, 64); text.ok()) {
    std::string id = text->substr(0, 8);
    bool hex = id.size() == 8;
    for (char c : id) hex = hex && std::isxdigit(static_cast<unsigned char>(c)) && !std::isupper(c);
    if (hex) return id;
  }
  unsigned char raw[4];
  if (::getrandom(raw, sizeof raw, 0) != sizeof raw) return Status::FromErrno(errno, "getrandom");
  char id[9];
  std::snprintf(id, sizeof id, "%02x%02x%02x%02x", raw[0], raw[1], raw[2], raw[3]);
  SHMK_RETURN_IF_ERROR(MakeDirs(state_dir));
  SHMK_RETURN_IF_ERROR(WriteFileAtomic(path, std::string(id) + "\n"));
  return std::string(id);
}

}  // namespace shmkeeper
