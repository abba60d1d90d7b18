// shmkeeper compose check [FILE...] | compose fix [FILE] [--size S] [--write]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "agent_client.h"
#include "base/fileutil.h"
#include "compose/compose.h"

extern char** environ;

namespace shmkeeper::cli {
namespace {

struct ComposeFlags {
  std::vector<std::string> files;
  std::string output = "table";
  std::string agent = kDefaultAgent;
};

ComposeCheckOptions Options(const ComposeFlags& f) {
  ComposeCheckOptions o;
  o.files = f.files;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) o.env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
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
  outcome.exit_code = r.findings.empty() ? 0 : 1;
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

Status Fix(const ComposeFlags& f, const std::string& size, bool write) {
  ComposeCheckOptions o = Options(f);
  AddMeasured(f.agent, &o);
  std::string target = f.files.empty() ? "" : f.files.front();
  SHMK_ASSIGN_OR_RETURN(ComposeFix fix, PlanComposeFix(o, target, size));
  for (const std::string& c : fix.changes) std::cerr << "fixed: " << c << "\n";
  for (const std::string& c : fix.skipped) std::cerr << "not fixed: " << c << "\n";
  if (fix.fixed == fix.original) {
    std::cerr << "shmkeeper: nothing to change in " << fix.file << "\n";
    return Status::Ok();
  }
  if (!write) return PrintDiff(fix.file, fix.original, fix.fixed);
  SHMK_RETURN_IF_ERROR(WriteFileAtomic(fix.file, fix.fixed));
  std::cerr << "shmkeeper: wrote " << fix.file << "\n";
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
  check->callback([f, &outcome] { outcome.status = Check(*f, outcome); });

  auto size = std::make_shared<std::string>();
  auto write = std::make_shared<bool>(false);
  CLI::App* fix = compose->add_subcommand("fix", "Fix the problems: a unified diff, or edit in place with --write");
  fix->add_option("files", f->files, "The compose file to fix first, then the ones merged after it");
  fix->add_option("--size", *size, "shm_size to use (default: the suggested size per service)");
  fix->add_flag("--write", *write, "Edit the file in place (only the fixed lines change)");
  fix->add_option("--agent", f->agent, "Agent to ask for measured usage (skipped when absent)");
  fix->callback([f, size, write, &outcome] { outcome.status = Fix(*f, *size, *write); });
}

}  // namespace shmkeeper::cli
