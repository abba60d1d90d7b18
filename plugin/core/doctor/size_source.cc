// Which request decided this /dev/shm's size, as far as the place doctor runs
// in can tell (docs/configuration.md#precedence), and the policy file's state
// on a host.
#include <string>

#include "base/bytes.h"
#include "base/fileutil.h"
#include "decide/config.h"
#include "decide/plan.h"
#include "doctor/doctor.h"

namespace shmkeeper {
namespace {

// SHMKEEPER_SHM_SIZE in the environment doctor runs with (the container's).
std::string EnvValue(const std::string& proc) {
  Result<std::string> environ = ReadFile(proc + "/self/environ", 1 << 20);
  if (!environ.ok()) return "";
  std::string want = std::string(kShmSizeEnv) + "=";
  for (size_t at = 0; at < environ->size();) {
    size_t end = environ->find('\0', at);
    if (end == std::string::npos) end = environ->size();
    std::string_view kv(environ->data() + at, end - at);
    if (kv.starts_with(want)) return std::string(kv.substr(want.size()));
    at = end + 1;
  }
  return "";
}

}  // namespace

void ExplainSizeSource(const DoctorOptions& o, DoctorReport* r) {
  if (!r->present) return;
  if (!r->in_container) {
    r->size_source = "the host's own /dev/shm (its mount; systemd and most distributions: 50% of RAM)";
    Result<Config> policy = LoadConfig(o.policy_path, /*must_exist=*/false);
    if (!policy.ok()) {
      r->findings.push_back("the shmkeeper policy file is invalid: " + policy.status().message() +
                            " (new containers pass through shmkeeper-runtime and shmkeeper-hook with their engine's "
                            "default /dev/shm until it is fixed; check with shmkeeperd --check-config)");
    }
    return;
  }
  std::string env = EnvValue(o.proc);
  if (r->host_ipc) {
    r->size_source = "the host's /dev/shm (host IPC): no per-container size applies";
    return;
  }
  if (!env.empty()) {
    Result<int64_t> asked = ParseSize(env);
    if (asked.ok() && RoundUpToPage(*asked) == r->size_bytes) {
      r->size_source = std::string("env ") + kShmSizeEnv + "=" + env;
      return;
    }
    r->size_source = "not env " + std::string(kShmSizeEnv) + "=" + env + " (" +
                     (asked.ok() ? FormatSize(*asked) : "unparseable") + "): /dev/shm is " + FormatSize(r->size_bytes) +
                     ", so an explicit request won (annotation shmkeeper.io/shm-size, --shm-size or compose "
                     "shm_size rank above the variable), or shmkeeper is not this container's runtime";
    r->findings.push_back(std::string(kShmSizeEnv) + "=" + env + " is set but did not size /dev/shm (" +
                          FormatSize(r->size_bytes) +
                          "): an explicit --shm-size/shm_size or annotation wins over it "
                          "(docs/configuration.md#precedence); change that instead");
    r->size_problem = true;
    return;
  }
  r->size_source = r->size_bytes == kEngineDefaultShmBytes || r->size_bytes == RoundUpToPage(kPodmanDefaultShmBytes)
                       ? "the engine's default: nothing asked for more, or shmkeeper is not this container's runtime"
                       : "an explicit request (annotation, --shm-size, compose shm_size) or the node policy";
}

}  // namespace shmkeeper
