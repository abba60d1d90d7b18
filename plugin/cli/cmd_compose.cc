// shmkeeper compose check [FILE...] | compose fix [FILE...] [--size S] [--write]
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "agent_client.h"
#include "base/fileutil.h"
#include "base/json.h"
#include "base/os.h"
#include "compose/compose.h"

extern char** environ;

namespace shmkeeper::cli {
namespace {

struct ComposeFlags {
  std::vector<std::string> files;
  std::string output = "table";
  std::string agent = kDefaultAgent;
  std::string project_name;
  bool no_engine = false;
};

// The stdout of `argv` (no shell; stderr dropped), or nothing when it fails,
// exits non-zero or runs past `timeout`. At most 1 MiB is read.
std::optional<std::string> Capture(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  Result<std::string> path = FindExecutable(argv[0]);
  if (!path.ok()) return std::nullopt;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
  std::cout.flush();
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return std::nullopt;
  }
  if (pid == 0) {
    int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    ::dup2(fds[1], 1);
    if (null >= 0) {
      ::dup2(null, 0);
      ::dup2(null, 2);
    }
    std::vector<std::string> args(argv.begin() + 1, argv.end());
    (void)Exec(*path, args);
    ::_exit(127);
  }
  ::close(fds[1]);
  UniqueFd rd(fds[0]);
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  bool ok = true;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ok = false;
      break;
    }
    struct pollfd pfd = {rd.get(), POLLIN, 0};
    int n = ::poll(&pfd, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = false;
      break;
    }
    char buf[65536];
    ssize_t got = ::read(rd.get(), buf, sizeof(buf));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    out.append(buf, static_cast<size_t>(got));
    if (out.size() > (1 << 20)) {
      ok = false;
      break;
    }
  }
  if (!ok) ::kill(pid, SIGKILL);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (!ok || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return std::nullopt;
  return out;
}

// Whether a Docker engine is there to ask: DOCKER_HOST names one (a unix
// socket that exists, or another scheme), or the default socket exists.
bool EngineThere(const std::map<std::string, std::string>& env) {
  auto host = env.find("DOCKER_HOST");
  if (host != env.end() && !host->second.empty()) {
    if (!host->second.starts_with("unix://")) return true;
    return PathExists(host->second.substr(7));
  }
  return PathExists("/var/run/docker.sock");
}

std::vector<std::string> Strings(const Json& j) {
  std::vector<std::string> out;
  if (!j.is_array()) return out;
  for (const Json& e : j) {
    if (e.is_string()) out.push_back(e.get<std::string>());
  }
  return out;
}

// `docker image inspect` of images present on the node (never a pull), and
// the engine's default runtime, each asked with a short deadline.
void AddEngine(ComposeCheckOptions* o) {
  using namespace std::chrono_literals;
  if (!EngineThere(o->env)) return;
  std::optional<std::string> rt = Capture({"docker", "info", "--format", "{{json .DefaultRuntime}}"}, 5s);
  if (!rt) return;  // no engine answers: do not ask it about images either
  Json j = Json::parse(*rt, nullptr, false);
  if (j.is_string()) o->default_runtime = j.get<std::string>();
  auto cache = std::make_shared<std::map<std::string, std::optional<ComposeImageConfig>>>();
  o->inspect_image = [cache](const std::string& image) -> std::optional<ComposeImageConfig> {
    if (image.empty() || image.starts_with("-") || image.size() > 512) return std::nullopt;
    if (auto it = cache->find(image); it != cache->end()) return it->second;
    std::optional<ComposeImageConfig> config;
    std::optional<std::string> out =
        Capture({"docker", "image", "inspect", "--format", "{{json .Config}}", "--", image}, 5s);
    Json c = out ? Json::parse(*out, nullptr, false) : Json();
    if (c.is_object()) {
      config.emplace();
      config->entrypoint = Strings(c.value("Entrypoint", Json()));
      config->cmd = Strings(c.value("Cmd", Json()));
      config->env = Strings(c.value("Env", Json()));
      if (c.contains("Labels") && c["Labels"].is_object()) {
        for (const auto& [k, v] : c["Labels"].items()) {
          if (v.is_string()) config->labels[k] = v.get<std::string>();
        }
      }
    }
    (*cache)[image] = config;
    return config;
  };
}

ComposeCheckOptions Options(const ComposeFlags& f) {
  ComposeCheckOptions o;
  o.files = f.files;
  o.project_name = f.project_name;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) o.env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (!f.no_engine) AddEngine(&o);
  return o;
}

// The peak /dev/shm use the agent measured per compose service, when it answers quickly.
void AddMeasured(const std::string& agent, ComposeCheckOptions* o) {
  std::string path = agent.starts_with("unix://") ? agent.substr(7) : agent;
  if (!path.starts_with("/") || !PathExists(path)) return;
  AgentFlags flags;
  flags.agent = agent;
  Result<std::unique_ptr<v1::ShmKeeper::Stub>> stub = Connect(flags);
  if (!stub.ok()) return;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::ListPodsResponse resp;
  if (!(*stub)->ListPods(&ctx, {}, &resp).ok()) return;
  for (const v1::Pod& p : resp.pods()) {
    if (p.kind() != v1::POD_KIND_COMPOSE) continue;
    int64_t& m = o->measured[p.compose_project() + "/" + p.compose_service()];
    m = std::max({m, p.shm().used_bytes(), p.shm().peak_used_bytes()});
  }
}

Status Check(const ComposeFlags& f, Outcome& outcome) {
  ComposeCheckOptions o = Options(f);
  AddMeasured(f.agent, &o);
  SHMK_ASSIGN_OR_RETURN(ComposeReport r, CheckCompose(o));
  if (f.output == "json") {
    std::cout << DumpJson(ComposeReportToJson(r), 2) << "\n";
  } else {
    std::cout << ComposeReportToText(r);
  }
  // Info findings state a choice (ipc: host kept), not a problem.
  outcome.exit_code = std::any_of(r.findings.begin(), r.findings.end(),
                                  [](const ComposeFinding& x) { return x.severity != Severity::kInfo; })
                          ? 1
                          : 0;
  return Status::Ok();
}

// `diff -u` of two texts (exec'd directly; no shell).
Status PrintDiff(const std::string& name, const std::string& a, const std::string& b) {
  char t1[] = "/tmp/shmk-diff-a-XXXXXX", t2[] = "/tmp/shmk-diff-b-XXXXXX";
  UniqueFd f1(::mkstemp(t1)), f2(::mkstemp(t2));
  if (!f1.valid() || !f2.valid()) return Status::FromErrno(errno, "temporary file for the diff");
  Status s = WriteFileAtomic(t1, a, 0600);
  if (s.ok()) s = WriteFileAtomic(t2, b, 0600);
  if (s.ok()) {
    std::cout.flush();
    pid_t pid = ::fork();
    if (pid == 0) {
      std::string la = "a/" + name, lb = "b/" + name;
      ::execlp("diff", "diff", "-u", "--label", la.c_str(), "--label", lb.c_str(), t1, t2, nullptr);
      ::_exit(127);
    }
    int st = 0;
    ::waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) > 1) s = Status::Internal("diff failed");
  }
  ::unlink(t1);
  ::unlink(t2);
  return s;
}

// Plans the fixes of every file read; prints each changed file's diff, or
// with --write writes every changed file (all planned before any is
// written). A fix it cannot make is named and the exit is 1.
Status Fix(const ComposeFlags& f, const std::string& size, bool write, Outcome& outcome) {
  ComposeCheckOptions o = Options(f);
  AddMeasured(f.agent, &o);
  SHMK_ASSIGN_OR_RETURN(std::vector<ComposeFix> fixes, PlanComposeFixes(o, size));
  bool changed = false;
  size_t skipped = 0;
  for (const ComposeFix& fix : fixes) {
    for (const std::string& c : fix.changes) std::cerr << "fixed: " << c << "\n";
    for (const std::string& c : fix.skipped) std::cerr << "not fixed: " << c << "\n";
    changed = changed || fix.fixed != fix.original;
    skipped += fix.skipped.size();
  }
  if (!changed) std::cerr << "shmkeeper: nothing to change in " << fixes.size() << " file(s)\n";
  for (const ComposeFix& fix : fixes) {
    if (fix.fixed == fix.original) continue;
    if (!write) {
      SHMK_RETURN_IF_ERROR(PrintDiff(fix.file, fix.original, fix.fixed));
      continue;
    }
    // The file must still be what was planned on (nobody edited it meanwhile).
    Result<std::string> now = ReadFile(fix.file);
    if (!now.ok() || *now != fix.original) {
      return Status::Invalid(fix.file + " changed while it was being fixed; nothing more written");
    }
    SHMK_RETURN_IF_ERROR(WriteFileAtomic(fix.file, fix.fixed));
    std::cerr << "shmkeeper: wrote " << fix.file << "\n";
  }
  if (skipped > 0) {
    std::cerr << "shmkeeper: " << skipped << " finding(s) left for a fix by hand, each named above\n";
    outcome.exit_code = 1;
  }
  return Status::Ok();
}

}  // namespace

void RegisterCompose(CLI::App& app, Outcome& outcome) {
  CLI::App* compose = app.add_subcommand("compose", "Check and fix /dev/shm in docker-compose files");
  compose->require_subcommand(1);
  auto f = std::make_shared<ComposeFlags>();
  CLI::App* check = compose->add_subcommand("check", "Report /dev/shm problems per service (exit 1 on findings)");
  check->add_option("files", f->files, "Compose files, merged in order (default: the ones docker-compose reads)");
  check->add_option("-f,--file", f->files, "A compose file (repeatable)");
  check->add_option("-o,--output", f->output, "table or json")->check(CLI::IsMember({"table", "json"}));
  check->add_option("--agent", f->agent, "Agent to ask for measured usage (skipped when absent)");
  check->add_option("-p,--project-name", f->project_name, "The compose project name (as docker-compose -p)");
  check->add_flag("--no-engine", f->no_engine, "Do not ask the Docker engine for local images and its default runtime");
  check->callback([f, &outcome] { outcome.status = Check(*f, outcome); });

  auto size = std::make_shared<std::string>();
  auto write = std::make_shared<bool>(false);
  CLI::App* fix = compose->add_subcommand("fix", "Fix the problems: a unified diff, or edit in place with --write");
  fix->add_option("files", f->files, "Compose files, merged in order (default: the ones docker-compose reads)");
  fix->add_option("-f,--file", f->files, "A compose file (repeatable)");
  fix->add_option("-p,--project-name", f->project_name, "The compose project name (as docker-compose -p)");
  fix->add_flag("--no-engine", f->no_engine, "Do not ask the Docker engine for local images and its default runtime");
  fix->add_option("--size", *size, "shm_size to use (default: the suggested size per service)");
  fix->add_flag("--write", *write, "Edit the files in place (only the fixed lines change; exit 1 if a finding stays)");
  fix->add_option("--agent", f->agent, "Agent to ask for measured usage (skipped when absent)");
  fix->callback([f, size, write, &outcome] { outcome.status = Fix(*f, *size, *write, outcome); });
}

}  // namespace shmkeeper::cli
