// `shmkeeper doctor`: what the shared memory situation is where it runs (a
// host or any container) and the exact fix for the engine it detects.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/json.h"
#include "base/status.h"
#include "decide/config.h"
#include "scan/sysv.h"

namespace shmkeeper {

struct DoctorFile {
  std::string path;
  int64_t bytes = 0;
  std::vector<std::pair<pid_t, std::string>> holders;  // pid, command
  std::string leak_reason;                             // non-empty: looks leaked
};

// A workload of the table in workloads.h that a running process shows.
struct DoctorWorkload {
  std::string name;   // "PostgreSQL"
  pid_t pid = 0;      // the first process that showed it
  int64_t bytes = 0;  // the size it wants
  std::string symptom, source;
};

struct DoctorReport {
  std::string shm_path = "/dev/shm";
  bool present = false;
  int64_t size_bytes = 0, used_bytes = 0, free_bytes = 0;
  std::string mount_source, fstype, mount_options;
  ino_t ipc_ns = 0;
  bool host_ipc = false;  // the host's initial IPC namespace
  // In a container: decided by the kernel's view of this process only
  // (where.cc); container_evidence says which ("its own PID namespace", ...).
  bool in_container = false;
  std::string container_evidence;
  // In a container: shmkeeper-runtime edited its spec (its preload mount is
  // there). On a host: Docker's daemon.json makes shmkeeper-runtime the
  // default runtime. What doctor can see of shmkeeper; the fixes follow it.
  bool shmkeeper_ran = false;
  bool shmkeeper_default = false;
  // A finding that another /dev/shm size changes (too small, full of files
  // that are held, over the memory limit, a request that did not take): only
  // then are sizes prescribed. Leaked files get the reclaim fixes instead.
  bool size_problem = false;
  std::string engine;  // docker, podman, kubernetes/containerd, kubernetes/cri-o, containerd, host, none
  std::vector<SysvSegment> sysv;
  std::vector<DoctorFile> largest;
  std::vector<DoctorFile> leaked;
  int64_t memcg_limit_bytes = 0;  // 0: none
  int64_t memcg_shmem_bytes = 0;
  std::vector<std::string> findings;      // what is wrong, most important first
  std::vector<std::string> fixes;         // exact commands or settings for this engine
  std::vector<std::string> warnings;      // framework-specific
  std::vector<DoctorWorkload> workloads;  // once per workload, in table order of discovery
  std::string size_source;                // which request decided the size, as far as can be told from here
};

struct DoctorOptions {
  std::string shm_path = "/dev/shm";
  std::string proc = "/proc";
  std::string root = "/";  // engine markers (/.dockerenv, /run/.containerenv), etc/docker/daemon.json
  std::string policy_path = kDefaultConfigPath;  // on a host: the policy file the runtime reads
};

// Fills report->size_source (docs/configuration.md#precedence: a
// SHMKEEPER_SHM_SIZE that an explicit size overrode is a finding) and, on a
// host, a finding for an invalid policy file. REQUIRES: engine and size known.
void ExplainSizeSource(const DoctorOptions& options, DoctorReport* report);

Result<DoctorReport> RunDoctor(const DoctorOptions& options);
// camelCase keys after "schemaVersion" (kJsonSchemaVersion), every key present.
Json DoctorToJson(const DoctorReport& report);
std::string DoctorToText(const DoctorReport& report);

}  // namespace shmkeeper
