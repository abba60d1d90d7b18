// Where doctor runs: a host or a container, and which engine made it.
#include <sys/stat.h>

#include <cstdlib>
#include <string>

#include "base/fileutil.h"
#include "base/proc_args.h"
#include "doctor/internal.h"

namespace shmkeeper {
namespace {

constexpr ino_t kInitPidNs = 0xEFFFFFFCU;  // PROC_PID_INIT_INO

}  // namespace

ino_t NsInode(const std::string& proc, const char* ns) {
  struct stat st;
  return ::stat((proc + "/self/ns/" + ns).c_str(), &st) == 0 ? st.st_ino : 0;
}

void DetectEngine(const DoctorOptions& o, DoctorReport* r) {
  Result<std::string> all = ReadFile(o.proc + "/self/cgroup", 1 << 16);
  std::string cgtext = all.ok() ? *all : "";
  bool k8s = std::getenv("KUBERNETES_SERVICE_HOST") != nullptr || cgtext.find("kubepods") != std::string::npos;
  r->in_container = NsInode(o.proc, "pid") != kInitPidNs || PathExists(o.root + ".dockerenv") ||
                    PathExists(o.root + "run/.containerenv") || k8s;
  if (!r->in_container) {
    bool docker = !FindProcessesByComm("dockerd", o.proc).empty();
    r->engine = docker ? "host (Docker)" : "host";
    return;
  }
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
