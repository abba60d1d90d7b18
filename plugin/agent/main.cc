// shmkeeperd: the node agent. Scans the node's shared memory periodically and
// serves it over gRPC (unix socket, optional TLS TCP) and Prometheus HTTP.
#include <malloc.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <optional>

#include "base/fileutil.h"
#include "base/json.h"
#include "clidefs.h"
#include "cri_client.h"
#include "decide/decision_log.h"
#include "node/agent_lock.h"
#include "node/engine.h"
#include "node/probers.h"
#include "nri_plugin.h"
#include "server.h"
#include "shmkeeper/version.h"

namespace shmkeeper::agent {
namespace {

ScanOptions ScanOptionsFrom(const Config& c) {
  ScanOptions s;
  if (!c.agent.runtime_roots.empty()) s.runtime_roots = c.agent.runtime_roots;
  s.docker_socket = c.agent.docker_socket;
  s.host_shm_dirs = c.agent.host_shm_dirs;
  s.grace = c.leaks.grace;
  s.max_files_per_pod = static_cast<size_t>(c.agent.max_files_per_pod);
  return s;
}

void Log(const char* level, const std::string& msg, Json extra = Json::object()) {
  extra["time"] = NowRfc3339();
  extra["level"] = level;
  extra["msg"] = msg;
  std::cerr << DumpJson(extra) << std::endl;
}

// "auto": the first CRI socket that exists (containerd, k3s/RKE2's containerd,
// then CRI-O). "" (not
// configured): the same, but only a socket that exists, for pod labels.
// "none": no CRI.
std::string ResolveCriSocket(const std::string& configured) {
  if (configured == "none") return "";
  if (configured != "auto" && !configured.empty()) return configured;
  for (const char* p : {"/run/containerd/containerd.sock", "/run/k3s/containerd/containerd.sock", "/run/crio/crio.sock",
                        "/var/run/crio/crio.sock"}) {
    if (PathExists(p)) return std::string("unix://") + p;
  }
  return configured.empty() ? "" : "unix:///run/containerd/containerd.sock";
}

void ReportReconcile(const ReconcileResult& r) {
  Json pod = {{"sandbox", r.sandbox_id}, {"namespace", r.ns}, {"name", r.name}};
  if (!r.status.ok()) {
    Log("warning", "reconcile: " + r.status.message(), pod);
    return;
  }
  pod["old_bytes"] = r.plan.old_bytes;
  pod["new_bytes"] = r.plan.new_bytes;
  pod["source"] = r.plan.source;
  if (r.plan.limit.bytes > 0) pod["memory_limit"] = {{"bytes", r.plan.limit.bytes}, {"source", r.plan.limit.source}};
  Log("info", "reconcile: resized the pod's /dev/shm", pod);
}

// The policy file's text ("" when it cannot be read), to tell an edit later.
std::string FileText(const std::string& path) {
  Result<std::string> text = ReadFile(path, 1 << 20);
  return text.ok() ? *text : "";
}

// The command line's overrides, applied to every load of the policy file.
struct Overrides {
  std::string socket, metrics, state_dir;
  bool metrics_set = false, reconcile = false;
};

// Loads the policy with the overrides applied; errors are one line naming
// the file, line and column.
Result<Config> LoadAgentConfig(const std::string& path, bool must_exist, const Overrides& o) {
  SHMK_ASSIGN_OR_RETURN(Config config, LoadConfig(path, must_exist));
  if (o.reconcile) {
    config.agent.reconcile = true;
    if (config.agent.cri_socket.empty()) config.agent.cri_socket = "auto";
  }
  config.agent.cri_socket = ResolveCriSocket(config.agent.cri_socket);
  if (config.agent.reconcile && config.agent.cri_socket.empty()) {
    return Status::Invalid("agent.reconcile needs a CRI socket, but agent.criSocket is none");
  }
  return config;
}

// SIGHUP: read the policy file again. A valid file replaces the running
// policy (what needs a restart is named); an invalid one is refused with one
// line naming file:line and the agent keeps its policy, with
// shmkeeper_config_valid 0 until a valid file is loaded.
void ReloadPolicy(Agent& agent, const std::string& path, bool must_exist, const Overrides& o) {
  ConfigFileState state = agent.config_file_state();
  Result<Config> next = LoadAgentConfig(path, must_exist, o);
  if (!next.ok()) {
    state.valid = false;
    state.error = next.status().message();
    ++state.reload_failures;
    agent.SetConfigFileState(state);
    Log("error", "config reload refused, the running policy is kept: " + state.error, {{"config", path}});
    return;
  }
  if (!o.socket.empty()) next->agent.socket = o.socket;
  if (!o.state_dir.empty()) next->agent.state_dir = o.state_dir;
  if (o.metrics_set) next->agent.metrics_address = o.metrics;
  std::vector<std::string> restart = agent.Reload(*next);
  state.loaded_text = FileText(path);
  state.valid = true;
  state.error.clear();
  state.loaded = std::chrono::system_clock::now();
  ++state.reloads;
  agent.SetConfigFileState(state);
  Json extra = {{"config", ConfigToJson(agent.config())}};
  if (!restart.empty()) extra["needs_restart"] = restart;
  Log(
      restart.empty() ? "info" : "warning",
      restart.empty() ? "config reloaded"
                      : "config reloaded; changed keys that take effect only when shmkeeperd restarts: " +
                            [&] {
                              std::string keys;
                              for (const std::string& k : restart) keys += (keys.empty() ? "" : ", ") + k;
                              return keys;
                            }(),
      extra);
}

int Run(int argc, char** argv) {
  CLI::App app;
  cli::AgentdFlags flags;
  cli::DefineAgentCli(app, &flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "shmkeeperd: " << e.what() << " (see shmkeeperd --help)\n";
    return 2;
  }
  Overrides over;
  over.socket = flags.socket;
  over.metrics = flags.metrics_address;
  over.reconcile = flags.reconcile;
  over.state_dir = flags.state_dir;
  const bool read_only = flags.read_only;
  over.metrics_set = app.count("--metrics-address") > 0;
  const bool check_config = flags.check_config, probe = flags.probe;
  std::string path = ResolveConfigPath(flags.config);
  bool must_exist = !flags.config.empty();
  Result<Config> config = LoadAgentConfig(path, must_exist, over);
  if (!config.ok()) {
    std::cerr << "shmkeeperd: " << config.status().message() << "\n";
    return 2;
  }
  if (check_config) {
    std::cout << DumpJson(ConfigToJson(*config), 2) << "\n";
    return 0;
  }
  if (!over.socket.empty()) config->agent.socket = over.socket;
  if (!over.state_dir.empty()) config->agent.state_dir = over.state_dir;
  if (over.metrics_set) config->agent.metrics_address = over.metrics;
  if (probe) {
    Result<std::string> health = ProbeHealth(*config);
    std::cout << (health.ok() ? *health : "shmkeeperd: " + health.status().message() + "\n");
    return health.ok() ? 0 : 1;
  }
  Log("info", "starting shmkeeperd " SHMKEEPER_VERSION, {{"config", ConfigToJson(*config)}});

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);                    // reload; never the default action (exit)
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // every thread inherits the mask; main waits below
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGIO, SIG_IGN);
  // The scan's worker threads would each keep a malloc arena of the size of
  // the largest scan; two arenas keep the agent's RSS near what it uses.
  ::mallopt(M_ARENA_MAX, 2);  // reclaim's file leases would deliver it on every break (reclaim.h)

  // One agent per node: the lock is held until the process exits.
  // A read-only agent takes no lock: it runs beside the one that holds it.
  std::optional<AgentLock> lock;
  if (!read_only) {
    Result<AgentLock> taken = AgentLock::Acquire(config->agent.state_dir);
    if (!taken.ok()) {
      std::cerr << "shmkeeperd: " << taken.status().message() << "\n";
      return 1;
    }
    lock = std::move(*taken);
  }
  Result<std::string> id = AgentIdentity(config->agent.state_dir);
  if (!id.ok()) {
    std::cerr << "shmkeeperd: agent identity: " << id.status().message() << "\n";
    return 1;
  }
  ScanOptions scan = ScanOptionsFrom(*config);
  scan.agent_id = *id;
  scan.read_only = read_only;
  if (read_only) {
    Log("info", "read-only: this agent never reclaims and never renames quarantined files back",
        {{"lock_holder_pid", AgentLock::Holder(config->agent.state_dir)}});
  }
  Agent agent(*config, scan);
  // Every agent, read-only or not, registers as a prober before its observer
  // starts, for as long as it runs: the node's other agents then do not take
  // its lease probes for use (docs/agent.md#several-agents-on-one-node).
  if (Result<std::unique_ptr<ProberRegistry>> probers = ProberRegistry::Join(config->agent.state_dir); probers.ok()) {
    agent.SetProbers(std::move(*probers));
  } else {
    Log("warning", "not registered as a prober: " + probers.status().message() +
                       "; another agent on this node takes this one's lease probes for use (files stay in use for it)");
  }
  agent.SetConfigFileState({path, true, "", std::chrono::system_clock::now(), 0, 0, FileText(path)});
  agent.SetLog([](LogLevel level, const std::string& msg) { Log(LogLevelName(level), msg); });
  std::shared_ptr<CriClient> cri;
  if (!config->agent.cri_socket.empty()) {  // labels always; sizes in agent-only mode
    cri = std::make_shared<CriClient>(config->agent.cri_socket);
    agent.SetReconciler({[cri] { return cri->ListSandboxes(); }, ReportReconcile, config->agent.reconcile});
  }
  agent.SetWarningSink([](const std::string& w) { Log("warning", w); });
  if (Status s = agent.Start(); !s.ok()) Log("warning", s.message() + "; creator records and hook events are off");
  std::unique_ptr<NriPlugin> nri;
  if (!config->agent.nri.socket.empty()) {  // the agent as the runtime's NRI plugin
    NriSessionOptions nri_options;
    nri_options.index = config->agent.nri.index;
    nri = std::make_unique<NriPlugin>(
        config->agent.nri.socket, nri_options, [&agent] { return agent.config(); }, Os::Default(), &agent.nri_stats(),
        [](const char* level, const std::string& msg) { Log(level, msg); });
    nri->Start();
  }
  ServerOptions server_options = ServerOptions::FromConfig(*config);
  if (std::string note = server_options.TcpReadOnlyNote(); !note.empty()) Log("warning", note);
  AgentServer server(&agent, std::move(server_options));
  if (Status s = server.Start(); !s.ok()) {
    Log("error", s.message());
    return 1;
  }
  Log("info", "serving",
      {{"socket", config->agent.socket}, {"metrics_port", server.metrics_port()}, {"tcp_port", server.tcp_port()}});
  int sig = 0;
  while (sigwait(&set, &sig) == 0 && sig == SIGHUP) {
    Log("info", "SIGHUP: reloading the policy", {{"config", path}});
    ReloadPolicy(agent, path, must_exist, over);
  }
  Log("info", "stopping", {{"signal", sig}});
  if (nri) nri->Stop();
  server.Shutdown();
  agent.Stop();
  return 0;
}

}  // namespace
}  // namespace shmkeeper::agent

int main(int argc, char** argv) {
  // A SIGHUP (a reload: `systemctl reload`, a ConfigMap hook) can come at any
  // time after the process exists; its default action is to exit. Blocked
  // before anything else runs (flag parsing, the config file): it stays
  // pending and is read by the sigwait loop as a reload, or discarded by
  // --check-config/--probe, which exit without waiting for signals.
  sigset_t hup;
  sigemptyset(&hup);
  sigaddset(&hup, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &hup, nullptr);
  return shmkeeper::agent::Run(argc, argv);
}
