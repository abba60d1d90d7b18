// The fixes doctor prescribes for what it found.
#include <algorithm>
#include <cstdlib>
#include <string>

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

}  // namespace

void Fixes(DoctorReport* r) {
  std::string size = Suggest(*r);
  std::string docker_size = std::to_string(std::atoll(size.c_str())) + "g";
  const std::string& e = r->engine;
  if (e == "docker") {
    r->fixes = {"docker run --shm-size=" + docker_size + " ...",
                "docker-compose: shm_size: \"" + docker_size + "b\" under the service",
                "node-wide, once: shmkeeper install docker --set-as-default (every container then gets the "
                "policy size; --shm-size, or -e SHMKEEPER_SHM_SIZE=" +
                    docker_size + " when no --shm-size is given, asks for more)"};
  } else if (e == "podman") {
    r->fixes = {"podman run --shm-size=" + docker_size + " ...",
                "podman run --annotation shmkeeper.io/shm-size=" + size.substr(0, size.size() - 1) +
                    " ... "
                    "(with shmkeeper install podman on the host)"};
  } else if (e.starts_with("kubernetes")) {
    std::string k8s = size.substr(0, size.size() - 1);  // "2GiB" -> "2Gi"
    r->fixes = {"pod annotation shmkeeper.io/shm-size: \"" + k8s + "\" (shmkeeper on the node)",
                "or mount an emptyDir {medium: Memory, sizeLimit: " + k8s + "} at /dev/shm in the pod spec"};
    if (e.ends_with("cri-o")) r->fixes.push_back("CRI-O alone: annotation shm-size.crio.io: \"" + k8s + "\"");
  } else if (e == "containerd") {
    r->fixes = {"ctr run --mount type=tmpfs,src=shm,dst=/dev/shm,options=size=" + docker_size + " ...",
                "or shmkeeper install containerd (then annotation shmkeeper.io/shm-size)"};
  } else if (!r->in_container) {
    r->fixes = {"the host's /dev/shm: mount -o remount,size=" + docker_size + " /dev/shm",
                "containers: shmkeeper install docker --set-as-default"};
  }
}

}  // namespace shmkeeper
