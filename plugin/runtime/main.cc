// shmkeeper-runtime: an OCI runtime wrapper in front of runc/crun.
//
// create/run: decide the container's /dev/shm size, edit the bundle's spec (or
// remount its engine-made tmpfs), log the decision, then exec the real runtime
// with the arguments untouched. Every other subcommand is exec'd directly, by
// the low-level runtime whose state the container is in: an engine's cleanup
// (podman's `delete --force`) may reach the wrapper without the runtime flags
// that chose the runtime at create.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "base/fileutil.h"
#include "base/os.h"
#include "decide/config.h"
#include "decide/decision_log.h"
#include "decide/node_config.h"
#include "decide/runtime_args.h"
#include "decide/size_container.h"
#include "shmkeeper/version.h"

namespace shmkeeper {
namespace {

std::string Basename(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// "crun" or "runc" when one of the arguments after the subcommand names a
// container in that runtime's state directory (crun: <root>/<id>/status, runc:
// <root>/<id>/state.json; root from --root, else each one's default), else "".
std::string RuntimeOfExistingContainer(const RuntimeArgs& args) {
  if (args.subcommand.empty() || args.subcommand == "create" || args.subcommand == "run") return "";
  auto sub = std::find(args.passthrough.begin(), args.passthrough.end(), args.subcommand);
  for (auto it = sub == args.passthrough.end() ? sub : sub + 1; it != args.passthrough.end(); ++it) {
    const std::string& id = *it;
    if (id.empty() || id[0] == '-' || id == "." || id == ".." || id.find('/') != std::string::npos) continue;
    if (PathExists((args.root.empty() ? "/run/crun" : args.root) + "/" + id + "/status")) return "crun";
    if (PathExists((args.root.empty() ? "/run/runc" : args.root) + "/" + id + "/state.json")) return "runc";
  }
  return "";
}

Result<std::string> RealRuntime(const Config& config, const RuntimeArgs& args) {
  std::string owner = RuntimeOfExistingContainer(args);
  if (!owner.empty() && Basename(config.runtime.path).find(owner) == std::string::npos) {
    if (Result<std::string> found = FindExecutable(owner); found.ok()) return found;
  }
  if (!config.runtime.path.empty()) return FindExecutable(config.runtime.path);
  Result<std::string> runc = FindExecutable("runc");
  if (runc.ok()) return runc;
  Result<std::string> crun = FindExecutable("crun");
  if (crun.ok()) return crun;
  return Status::NotFound("no runc or crun in PATH (set runtime.path in the shmkeeper config)");
}

// `action`: "passthrough", "refuse" or "warning" (decision_log.h); the line
// goes to stderr, the engine's --log and the decision log.
void Report(const RuntimeArgs& args, const ContainerPolicy& policy, const char* level, const char* action,
            const Status& s) {
  std::string msg = "shmkeeper: " + s.message();
  std::fprintf(stderr, "shmkeeper-runtime: %s\n", s.message().c_str());
  // The line is on stderr already: a log that cannot be written loses nothing more.
  (void)AppendRuntimeLog(args.log_path, args.log_format, level, msg);
  Json rec = DecisionFailureRecord(args.container_id, level, "runtime", action, s, policy.Problem());
  (void)AppendDecisionLine(policy.config, rec, LogLevel::kError);
}

// Sizes the container's /dev/shm; problems that do not stop it are reported
// as warnings here.
Status PrepareContainer(const RuntimeArgs& args, const ContainerPolicy& policy) {
  std::vector<Status> warnings;
  Status s = SizeContainerShm(args.bundle.empty() ? "." : args.bundle, args.container_id, policy.config,
                              Applier::kRuntime, *Os::Default(), &warnings);
  for (const Status& w : warnings) Report(args, policy, "warning", "warning", w);
  return s;
}

int Main(const std::vector<std::string>& argv) {
  Result<RuntimeArgs> parsed = ParseRuntimeArgs(argv);
  // Unparseable arguments are the real runtime's to reject.
  RuntimeArgs args;
  if (parsed.ok()) {
    args = std::move(parsed).value();
  } else {
    args.passthrough = argv;
  }
  if (!argv.empty() && (argv[0] == "--version" || argv[0] == "-v")) {
    // Its own line first, then the real runtime's. No word "version" in it:
    // dockerd parses this output for `docker info` and takes a line with
    // that word as the runtime's name and version.
    std::printf("shmkeeper-runtime %s (commit %s)\n", SHMKEEPER_VERSION, SHMKEEPER_COMMIT);
    std::fflush(stdout);
  }
  ContainerPolicy policy = LoadContainerPolicy(args.config_path);
  const Config& config = policy.config;
  if (args.Intercepts()) {
    for (const Status& w : policy.warnings) Report(args, policy, "warning", "warning", w);
  }
  Result<std::string> runtime = RealRuntime(config, args);
  if (!runtime.ok()) {
    Report(args, policy, "error", "refuse", runtime.status());
    return 1;
  }
  if (args.Intercepts()) {
    Status s = policy.usable() ? PrepareContainer(args, policy) : policy.file;
    if (!s.ok()) {
      if (OutcomeOfFailure(s, policy.usable(), config) == FailureOutcome::kRefuse) {
        Report(args, policy, "error", "refuse", s);
        return 1;
      }
      Report(args, policy, "warning", "passthrough", s.WithContext("passing the spec through untouched"));
    }
  }
  Status s = Exec(*runtime, args.passthrough);
  Report(args, policy, "error", "refuse", s);
  return 127;
}

}  // namespace
}  // namespace shmkeeper

int main(int argc, char** argv) { return shmkeeper::Main(std::vector<std::string>(argv + 1, argv + argc)); }
