#include "clidefs.h"

#include "shmkeeper/version.h"

namespace shmkeeper::cli {

void DefineAgentCli(CLI::App& app, AgentdFlags* f) {
  app.name("shmkeeperd");
  app.description("shmkeeperd: the shmkeeper node agent");
  app.set_version_flag("--version",
                       std::string("shmkeeperd ") + SHMKEEPER_VERSION + " (commit " + SHMKEEPER_COMMIT + ")");
  app.add_option("--config", f->config, "Node policy file (default $SHMKEEPER_CONFIG or /etc/shmkeeper/config.yaml)");
  app.add_option("--socket", f->socket, "Override agent.socket");
  app.add_option("--metrics-address", f->metrics_address, "Override agent.metricsAddress");
  app.add_option("--state-dir", f->state_dir, "Override agent.stateDir (the one-agent-per-node lock and identity)");
  app.add_flag("--read-only", f->read_only,
               "Run beside the agent that holds the node's lock: serve and scan, but never reclaim and never rename "
               "quarantined files back");
  app.add_flag("--reconcile", f->reconcile, "Agent-only mode: set agent.reconcile (and criSocket auto if unset)");
  app.add_flag("--check-config", f->check_config,
               "Parse the config, print the effective settings as JSON and exit (non-zero with file:line:col when "
               "invalid); run it before a reload (SIGHUP)");
  app.add_flag("--probe", f->probe,
               "Liveness probe: ask the agent this config describes over its unix socket; exit 0 if healthy");
}

void DefineHookCli(CLI::App& app, HookFlags* f) {
  app.name("shmkeeper-hook");
  app.description("shmkeeper-hook: size /dev/shm from an OCI hook (CRI-O, podman)");
  app.add_option("--config", f->config, "shmkeeper config (default $SHMKEEPER_CONFIG or /etc/shmkeeper/config.yaml)");
  app.add_option("stage", f->stage, "createRuntime, prestart or poststop (default: from the state's status)")
      ->check(CLI::IsMember({"createRuntime", "prestart", "poststop"}));
}

void DefineDoctorCli(CLI::App& app, DoctorFlags* f) {
  app.name("shmkeeper-doctor");
  app.description("shmkeeper-doctor: diagnose /dev/shm here and print the fix");
  app.set_version_flag("--version", std::string("shmkeeper-doctor ") + SHMKEEPER_VERSION);
  app.add_option("-o,--output", f->output, "table or json")->check(CLI::IsMember({"table", "json"}));
  app.add_option("--shm", f->shm_path, "The shared memory directory to examine");
}

void DescribeRuntimeCli(CLI::App& app) {
  app.name("shmkeeper-runtime");
  app.description("shmkeeper-runtime: OCI runtime wrapper that sizes /dev/shm, then runs runc or crun");
  app.set_help_flag();  // --help goes to the real runtime
  app.add_option("--config",
                 "shmkeeper's policy file, removed from the command line the real runtime sees (default "
                 "$SHMKEEPER_CONFIG or /etc/shmkeeper/config.yaml)");
  app.add_option("--root", "The real runtime's state directory (passed on)");
  app.add_option("--log", "The engine's log file: shmkeeper's errors are written there too, in runc's format");
  app.add_option("--log-format", "text or json (passed on)")->check(CLI::IsMember({"text", "json"}));
  app.add_flag("-v,--version")->description("shmkeeper-runtime's version and commit, then the real runtime's");
  for (const char* verb : {"create", "run"}) {
    CLI::App* sub = app.add_subcommand(
        verb, std::string("Size /dev/shm in the bundle's config.json, then exec the real runtime's ") + verb);
    sub->add_option("-b,--bundle", "The bundle directory (default: the working directory)");
    sub->add_option("container-id", "The container's id");
  }
  for (const char* verb : {"start", "state", "kill", "delete", "exec", "ps", "pause", "resume", "update", "events",
                           "checkpoint", "restore", "list", "spec", "features"}) {
    app.add_subcommand(verb, "Passed to the real runtime unchanged");
  }
}

}  // namespace shmkeeper::cli
