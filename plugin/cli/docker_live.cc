#include "docker_live.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>

#include "base/fileutil.h"
#include "base/json.h"
#include "base/os.h"
#include "base/proc_args.h"

namespace shmkeeper::cli {
namespace {

// The unix socket of a dockerd from its -H/--host flags.
std::string ApiSocket(const std::vector<std::string>& argv) {
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string v;
    const std::string& a = argv[i];
    if ((a == "-H" || a == "--host") && i + 1 < argv.size()) v = argv[i + 1];
    if (a.starts_with("-H=")) v = a.substr(3);
    if (a.starts_with("--host=")) v = a.substr(7);
    if (v.starts_with("unix://")) return v.substr(7);
  }
  return "/var/run/docker.sock";
}

// `docker --host unix://<socket> info --format {{json .}}`: the docker CLI is
// the Engine API client (the static CLI cannot link Debian's shared
// cpp-httplib). stdout captured, at most 4 MiB; stderr dropped.
Result<std::string> DockerInfoJson(const std::string& socket) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::FromErrno(errno, "pipe");
  UniqueFd rd(fds[0]), wr(fds[1]);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, wr.get(), 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
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
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return Status::Internal("docker --host " + host + " info failed");
  return out;
}

Status QueryInfo(DockerdLive* d) {
  SHMK_ASSIGN_OR_RETURN(std::string text, DockerInfoJson(d->socket));
  Json info = Json::parse(text, nullptr, false);
  if (!info.is_object()) return Status::Internal("docker info: not a JSON object");
  d->default_runtime = StringField(info, "DefaultRuntime");
  d->runtimes.clear();
  if (info.contains("Runtimes") && info["Runtimes"].is_object()) {
    for (const auto& [name, v] : info["Runtimes"].items()) d->runtimes.push_back(name);
  }
  return Status::Ok();
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
    d.socket = ApiSocket(*argv);
    SHMK_RETURN_IF_ERROR(QueryInfo(&d).WithContext("dockerd pid " + std::to_string(pid)));
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
