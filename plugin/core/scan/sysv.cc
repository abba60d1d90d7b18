#include "scan/sysv.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <sstream>
#include <thread>

#include "base/fileutil.h"

namespace shmkeeper {
namespace {

// Runs `fn` on a new thread that has joined the IPC namespace of `pid`.
template <typename Fn>
Status InIpcNamespace(pid_t pid, const std::string& proc, Fn fn) {
  std::string ns = proc + "/" + std::to_string(pid) + "/ns/ipc";
  UniqueFd fd(::open(ns.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, "open " + ns);
  Status result;
  std::thread t([&] {
    if (::setns(fd.get(), CLONE_NEWIPC) != 0) {
      result = Status::FromErrno(errno, "setns " + ns);
      return;
    }
    result = fn();
  });
  t.join();
  return result;
}

}  // namespace

std::vector<SysvSegment> ParseSysvShm(const std::string& text) {
  std::vector<SysvSegment> out;
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream f(line);
    SysvSegment s;
    long long perms, uid, gid, cuid, cgid, atime, dtime;
    if (f >> s.key >> s.shmid >> perms >> s.bytes >> s.cpid >> s.lpid >> s.nattch >> uid >> gid >> cuid >> cgid >>
        atime >> dtime >> s.ctime) {
      s.atime = atime;
      s.dtime = dtime;
      out.push_back(s);
    }
  }
  return out;
}

Result<std::vector<SysvSegment>> ListSysvShm(pid_t pid, const std::string& proc) {
  std::vector<SysvSegment> segs;
  Status s = InIpcNamespace(pid, proc, [&]() -> Status {
    Result<std::string> text = ReadFile("/proc/sysvipc/shm", 64 << 20);
    if (!text.ok()) return text.status();
    segs = ParseSysvShm(*text);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return segs;
}

std::vector<SysvListing> ListSysvShmEach(const std::vector<pid_t>& pids, const std::string& proc) {
  std::vector<SysvListing> out(pids.size());
  if (pids.empty()) return out;
  struct stat self;
  ino_t self_ns = ::stat((proc + "/self/ns/ipc").c_str(), &self) == 0 ? self.st_ino : 0;
  std::thread t([&] {
    std::map<ino_t, size_t> listed;  // namespace -> the entry that listed it
    for (size_t i = 0; i < pids.size(); ++i) {
      SysvListing& l = out[i];
      std::string ns = proc + "/" + std::to_string(pids[i]) + "/ns/ipc";
      UniqueFd fd(::open(ns.c_str(), O_RDONLY | O_CLOEXEC));
      struct stat st;
      if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
        l.status = Status::FromErrno(errno, "open " + ns);
        continue;
      }
      l.ipc_ns = st.st_ino;
      if (self_ns != 0 && st.st_ino == self_ns) {
        l.host = true;
        continue;
      }
      if (auto it = listed.find(st.st_ino); it != listed.end()) {
        l.status = out[it->second].status;
        l.segments = out[it->second].segments;
        continue;
      }
      listed.emplace(st.st_ino, i);
      if (::setns(fd.get(), CLONE_NEWIPC) != 0) {
        l.status = Status::FromErrno(errno, "setns " + ns);
        continue;
      }
      struct shm_info info {};
      if (::shmctl(0, SHM_INFO, reinterpret_cast<struct shmid_ds*>(&info)) >= 0 && info.used_ids == 0) continue;
      Result<std::string> text = ReadFile("/proc/sysvipc/shm", 64 << 20);
      if (!text.ok()) {
        l.status = text.status();
        continue;
      }
      l.segments = ParseSysvShm(*text);
    }
  });
  t.join();
  return out;
}

Status RemoveSysvShm(pid_t pid, const SysvExpect& want, const std::string& proc) {
  return InIpcNamespace(pid, proc, [&]() -> Status {
    // IPC_STAT in the segment's namespace; its pids are translated into this
    // thread's pid namespace (the agent's, as /proc/sysvipc/shm's were).
    struct shmid_ds ds;
    if (::shmctl(want.shmid, IPC_STAT, &ds) != 0) return Status::FromErrno(errno, "shmctl IPC_STAT");
    if (ds.shm_nattch != 0) return Status::Precondition("segment is attached again");
    if (ds.shm_cpid != want.cpid) return Status::Precondition("segment id was reused");
    if (ds.shm_lpid != want.lpid || ds.shm_atime != want.atime || ds.shm_dtime != want.dtime) {
      return Status::Precondition("segment was attached or detached since the scan");
    }
    if (::shmctl(want.shmid, IPC_RMID, nullptr) != 0) return Status::FromErrno(errno, "shmctl IPC_RMID");
    return Status::Ok();
  });
}

}  // namespace shmkeeper
