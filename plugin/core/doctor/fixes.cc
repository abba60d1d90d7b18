// The fixes doctor prescribes for what it found.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/bytes.h"
#include "doctor/internal.h"

namespace shmkeeper {
namespace {

std::string Suggest(const DoctorReport& r) {
  int64_t want = std::max<int64_t>(2 * kGiB, r.used_bytes * 2);
  for (const DoctorWorkload& w : r.workloads) want = std::max(want, w.bytes);
  if (r.memcg_limit_bytes) want = std::min(want, r.memcg_limit_bytes);
  return FormatSize((want + kGiB - 1) / kGiB * kGiB);
}

// Docker's node-wide fix, from what doctor can see of shmkeeper: in a
// container, whether shmkeeper-runtime ran it (its preload mount); the node's
// default runtime is out of a container's sight.
std::string DockerNodeFix(const DoctorReport& r, const std::string& docker_size) {
  if (r.shmkeeper_ran) {
    return "shmkeeper-runtime runs this container: -e SHMKEEPER_SHM_SIZE=" + docker_size +
           " asks for a size when no --shm-size is given";
  }
  return "node-wide: this container shows no sign of shmkeeper-runtime (no preload mount). If shmkeeper is "
         "already the host's default runtime (docker info --format '{{.DefaultRuntime}}' on the host), this "
         "container was started with another one (--runtime runc): start it without --runtime. If not, once: "
         "shmkeeper install docker --set-as-default (every container then gets the policy size; --shm-size, or "
         "-e SHMKEEPER_SHM_SIZE=" +
         docker_size + " when no --shm-size is given, asks for more)";
}

// The engine's way to another /dev/shm size.
std::vector<std::string> SizeFixes(const DoctorReport& r) {
  std::string size = Suggest(r);
  std::string docker_size = std::to_string(std::atoll(size.c_str())) + "g";
  std::string annotation_size = size.substr(0, size.size() - 1);  // "2GiB" -> "2Gi"
  const std::string& e = r.engine;
  if (e == "docker") {
    return {"docker run --shm-size=" + docker_size + " ...",
            "docker-compose: shm_size: \"" + docker_size + "b\" under the service", DockerNodeFix(r, docker_size)};
  }
  if (e == "podman") {
    return {"podman run --shm-size=" + docker_size + " ...",
            "podman run --annotation shmkeeper.io/shm-size=" + annotation_size + " ..." +
                (r.shmkeeper_ran ? "" : " (with shmkeeper install podman on the host)")};
  }
  if (e.starts_with("kubernetes")) {
    std::vector<std::string> fixes = {
        "pod annotation shmkeeper.io/shm-size: \"" + annotation_size + "\" (shmkeeper on the node)",
        "or mount an emptyDir {medium: Memory, sizeLimit: " + annotation_size + "} at /dev/shm in the pod spec"};
    if (e.ends_with("cri-o")) fixes.push_back("CRI-O alone: annotation shm-size.crio.io: \"" + annotation_size + "\"");
    return fixes;
  }
  if (e == "containerd") {
    return {"ctr run --mount type=tmpfs,src=shm,dst=/dev/shm,options=size=" + docker_size + " ...",
            r.shmkeeper_ran ? "or annotation shmkeeper.io/shm-size (shmkeeper-runtime runs this container)"
                            : "or shmkeeper install containerd (then annotation shmkeeper.io/shm-size)"};
  }
  if (!r.in_container) {
    return {"the host's /dev/shm: mount -o remount,size=" + docker_size + " /dev/shm",
            r.shmkeeper_default ? "containers: shmkeeper-runtime is already Docker's default runtime "
                                  "(/etc/docker/daemon.json); a container started with --runtime runc bypasses it"
                                : "containers: shmkeeper install docker --set-as-default"};
  }
  return {};
}

// Files no process holds: reclaim them, no size changes that.
std::vector<std::string> LeakFixes(const DoctorReport& r) {
  std::vector<std::string> fixes = {
      "leaked files: shmkeeper leaks on the node lists them (with their containers), shmkeeper reclaim --yes "
      "removes those the agent may reclaim (docs/agent.md)"};
  if (r.in_container) {
    fixes.push_back("or here, once nothing will open it again: rm " + r.leaked.front().path +
                    (r.leaked.size() > 1 ? " (and the other " + std::to_string(r.leaked.size() - 1) + ")" : ""));
  }
  return fixes;
}

}  // namespace

void Fixes(DoctorReport* r) {
  r->fixes.clear();
  if (r->size_problem) r->fixes = SizeFixes(*r);
  if (!r->leaked.empty()) {
    std::vector<std::string> leaks = LeakFixes(*r);
    r->fixes.insert(r->fixes.end(), leaks.begin(), leaks.end());
  }
}

}  // namespace shmkeeper
