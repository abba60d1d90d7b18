// `shmkeeper man [BINARY]` and `shmkeeper completion bash|zsh`: generated from
// the CLI11 definitions of the five binaries (clidefs.h and this binary's own
// verbs), so option lists cannot drift from what the binaries parse.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli.h"
#include "clidefs.h"
#include "clidoc.h"
#include "shmkeeper/version.h"

namespace shmkeeper::cli {
namespace {

ManInfo InfoFor(const std::string& binary) {
  ManInfo info;
  info.version = SHMKEEPER_VERSION;
  info.see_also = {"shmkeeper(1)", "shmkeeperd(1)", "shmkeeper-runtime(1)", "shmkeeper-hook(1)", "shmkeeper-doctor(1)"};
  std::erase(info.see_also, binary + "(1)");
  const std::pair<std::string, std::string> policy = {"/etc/shmkeeper/config.yaml",
                                                      "The node policy ($SHMKEEPER_CONFIG overrides the path)."};
  if (binary == "shmkeeper") {
    info.description =
        "Installs shmkeeper into container engines (Docker, containerd, podman, CRI-O), asks the node agent what "
        "shared memory is in use and by whom, reclaims leaked segments, and checks compose files.\n\n"
        "Exit status: 0 on success, 1 on a failure or findings, 2 on bad input.";
    info.files = {policy};
  } else if (binary == "shmkeeperd") {
    info.description =
        "The node agent: scans shared memory (/dev/shm of every container and the host, SysV segments), serves "
        "gRPC on a unix socket and Prometheus metrics over HTTP, and reclaims segments no process holds.\n\n"
        "SIGHUP re-reads the policy; an invalid file keeps the running policy.";
    info.files = {policy};
  } else if (binary == "shmkeeper-runtime") {
    info.description =
        "Configured in the engine in place of runc: on create and run it sizes the container's /dev/shm from "
        "the request (annotation, --shm-size, SHMKEEPER_SHM_SIZE) and the node policy, writes one line to the "
        "decision log, then execs runc or crun with the same arguments. Every other command is passed on "
        "unchanged.";
    info.files = {policy, {"/var/log/shmkeeper/runtime.log", "The decision log (log.path; rotated at log.maxSize)."}};
  } else if (binary == "shmkeeper-hook") {
    info.description =
        "The same sizing as shmkeeper-runtime, as an OCI hook for engines whose runtime cannot be wrapped "
        "(CRI-O, podman): reads the container state on stdin.";
    info.files = {policy};
  } else if (binary == "shmkeeper-doctor") {
    info.description =
        "Diagnoses /dev/shm where it runs (in a container or on the host): its size, where the size came from, "
        "and the fix that takes effect. A static binary to copy into any container.";
  }
  return info;
}

// The five apps: this binary's own root, the others built from clidefs.h.
struct Apps {
  CLI::App agent, runtime, hook, doctor;
  AgentdFlags agent_flags;
  HookFlags hook_flags;
  DoctorFlags doctor_flags;
  explicit Apps() {
    DefineAgentCli(agent, &agent_flags);
    DescribeRuntimeCli(runtime);
    DefineHookCli(hook, &hook_flags);
    DefineDoctorCli(doctor, &doctor_flags);
  }
  const CLI::App* Find(const CLI::App* self, const std::string& binary) const {
    if (binary == "shmkeeperd") return &agent;
    if (binary == "shmkeeper-runtime") return &runtime;
    if (binary == "shmkeeper-hook") return &hook;
    if (binary == "shmkeeper-doctor") return &doctor;
    return self;
  }
};

}  // namespace

void RegisterMan(CLI::App& app, Outcome&) {
  CLI::App* root = &app;
  auto binary = std::make_shared<std::string>("shmkeeper");
  CLI::App* man = app.add_subcommand("man", "Print the man page (roff) of a shmkeeper binary");
  man->add_option("binary", *binary,
                  "shmkeeper (default), shmkeeperd, shmkeeper-runtime, shmkeeper-hook or shmkeeper-doctor")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(kBinaries), std::end(kBinaries))));
  man->callback([root, binary] {
    Apps apps;
    std::cout << ManPage(*apps.Find(root, *binary), InfoFor(*binary));
  });
  auto shell = std::make_shared<std::string>();
  CLI::App* completion =
      app.add_subcommand("completion", "Print the bash or zsh completion script for shmkeeper's binaries");
  completion->add_option("shell", *shell, "bash or zsh")->required()->check(CLI::IsMember({"bash", "zsh"}));
  completion->callback([root, shell] {
    Apps apps;
    std::vector<const CLI::App*> all;
    for (const char* b : kBinaries) all.push_back(apps.Find(root, b));
    std::cout << (*shell == "bash" ? BashCompletion(all) : ZshCompletion(all));
  });
}

}  // namespace shmkeeper::cli
