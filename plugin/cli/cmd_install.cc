// shmkeeper install|uninstall docker|containerd|crio|podman
#include <unistd.h>

#include <climits>
#include <iostream>
#include <memory>

#include "base/os.h"
#include "base/term_escape.h"
#include "cli.h"
#include "containerd_live.h"
#include "docker_live.h"
#include "install/containerd_config.h"
#include "install/containerd_template.h"
#include "install/docker_config.h"
#include "install/hook_config.h"

namespace shmkeeper::cli {
namespace {

// Exit status of install/uninstall when the file is written but the running
// engine does not run with it yet (it needs the restart the message names).
constexpr int kExitRestartNeeded = 3;

// Sets `outcome` from a live-state check: a stale engine is one line on
// stderr and exit 3 (the file is as asked; scripts restart on 3), another
// error fails the verb.
void SetLiveOutcome(Outcome& outcome, const Status& live) {
  if (live.code() == Code::kFailedPrecondition) {
    std::cerr << "shmkeeper: " << TermEscape(live.message()) << "\n";
    outcome.exit_code = kExitRestartNeeded;
  } else {
    outcome.status = live;
  }
}

// A shmkeeper binary next to this one.
std::string Sibling(const char* name) {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return std::string("/usr/local/bin/") + name;
  std::string self(buf, static_cast<size_t>(n));
  return self.substr(0, self.rfind('/')) + "/" + name;
}
std::string DefaultRuntimePath() { return Sibling("shmkeeper-runtime"); }

// The OCI runtime CRI-O's handler runs: crun (CRI-O's default), else runc.
std::string DefaultOciRuntime() {
  for (const char* r : {"crun", "runc"}) {
    if (Result<std::string> p = FindExecutable(r); p.ok()) return *p;
  }
  return "";
}

// What an install/uninstall of one config file did, or (dry run) would write.
// `what` names the entry ("runtime \"shmkeeper\""), `tail` says what follows.
void PrintChange(const char* verb, const std::string& path, const std::string& what, bool dry_run,
                 const ConfigChange& c, const std::string& tail) {
  if (dry_run) {
    std::cout << (c.changed ? "# would write " : "# unchanged: ") << path << "\n" << c.after;
  } else if (!c.changed) {
    std::cout << "shmkeeper: " << path << " already " << verb << "; nothing changed\n";
  } else {
    std::cout << "shmkeeper: " << verb << " " << what << " in " << path << tail << "\n";
  }
}

// The file is written and dockerd was sent SIGHUP, but what it runs could not
// be checked: the error says what was applied, why it is unknown whether
// dockerd has it, and how to look.
Status UncheckedDockerChange(const Status& why, const DockerInstallOptions& o, bool install) {
  std::string entry = "runtime \"" + o.runtime_name + "\"" + (o.set_as_default ? " (default runtime)" : "");
  return Status::Internal(
      o.daemon_json + " is " + (install ? "updated: " : "restored: ") + entry + (install ? " added" : " removed") +
      ", and dockerd was sent SIGHUP; whether it runs with the change could not be checked (" + why.message() +
      "). Check with `docker info --format '{{.DefaultRuntime}} {{json .Runtimes}}'`" + "; if it " +
      (install ? "does not list" : "still lists") + " runtime \"" + o.runtime_name + "\", restart dockerd");
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
    PrintChange(install ? "installed" : "uninstalled", opts->daemon_json, "runtime \"" + opts->runtime_name + "\"",
                opts->dry_run, *c,
                std::string(opts->set_as_default ? " (default runtime)" : "") +
                    (c->reloaded ? "; dockerd reloaded" : "; no running dockerd uses it"));
    // A reload is not proof: check what the running dockerd does (docker_live.h).
    if (!opts->dry_run && c->reloaded) {
      Status live = VerifyDockerLive(opts->daemon_json, opts->runtime_name, install, opts->set_as_default);
      SetLiveOutcome(outcome, live.ok() || live.code() == Code::kFailedPrecondition
                                  ? live
                                  : UncheckedDockerChange(live, *opts, install));
    }
  });
}

// What the running containerd has of an install (or an uninstall), after the
// file edit: the tail of the line that reports it.
std::string ContainerdLiveState(const Status& live, size_t users, bool install) {
  if (live.code() == Code::kFailedPrecondition) {
    return install ? "; the running containerd does not have it yet" : "; the running containerd still has it";
  }
  if (!live.ok()) return "; could not ask the running containerd";
  if (users > 0) return install ? "; the running containerd runs with it" : "; the running containerd runs without it";
  return "; no running containerd uses it (it applies at its next start)";
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
  auto template_dir = std::make_shared<std::string>();
  cmd->add_option("--template-dir", *template_dir,
                  "k3s/RKE2: edit the config template in this directory (config-v3.toml.tmpl or config.toml.tmpl, "
                  "see containerd_template.h); --config is then the config.toml generated from it");
  if (install) {
    cmd->add_flag("--set-as-default", opts->set_as_default, "Also make it the CRI default_runtime_name");
    cmd->add_option("--runtime-path", opts->runtime_path, "Path of shmkeeper-runtime")->capture_default_str();
  }
  cmd->callback([opts, template_dir, &outcome, install] {
    const std::string& dir = *template_dir;
    Result<ConfigChange> c =
        !dir.empty() ? (install ? InstallContainerdTemplate(*opts, dir) : UninstallContainerdTemplate(*opts, dir))
        : install    ? InstallContainerd(*opts)
                     : UninstallContainerd(*opts);
    if (!c.ok()) {
      outcome.status = c.status();
      return;
    }
    // containerd reads its config only at start: ask every running
    // containerd that uses the file what it loaded (containerd_live.h).
    Status live = Status::Ok();
    size_t users = 0;
    if (!opts->dry_run) {
      live = VerifyContainerdLive(opts->config, opts->runtime_name, install ? opts->runtime_path : "", install,
                                  opts->set_as_default, &users);
    }
    std::string state = ContainerdLiveState(live, users, install);
    PrintChange(install ? "installed" : "uninstalled", dir.empty() ? opts->config : dir + " (template)",
                "runtime handler \"" + opts->runtime_name + "\"", opts->dry_run, *c,
                std::string(opts->set_as_default ? " (default runtime)" : "") + state);
    if (!live.ok()) SetLiveOutcome(outcome, live);
  });
}

void PrintHookChanges(const char* verb, const HookInstallOptions& o, const std::vector<FileChange>& files) {
  for (const FileChange& f : files) {
    if (o.dry_run) {
      std::cout << (f.change.changed ? "# would " : "# unchanged: ")
                << (f.change.changed ? (f.change.after.empty() ? "remove " : "write ") : "") << f.path << "\n"
                << f.change.after;
    } else {
      std::cout << "shmkeeper: " << f.path << (f.change.changed ? std::string(" ") + verb : " unchanged") << "\n";
    }
  }
  if (!o.dry_run && o.crio) std::cout << "shmkeeper: restart CRI-O to apply (systemctl restart crio)\n";
}

void AddHook(CLI::App& parent, Outcome& outcome, bool install, bool crio) {
  auto opts = std::make_shared<HookInstallOptions>();
  opts->crio = crio;
  opts->hook_path = Sibling("shmkeeper-hook");
  opts->runtime_path = DefaultOciRuntime();
  const char* engine = crio ? "crio" : "podman";
  CLI::App* cmd = parent.add_subcommand(
      engine, install ? (crio ? "Register shmkeeper-hook with CRI-O (hooks.d JSON + crio.conf.d runtime handler)"
                              : "Register shmkeeper-hook with podman (hooks.d JSON)")
                      : (crio ? "Remove shmkeeper's CRI-O files" : "Remove shmkeeper's podman hook"));
  cmd->add_option("--hooks-dir", opts->hooks_dir, "OCI hooks directory")->capture_default_str();
  if (crio) cmd->add_option("--crio-conf-dir", opts->crio_conf_dir, "CRI-O drop-in directory")->capture_default_str();
  cmd->add_flag("--dry-run", opts->dry_run, "Print the files; write nothing");
  cmd->add_option("--root", opts->root, "Write the files under this directory (the host's / mounted in a container)");
  if (install) {
    cmd->add_option("--hook-path", opts->hook_path, "Path of shmkeeper-hook")->capture_default_str();
    cmd->add_option("--hook-config", opts->hook_config, "shmkeeper config file the hook is started with");
    if (crio) {
      cmd->add_option("--runtime-name", opts->runtime_name, "CRI-O runtime handler name")->capture_default_str();
      cmd->add_option("--runtime-path", opts->runtime_path, "OCI runtime of that handler")->capture_default_str();
      cmd->add_flag("--set-as-default", opts->set_as_default, "Also make it CRI-O's default_runtime");
    }
  }
  cmd->callback([opts, &outcome, install] {
    Result<std::vector<FileChange>> c = install ? InstallHook(*opts) : UninstallHook(*opts);
    if (!c.ok()) {
      outcome.status = c.status();
      return;
    }
    PrintHookChanges(install ? "written" : "removed", *opts, *c);
  });
}

}  // namespace

void RegisterInstall(CLI::App& app, Outcome& outcome) {
  CLI::App* install = app.add_subcommand("install", "Register shmkeeper with a container engine");
  install->require_subcommand(1);
  AddDocker(*install, outcome, true);
  AddContainerd(*install, outcome, true);
  AddHook(*install, outcome, true, /*crio=*/true);
  AddHook(*install, outcome, true, /*crio=*/false);
  CLI::App* uninstall = app.add_subcommand("uninstall", "Reverse `shmkeeper install`");
  uninstall->require_subcommand(1);
  AddDocker(*uninstall, outcome, false);
  AddContainerd(*uninstall, outcome, false);
  AddHook(*uninstall, outcome, false, /*crio=*/true);
  AddHook(*uninstall, outcome, false, /*crio=*/false);
}

}  // namespace shmkeeper::cli
