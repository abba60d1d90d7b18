// Finding the containers a node really runs: the OCI runtimes' state
// directories (runc keeps <root>/<id>/state.json, crun <root>/<id>/status, for every container
// of Docker, containerd and CRI-O), the bundle's config.json for annotations
// and the size request, and the Docker Engine API for names and compose
// labels. Everything read here is untrusted input.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/fileutil.h"
#include "base/status.h"

namespace shmkeeper {

struct ContainerRecord {
  std::string id;
  std::string runtime_root;  // state directory it was found in
  std::string bundle;
  pid_t pid = 0;             // host pid of the init process
  uint64_t start_ticks = 0;  // its start time, to detect pid reuse
  int64_t created_sec = 0;
  std::string name;                                // Docker name or CRI container name
  std::map<std::string, std::string> annotations;  // from the OCI spec
  std::map<std::string, std::string> labels;       // from the Docker API
  int64_t requested_bytes = 0;                     // what the spec asks for, in whole pages (0 = unknown)
  std::string requested_source;
  int64_t memory_limit_bytes = 0;   // the memory limit `shm.default: auto` used (sizing record; 0 = none)
  std::string memory_limit_source;  // where it was read (see MemoryLimit)
  std::string shm_bind_source;      // host path bound at /dev/shm by the spec ("" = not a bind)
  std::string sized_by;             // from the sizing record: runtime, hook, reconcile, nri, nri-late ("" = none)
  bool owns_shm = false;            // the shm tmpfs bound at /dev/shm was made for this very container
  // podman (annotation io.container.manager: libpod): the pod's id (from the
  // spec's cgroupsPath) and, on the pod's infra container, the pod's name (its
  // hostname, which podman sets to the pod name unless `pod create --hostname`).
  std::string pod_id, pod_name;
};

// The storage file podman keeps container names in: for a podman bundle
// <storage>/<driver>-containers/<id>/userdata, <storage>/<driver>-containers/containers.json;
// "" for any other bundle.
std::string PodmanStorageFile(const std::string& bundle, const std::string& id);

// The pod id in a podman container's cgroupsPath: cgroupfs
// ".../<pod id>/libpod-<id>", systemd "machine-libpod_pod_<pod id>.slice:libpod:<id>"; "" outside a pod.
std::string PodmanPodId(const std::string& cgroups_path);

// The default state roots of runc/crun under Docker, containerd and CRI-O.
std::vector<std::string> DefaultRuntimeRoots();

// Live containers under `roots` (a root that does not exist is skipped).
// A container whose init process is gone or was replaced is skipped.
std::vector<ContainerRecord> DiscoverContainers(const std::vector<std::string>& roots,
                                                const std::string& proc = "/proc");

// Discovery that remembers what it parsed (the agent's scans): a container's
// runtime state (runc's state.json is ~30 KiB of JSON), its bundle's
// config.json, sizing record and podman storage file are parsed again only
// when one of them changed (device, inode, size, mtime, ctime), and its init
// process is checked at every call (gone or replaced: the container is
// skipped). The init is known by a pidfd (pidfd_open(2), Linux 5.3), opened
// when the state is parsed and checked against the init's start time then:
// at later calls one poll(2) of it says whether that very process has exited
// (a pid cannot be reused before it has), instead of reading
// /proc/<pid>/stat. A pidfd pins no namespace and no mount (only the kernel's
// struct pid), so holding one across scans leaves a stopped container's
// teardown alone; without pidfds (older kernels) /proc/<pid>/stat is read
// at every call, as before. A node whose containers do not change costs a
// few stat(2)s and a poll(2) per container, not a JSON parse. Everything else
// as DiscoverContainers.
// Thread-safety: one thread at a time (the scan loop).
class ContainerDiscovery {
 public:
  struct Stamp {
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    int64_t mtime_ns = 0, ctime_ns = 0;
    bool operator==(const Stamp&) const = default;
  };
  std::vector<ContainerRecord> Discover(const std::vector<std::string>& roots, const std::string& proc = "/proc");

 private:
  struct Entry {
    Stamp state, config, sizing, storage;
    ContainerRecord record;
    UniqueFd init;  // pidfd of record.pid (invalid: none could be opened)
  };
  std::map<std::string, Entry> cache_;  // by <root>/<id>
};

// What is wrong with a configured runtime root, one line each with the fix:
// a root that exists but holds no container state (runc's <id>/state.json,
// crun's <id>/status), only directories that themselves hold containers (a
// runtime's root above its namespace directories, as containerd's runc root
// above k8s.io), or nothing the agent knows. An empty or missing root is fine (no containers yet).
std::vector<std::string> RuntimeRootWarnings(const std::vector<std::string>& roots);

// Adds Docker names and labels (compose project/service) from the Engine API
// on `socket` (every container it has, created ones included: one whose
// runtime state exists is created at least). kNotFound when no engine
// listens there. `listed` (may be null) gets the ids of `containers` Docker
// listed.
Status EnrichFromDocker(const std::string& socket, std::vector<ContainerRecord>* containers,
                        std::set<std::string>* listed = nullptr);

}  // namespace shmkeeper
