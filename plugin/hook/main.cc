// shmkeeper-hook: the runtime wrapper's /dev/shm decision as an OCI hook, for
// CRI-O and podman, where the runtime config stays untouched.
//
// The runtime runs it with the container state JSON on stdin ({"id", "pid",
// "bundle", "annotations", "status"}). The stage comes from the argument or,
// without one, from the state's status: "creating" (createRuntime) and
// "created" (prestart) size the container's engine-made shm tmpfs (CRI-O's
// ShmPath, podman's userdata/shm) by remounting it; "stopped" (poststop) tells
// the agent the container is gone. Bounded: no network, no waiting on the
// agent (one non-blocking datagram), a failure to reach it changes nothing.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "base/event_send.h"
#include "base/fileutil.h"
#include "base/json.h"
#include "base/os.h"
#include "clidefs.h"
#include "decide/config.h"
#include "decide/decision_log.h"
#include "decide/node_config.h"
#include "decide/runtime_args.h"
#include "decide/size_container.h"

namespace shmkeeper {
namespace {

struct HookState {
  std::string id, status, bundle;
};

// The state the runtime pipes in: untrusted in shape, at most 1 MiB.
Result<HookState> ReadState(std::FILE* in) {
  std::string text;
  char buf[8192];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, in)) > 0) {
    text.append(buf, n);
    if (text.size() > (1 << 20)) return Status::Invalid("container state on stdin is over 1 MiB");
  }
  Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return Status::Invalid("container state on stdin is not a JSON object");
  HookState s;
  s.id = StringField(doc, "id");
  s.status = StringField(doc, "status");
  s.bundle = StringField(doc, "bundle");
  if (s.id.empty() || s.bundle.empty()) return Status::Invalid("container state on stdin has no id or bundle");
  return s;
}

std::string StageOf(const std::string& arg, const HookState& s) {
  if (!arg.empty()) return arg;
  if (s.status == "creating") return "createRuntime";
  if (s.status == "created") return "prestart";
  if (s.status == "stopped") return "poststop";
  return s.status;
}

bool StderrIsDevNull() {
  struct stat st;
  return ::fstat(STDERR_FILENO, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3);
}

// crun (1.8) runs hooks with stderr on /dev/null and reports only "error
// executing hook ... (exit code: 1)". The reason then goes where the engine
// reads crun's own errors: crun's stderr (conmon passes it to podman) and the
// runtime log from crun's --log. Best effort: a failure here changes nothing.
void TellTheRuntime(const std::string& line) {
  if (!StderrIsDevNull()) return;  // runc and others pass the hook's stderr on themselves
  std::string proc = "/proc/" + std::to_string(::getppid());
  Result<std::string> cmdline = ReadFile(proc + "/cmdline", 64 << 10);
  if (!cmdline.ok()) return;
  std::vector<std::string> argv;
  for (size_t at = 0; at < cmdline->size();) {
    size_t end = cmdline->find('\0', at);
    if (end == std::string::npos) end = cmdline->size();
    argv.push_back(cmdline->substr(at, end - at));
    at = end + 1;
  }
  if (argv.empty()) return;
  // Only files that are already there (the runtime made them): nothing is created.
  auto append = [](const std::string& path, const std::string& text, int flags) {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOCTTY | flags));
    if (fd.valid() && ::write(fd.get(), text.data(), text.size()) < 0) {
      // Best effort: the decision log still has the line.
    }
  };
  append(proc + "/fd/2", line + "\n", 0);  // a /proc fd link: reopens crun's stderr pipe
  Result<RuntimeArgs> args = ParseRuntimeArgs(std::vector<std::string>(argv.begin() + 1, argv.end()));
  if (args.ok() && !args->log_path.empty()) {
    append(args->log_path, RuntimeLogLine(args->log_format, "error", line) + "\n", O_NOFOLLOW);
  }
}

// `action`: "passthrough", "refuse" or "warning" (decision_log.h).
void Report(const ContainerPolicy& policy, const std::string& id, const char* level, const char* action,
            const Status& s) {
  std::fprintf(stderr, "shmkeeper-hook: %s\n", s.message().c_str());
  if (std::string(level) == "error") TellTheRuntime("shmkeeper-hook: " + s.message());
  Json rec = DecisionFailureRecord(id, level, "hook", action, s, policy.Problem());
  // The line is on stderr already: a log that cannot be written loses nothing more.
  (void)AppendDecisionLine(policy.config, rec, LogLevel::kError);
}

int Run(const std::string& config_flag, const std::string& stage_arg) {
  ContainerPolicy policy = LoadContainerPolicy(config_flag);
  const Config& config = policy.config;
  Result<HookState> state = ReadState(stdin);
  if (!state.ok()) {
    Report(policy, "", "error", "refuse", state.status());
    return 1;
  }
  std::string stage = StageOf(stage_arg, *state);
  if (stage == "poststop") {
    Json ev = {{"type", "stopped"}, {"id", state->id}};
    // Never fails the container: with no agent listening the event is dropped
    // (the agent's scans find the stop anyway; base/event_send.h).
    (void)SendEvent(config.agent.event_socket, DumpJson(ev));
    return 0;
  }
  if (stage != "createRuntime" && stage != "prestart") {
    Report(policy, state->id, "warning", "warning",
           Status::Invalid("stage \"" + stage + "\" has nothing to do; ignored"));
    return 0;
  }
  for (const Status& w : policy.warnings) Report(policy, state->id, "warning", "warning", w);
  std::vector<Status> warnings;
  Status s = policy.usable()
                 ? SizeContainerShm(state->bundle, state->id, config, Applier::kHook, *Os::Default(), &warnings)
                 : policy.file;
  for (const Status& w : warnings) Report(policy, state->id, "warning", "warning", w);
  if (s.ok()) return 0;
  if (OutcomeOfFailure(s, policy.usable(), config) == FailureOutcome::kRefuse) {
    Report(policy, state->id, "error", "refuse", s);
    return 1;
  }
  Report(policy, state->id, "warning", "passthrough", s.WithContext("container left as the engine made it"));
  return 0;
}

}  // namespace
}  // namespace shmkeeper

int main(int argc, char** argv) {
  CLI::App app;
  shmkeeper::cli::HookFlags flags;
  shmkeeper::cli::DefineHookCli(app, &flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "shmkeeper-hook: %s\n", e.what());
    return 2;
  }
  return shmkeeper::Run(flags.config, flags.stage);
}
