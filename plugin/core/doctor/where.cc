// Where doctor runs: a host or a container, and which engine made it.
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "base/fileutil.h"
#include "base/json.h"
#include "base/proc_args.h"
#include "doctor/internal.h"

namespace shmkeeper {
namespace {

// The kernel's fixed inodes of the initial namespaces (include/linux/proc_ns.h).
constexpr ino_t kInitPidNs = 0xEFFFFFFCU;     // PROC_PID_INIT_INO
constexpr ino_t kInitUtsNs = 0xEFFFFFFEU;     // PROC_UTS_INIT_INO
constexpr ino_t kInitCgroupNs = 0xEFFFFFFBU;  // PROC_CGROUP_INIT_INO

// The inode <proc>/<pid>/ns/<ns> names ("pid:[4026531836]"), read with
// readlink: 0 when the link cannot be read (ptrace rules hide another
// process's namespaces without CAP_SYS_PTRACE) or the kernel lacks it.
ino_t NsOf(const std::string& proc, const std::string& pid, const char* ns) {
  char buf[64];
  ssize_t n = ::readlink((proc + "/" + pid + "/ns/" + ns).c_str(), buf, sizeof buf - 1);
  if (n <= 0) return 0;
  std::string link(buf, static_cast<size_t>(n));
  size_t open = link.find(":["), close = link.rfind(']');
  if (open == std::string::npos || close == std::string::npos || close < open + 3) return 0;
  ino_t v = 0;
  for (size_t i = open + 2; i < close; ++i) {
    if (link[i] < '0' || link[i] > '9') return 0;
    v = v * 10 + static_cast<ino_t>(link[i] - '0');
  }
  return v;
}

// Whether a cgroup line of /proc/self/cgroup is a container's, as the
// engines name them (docker/<id>, docker-<id>.scope, libpod-<id>, kubepods,
// cri-containerd-<id>, crio-<id>).
bool ContainerCgroup(const std::string& cgroups) {
  for (const char* mark : {"/docker/", "/docker-", "/libpod-", "/kubepods", "/cri-containerd-", "/crio-"}) {
    if (cgroups.find(mark) != std::string::npos) return true;
  }
  return false;
}

// Why this process is in a container ("" = it is not), from the kernel's
// view of it only, never from files in its root (an image or an admin can
// leave a /.dockerenv anywhere): a PID, UTS or cgroup namespace other than
// the initial one; a mount namespace other than that of the initial
// namespaces' pid 1, or of pid 2 (kthreadd) where pid 1's is hidden (a
// --pid=host container still has its own); or a container's cgroup.
std::string ContainerEvidence(const std::string& proc, const std::string& cgroups) {
  auto differs = [&](const char* ns, ino_t init) {
    ino_t self = NsOf(proc, "self", ns);
    return self != 0 && self != init;
  };
  if (differs("pid", kInitPidNs)) return "its own PID namespace";
  if (differs("uts", kInitUtsNs)) return "its own UTS namespace";
  if (differs("cgroup", kInitCgroupNs)) return "its own cgroup namespace";
  ino_t mnt = NsOf(proc, "self", "mnt");
  for (const char* pid : {"1", "2"}) {
    ino_t theirs = NsOf(proc, pid, "mnt");
    if (theirs == 0) continue;
    if (mnt != 0 && mnt != theirs) return std::string("a mount namespace other than pid ") + pid + "'s";
    break;
  }
  if (ContainerCgroup(cgroups)) return "a container's cgroup";
  return "";
}

// Whether shmkeeper-runtime edited this container's spec: its preload library
// is bind-mounted at /run/shmkeeper/ or /.shmkeeper/ (decide/inject.h).
bool ShmkeeperMounts(const std::string& proc) {
  Result<std::string> info = ReadFile(proc + "/self/mountinfo", 4 << 20);
  if (!info.ok()) return false;
  for (const char* at : {" /run/shmkeeper/libshmkeeper-preload.so ", " /.shmkeeper/libshmkeeper-preload.so "}) {
    if (info->find(at) != std::string::npos) return true;
  }
  return false;
}

// Whether the host's Docker runs shmkeeper-runtime by default: daemon.json's
// default-runtime names a runtime whose path is a shmkeeper-runtime.
bool DockerDefaultIsShmkeeper(const std::string& root) {
  Result<std::string> text = ReadFile(root + "etc/docker/daemon.json", 1 << 20);
  if (!text.ok()) return false;
  Json daemon = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!daemon.is_object()) return false;
  std::string name = StringField(daemon, "default-runtime");
  auto runtimes = daemon.find("runtimes");
  if (name.empty() || runtimes == daemon.end() || !runtimes->is_object() || !runtimes->contains(name)) return false;
  std::string path = StringField((*runtimes)[name], "path");
  return path == "shmkeeper-runtime" || path.ends_with("/shmkeeper-runtime");
}

}  // namespace

ino_t NsInode(const std::string& proc, const char* ns) { return NsOf(proc, "self", ns); }

void DetectEngine(const DoctorOptions& o, DoctorReport* r) {
  Result<std::string> all = ReadFile(o.proc + "/self/cgroup", 1 << 16);
  std::string cgtext = all.ok() ? *all : "";
  r->container_evidence = ContainerEvidence(o.proc, cgtext);
  r->in_container = !r->container_evidence.empty();
  if (!r->in_container) {
    bool docker = !FindProcessesByComm("dockerd", o.proc).empty();
    r->engine = docker ? "host (Docker)" : "host";
    r->shmkeeper_default = DockerDefaultIsShmkeeper(o.root);
    return;
  }
  r->shmkeeper_ran = ShmkeeperMounts(o.proc);
  // Which engine, once the kernel says this is a container: the engines' own
  // marks (files, env, cgroup names) are good enough for naming it.
  bool k8s = std::getenv("KUBERNETES_SERVICE_HOST") != nullptr || cgtext.find("kubepods") != std::string::npos;
  if (k8s) {
    r->engine = cgtext.find("crio") != std::string::npos ? "kubernetes/cri-o" : "kubernetes/containerd";
  } else if (PathExists(o.root + "run/.containerenv") || cgtext.find("libpod") != std::string::npos) {
    r->engine = "podman";
  } else if (PathExists(o.root + ".dockerenv") || cgtext.find("docker") != std::string::npos) {
    r->engine = "docker";
  } else if (cgtext.find("containerd") != std::string::npos) {
    r->engine = "containerd";
  } else {
    r->engine = "unknown container engine";
  }
}

}  // namespace shmkeeper
