#include "containerd_live.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <sstream>

#include "base/fileutil.h"
#include "base/json.h"
#include "base/proc_args.h"
#include "cri/runtime_v1.grpc.pb.h"
#include "install/containerd_config.h"

namespace shmkeeper::cli {
namespace {

constexpr const char* kDefaultSocket = "/run/containerd/containerd.sock";

// `path` as process `pid` resolves it: through its root, and relative paths
// through its working directory.
std::string InProcess(pid_t pid, const std::string& path) {
  std::string proc = "/proc/" + std::to_string(pid);
  return path.starts_with("/") ? proc + "/root" + path : proc + "/cwd/" + path;
}

bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa {};
  struct stat sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

bool SameMountNamespace(pid_t pid) { return SameFile("/proc/self/ns/mnt", "/proc/" + std::to_string(pid) + "/ns/mnt"); }

// containerd's flags: --config/-c and --address/-a.
std::string Flag(const std::vector<std::string>& argv, const char* name, const char* short_name) {
  std::string v = FlagValue(argv, name);
  return v.empty() ? FlagValue(argv, short_name) : v;
}

// CRI Status (verbose) on `socket`: the "config" JSON containerd's CRI plugin
// put in `info`.
Status AskCri(ContainerdLive* c) {
  auto channel = grpc::CreateChannel("unix:" + c->socket, grpc::InsecureChannelCredentials());
  auto stub = runtime::v1::RuntimeService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  runtime::v1::StatusRequest req;
  req.set_verbose(true);
  runtime::v1::StatusResponse resp;
  grpc::Status s = stub->Status(&ctx, req, &resp);
  if (!s.ok()) {
    return Status::Internal("containerd pid " + std::to_string(c->pid) + " (" + c->socket + "): CRI Status failed (" +
                            s.error_message() +
                            "); cannot tell which runtime handlers it runs (is its CRI plugin disabled?)");
  }
  auto it = resp.info().find("config");
  Json cfg = it == resp.info().end() ? Json() : Json::parse(it->second, nullptr, false);
  if (!cfg.is_object() || !cfg.contains("containerd") || !cfg["containerd"].is_object()) {
    return Status::Internal("containerd pid " + std::to_string(c->pid) + " (" + c->socket +
                            "): CRI Status has no config to compare with");
  }
  const Json& ctd = cfg["containerd"];
  c->default_runtime = StringField(ctd, "defaultRuntimeName");
  c->runtimes.clear();
  if (ctd.contains("runtimes") && ctd["runtimes"].is_object()) {
    for (const auto& [name, r] : ctd["runtimes"].items()) {
      const Json* opts = r.is_object() && r.contains("options") ? &r["options"] : nullptr;
      c->runtimes[name] = opts ? StringField(*opts, "BinaryName") : "";
    }
  }
  return Status::Ok();
}

// The systemd unit (last cgroup path component ending in .service) `pid` runs in, or "".
std::string SystemdUnit(pid_t pid) {
  Result<std::string> text = ReadFile("/proc/" + std::to_string(pid) + "/cgroup", 1 << 16);
  if (!text.ok()) return "";
  std::istringstream lines(*text);
  for (std::string line; std::getline(lines, line);) {
    std::string path = line.substr(line.rfind(':') + 1);
    std::string last = path.substr(path.rfind('/') + 1);
    if (last.ends_with(".service")) return last;
  }
  return "";
}

std::string Describe(const ContainerdLive& c) {
  std::string out = "default runtime \"" + c.default_runtime + "\", handlers ";
  bool first = true;
  for (const auto& [name, binary] : c.runtimes) {
    out += (first ? "" : ", ") + name + (binary.empty() ? "" : " (" + binary + ")");
    first = false;
  }
  return first ? out + "(none)" : out;
}

bool Applied(const ContainerdLive& c, const std::string& runtime, const std::string& binary, bool install,
             bool as_default) {
  auto it = c.runtimes.find(runtime);
  if (!install) return it == c.runtimes.end() && c.default_runtime != runtime;
  return it != c.runtimes.end() && (binary.empty() || it->second == binary) &&
         (!as_default || c.default_runtime == runtime);
}

}  // namespace

Result<std::vector<ContainerdLive>> ContainerdsUsing(const std::string& config) {
  std::vector<ContainerdLive> out;
  for (pid_t pid : FindProcessesByComm("containerd")) {
    Result<std::vector<std::string>> argv = ProcCmdline(pid);
    if (!argv.ok()) continue;
    ContainerdLive c;
    c.pid = pid;
    c.config = Flag(*argv, "config", "c");
    if (c.config.empty()) c.config = kContainerdConfig;
    if (!SameFile(config, InProcess(pid, c.config))) continue;
    std::string sock = Flag(*argv, "address", "a");
    if (sock.empty()) {
      Result<std::string> text = ReadFile(InProcess(pid, c.config));
      if (text.ok()) sock = ContainerdGrpcAddress(*text);
    }
    if (sock.empty()) sock = kDefaultSocket;
    c.socket = SameMountNamespace(pid) ? sock : InProcess(pid, sock);
    SHMK_RETURN_IF_ERROR(AskCri(&c));
    out.push_back(std::move(c));
  }
  return out;
}

std::string ContainerdRestartHint(const ContainerdLive& c) {
  bool systemd = ::access("/proc/1/root/run/systemd/system", F_OK) == 0;
  std::string unit = systemd ? SystemdUnit(c.pid) : "";
  if (unit.starts_with("snap.")) {  // snap.microk8s.daemon-containerd.service
    return "`snap restart " + unit.substr(5, unit.size() - 5 - 8) + "`";
  }
  if (!unit.empty()) return "`systemctl restart " + unit.substr(0, unit.size() - 8) + "`";
  if (c.config.starts_with("/var/lib/rancher/k3s/")) return "`systemctl restart k3s` (or k3s-agent on an agent node)";
  if (c.config.starts_with("/var/lib/rancher/rke2/")) return "`systemctl restart rke2-server` (or rke2-agent)";
  if (c.config.starts_with("/var/snap/microk8s/")) return "`snap restart microk8s.daemon-containerd`";
  if (systemd) return "`systemctl restart containerd`";
  return "no init system shmkeeper knows runs it (no systemd): stop pid " + std::to_string(c.pid) +
         " and start it again the way it was started (containerd --config " + c.config + ")";
}

Status VerifyContainerdLive(const std::string& config, const std::string& runtime, const std::string& binary,
                            bool install, bool as_default, size_t* users) {
  SHMK_ASSIGN_OR_RETURN(std::vector<ContainerdLive> live, ContainerdsUsing(config));
  *users = live.size();
  for (const ContainerdLive& c : live) {
    if (Applied(c, runtime, binary, install, as_default)) continue;
    return Status::Precondition(
        config + " is " + (install ? "updated" : "restored") + ", but containerd (pid " + std::to_string(c.pid) + ", " +
        c.socket + ") still runs with " + Describe(c) +
        ": containerd reads its config only when it starts. Restart it: " + ContainerdRestartHint(c) + "; " +
        (install ? "until then pods for handler \"" + runtime + "\" fail to start and other pods get no shmkeeper"
                 : "until then handler \"" + runtime + "\"" +
                       (c.default_runtime == runtime ? " (the default: every new pod)" : "") +
                       " still runs shmkeeper-runtime: keep its binaries in place") +
        ". Running pods keep running");
  }
  return Status::Ok();
}

}  // namespace shmkeeper::cli
