// Registering shmkeeper-hook with CRI-O and podman.
//
// Both read OCI hook definitions from hooks.d directories; CRI-O also reads
// drop-ins from crio.conf.d, merged key by key over crio.conf, so shmkeeper
// owns whole files there instead of editing the user's: a hooks.d JSON
// (`shmkeeper.json`) and, for CRI-O, `99-shmkeeper.conf` with a runtime
// handler "shmkeeper" that allows the ShmSize annotation. A file of that name
// that shmkeeper did not write is never overwritten or removed.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "install/docker_config.h"

namespace shmkeeper {

inline constexpr const char* kDefaultHooksDir = "/usr/share/containers/oci/hooks.d";
inline constexpr const char* kDefaultCrioConfDir = "/etc/crio/crio.conf.d";

struct HookInstallOptions {
  bool crio = true;         // false: podman (hooks.d only)
  std::string hook_path;    // absolute path of shmkeeper-hook
  std::string hook_config;  // shmkeeper config for the hook ("" = its default)
  std::string hooks_dir = kDefaultHooksDir;
  std::string crio_conf_dir = kDefaultCrioConfDir;
  std::string runtime_name = "shmkeeper";  // CRI-O handler (RuntimeClass handler)
  std::string runtime_path;                // its OCI runtime (crun or runc)
  bool set_as_default = false;             // CRI-O default_runtime
  bool dry_run = false;
  // Prefix for the files written (the host's / mounted in a container);
  // the paths inside them stay as the engine sees them.
  std::string root;
};

struct FileChange {
  std::string path;
  ConfigChange change;
};

// The files' contents (pure).
std::string HookJson(const HookInstallOptions& opts);
std::string CrioDropIn(const HookInstallOptions& opts);

Result<std::vector<FileChange>> InstallHook(const HookInstallOptions& opts);
Result<std::vector<FileChange>> UninstallHook(const HookInstallOptions& opts);

}  // namespace shmkeeper
