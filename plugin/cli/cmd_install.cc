// shmkeeper install|uninstall docker|containerd
#include <unistd.h>

#include <climits>
#include <iostream>
#include <memory>

#include "cli.h"
#include "shmkeeper/containerd_config.h"
#include "shmkeeper/docker_config.h"

namespace shmkeeper::cli {
namespace {

// shmkeeper-runtime next to this binary.
std::string DefaultRuntimePath() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "/usr/local/bin/shmkeeper-runtime";
  std::string self(buf, static_cast<size_t>(n));
  return self.substr(0, self.rfind('/')) + "/shmkeeper-runtime";
}

void PrintChange(const char* verb, const DockerInstallOptions& o, const ConfigChange& c) {
  if (o.dry_run) {
    std::cout << (c.changed ? "# would write " : "# unchanged: ") << o.daemon_json << "\n" << c.after;
    return;
  }
  if (!c.changed) {
    std::cout << "shmkeeper: " << o.daemon_json << " already " << verb << "; nothing changed\n";
    return;
  }
  std::cout << "shmkeeper: " << verb << " runtime \"" << o.runtime_name << "\" in " << o.daemon_json
            << (o.set_as_default ? " (default runtime)" : "")
            << (c.reloaded ? "; dockerd reloaded" : "; no running dockerd uses it") << "\n";
}

void AddDocker(CLI::App& parent, Outcome& outcome, bool install) {
  auto opts = std::make_shared<DockerInstallOptions>();
  opts->runtime_path = DefaultRuntimePath();
  CLI::App* cmd = parent.add_subcommand("docker", install ? "Register shmkeeper-runtime in Docker's daemon.json"
                                                          : "Remove shmkeeper-runtime from Docker's daemon.json");
  cmd->add_option("--config", opts->daemon_json, "Docker daemon.json to edit")->capture_default_str();
  cmd->add_option("--runtime-name", opts->runtime_name, "Runtime name in daemon.json")->capture_default_str();
  cmd->add_flag("--dry-run", opts->dry_run, "Print the resulting daemon.json; write nothing");
  if (install) {
    cmd->add_flag("--set-as-default", opts->set_as_default, "Also make it Docker's default-runtime");
    cmd->add_option("--runtime-path", opts->runtime_path, "Path of shmkeeper-runtime")->capture_default_str();
    cmd->add_option("--runtime-config", opts->runtime_config,
                    "shmkeeper config file the runtime is started with (runtimeArgs)");
  }
  cmd->callback([opts, &outcome, install] {
    Result<ConfigChange> c = install ? InstallDocker(*opts) : UninstallDocker(*opts);
    if (!c.ok()) {
      outcome.status = c.status();
      return;
    }
    PrintChange(install ? "installed" : "uninstalled", *opts, *c);
  });
}

void PrintContainerdChange(const char* verb, const ContainerdInstallOptions& o, const ConfigChange& c) {
  if (o.dry_run) {
    std::cout << (c.changed ? "# would write " : "# unchanged: ") << o.config << "\n" << c.after;
    return;
  }
  if (!c.changed) {
    std::cout << "shmkeeper: " << o.config << " already " << verb << "; nothing changed\n";
    return;
  }
  std::cout << "shmkeeper: " << verb << " runtime handler \"" << o.runtime_name << "\" in " << o.config
            << (o.set_as_default ? " (default runtime)" : "")
            << "; restart containerd to apply (systemctl restart containerd)\n";
}

void AddContainerd(CLI::App& parent, Outcome& outcome, bool install) {
  auto opts = std::make_shared<ContainerdInstallOptions>();
  opts->runtime_path = DefaultRuntimePath();
  CLI::App* cmd = parent.add_subcommand(
      "containerd", install ? "Add shmkeeper-runtime as a CRI runtime handler in containerd's config.toml"
                            : "Remove shmkeeper's runtime handler from containerd's config.toml");
  cmd->add_option("--config", opts->config, "containerd config.toml to edit")->capture_default_str();
  cmd->add_option("--runtime-name", opts->runtime_name, "Runtime handler name (RuntimeClass handler)")
      ->capture_default_str();
  cmd->add_flag("--dry-run", opts->dry_run, "Print the resulting config.toml; write nothing");
  if (install) {
    cmd->add_flag("--set-as-default", opts->set_as_default, "Also make it the CRI default_runtime_name");
    cmd->add_option("--runtime-path", opts->runtime_path, "Path of shmkeeper-runtime")->capture_default_str();
  }
  cmd->callback([opts, &outcome, install] {
    Result<ConfigChange> c = install ? InstallContainerd(*opts) : UninstallContainerd(*opts);
    if (!c.ok()) {
      outcome.status = c.status();
      return;
    }
    PrintContainerdChange(install ? "installed" : "uninstalled", *opts, *c);
  });
}

}  // namespace

void RegisterInstall(CLI::App& app, Outcome& outcome) {
  CLI::App* install = app.add_subcommand("install", "Register shmkeeper with a container engine");
  install->require_subcommand(1);
  AddDocker(*install, outcome, true);
  AddContainerd(*install, outcome, true);
  CLI::App* uninstall = app.add_subcommand("uninstall", "Reverse `shmkeeper install`");
  uninstall->require_subcommand(1);
  AddDocker(*uninstall, outcome, false);
  AddContainerd(*uninstall, outcome, false);
}

}  // namespace shmkeeper::cli
