#include "docker_live.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>

#include "base/fileutil.h"
#include "base/os.h"
#include "base/proc_args.h"
#include "install/docker_info.h"

namespace shmkeeper::cli {
namespace {

// `docker --host unix://<socket> info --format {{json .}}`: the docker CLI is
// the Engine API client (the static CLI cannot link Debian's shared
// cpp-httplib). stdout captured, at most 4 MiB; stderr kept for the error.
Result<std::string> DockerInfoJson(const std::string& socket) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::FromErrno(errno, "pipe");
  UniqueFd rd(fds[0]), wr(fds[1]);
  UniqueFd err(::memfd_create("docker-info-stderr", MFD_CLOEXEC));
  if (!err.valid()) return Status::FromErrno(errno, "memfd_create");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, wr.get(), 1);
  posix_spawn_file_actions_adddup2(&fa, err.get(), 2);
  std::string host = "unix://" + socket;
  std::vector<std::string> args = {"docker", "--host", host, "info", "--format", "{{json .}}"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = ::posix_spawnp(&pid, "docker", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return Status::FromErrno(rc, "run docker info (the docker CLI checks what dockerd runs)");
  wr.reset();
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = ::read(rd.get(), buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || out.size() > (4u << 20)) break;
    out.append(buf, static_cast<size_t>(n));
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return out;
  ssize_t n = ::pread(err.get(), buf, 1024, 0);
  std::string said(buf, n > 0 ? static_cast<size_t>(n) : 0);
  said = said.substr(0, said.find('\n'));
  return Status::Internal("docker --host " + host + " info failed" + (said.empty() ? "" : ": " + said));
}

Status QueryInfo(DockerdLive* d) {
  SHMK_ASSIGN_OR_RETURN(std::string text, DockerInfoJson(d->socket));
  SHMK_ASSIGN_OR_RETURN(DockerInfo info, ParseDockerInfo(text));
  d->default_runtime = info.default_runtime;
  d->runtimes = info.runtimes;
  return Status::Ok();
}

// The API socket of dockerd `pid` (command line `argv`, config file `cfg`).
Result<std::string> ApiSocketOf(const std::vector<std::string>& argv, const std::string& cfg) {
  Result<OptionalFile> file = ReadOptionalFile(cfg, 4 << 20);
  if (!file.ok()) return file.status();
  Result<std::string> socket = DockerdApiSocket(argv, file->exists ? file->text : "");
  if (!socket.ok()) return socket.status().WithContext(cfg);
  return socket;
}

bool Applied(const DockerdLive& d, const std::string& runtime, bool install, bool as_default) {
  bool listed = std::find(d.runtimes.begin(), d.runtimes.end(), runtime) != d.runtimes.end();
  if (install) return listed && (!as_default || d.default_runtime == runtime);
  return !listed && d.default_runtime != runtime;
}

std::string Joined(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

Result<std::vector<DockerdLive>> DockerdsUsing(const std::string& daemon_json) {
  Result<std::string> want_real = Os::Default()->RealPath(daemon_json);
  std::string want = want_real.ok() ? *want_real : daemon_json;
  std::vector<DockerdLive> out;
  for (pid_t pid : FindProcessesByComm("dockerd")) {
    Result<std::vector<std::string>> argv = ProcCmdline(pid);
    if (!argv.ok()) continue;
    std::string cfg = FlagValue(*argv, "config-file");
    if (cfg.empty()) cfg = "/etc/docker/daemon.json";
    Result<std::string> real = Os::Default()->RealPath(cfg);
    if ((real.ok() ? *real : cfg) != want) continue;
    DockerdLive d;
    d.pid = pid;
    std::string who = "dockerd pid " + std::to_string(pid);
    Result<std::string> socket = ApiSocketOf(*argv, cfg);
    if (!socket.ok()) return Status::Internal(who + ": " + socket.status().message());
    d.socket = *socket;
    SHMK_RETURN_IF_ERROR(QueryInfo(&d).WithContext(who + ", " + d.socket));
    out.push_back(std::move(d));
  }
  return out;
}

Status VerifyDockerLive(const std::string& daemon_json, const std::string& runtime, bool install, bool as_default) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    SHMK_ASSIGN_OR_RETURN(std::vector<DockerdLive> live, DockerdsUsing(daemon_json));
    const DockerdLive* stale = nullptr;
    for (const DockerdLive& d : live) {
      if (!Applied(d, runtime, install, as_default)) stale = &d;
    }
    if (!stale) return Status::Ok();
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::Precondition(
          daemon_json + " is " + (install ? "updated" : "restored") + ", but dockerd (pid " +
          std::to_string(stale->pid) + ", " + stale->socket + ") still runs with default runtime \"" +
          stale->default_runtime + "\" and runtimes " + Joined(stale->runtimes) +
          ": dockerd does not apply a change of default-runtime or runtimes on a reload. Restart it: "
          "`systemctl restart docker` (systemd), `service docker restart` (sysvinit/OpenRC), or stop pid " +
          std::to_string(stale->pid) + " and start it again; " +
          (install ? "until then new containers do not go through shmkeeper"
                   : "until then new containers still go through shmkeeper-runtime: keep its binaries in place") +
          ". Running containers keep running; stopping and removing them works either way");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace shmkeeper::cli
