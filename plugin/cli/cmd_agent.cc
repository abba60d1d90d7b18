// shmkeeper status | pods | leaks | reclaim | watch: the agent's views.
#include <google/protobuf/util/time_util.h>

#include <iostream>
#include <memory>

#include "agent_client.h"
#include "base/term_escape.h"

namespace shmkeeper::cli {
namespace {

using google::protobuf::util::TimeUtil;
using Rows = std::vector<std::vector<std::string>>;

// Every cell is escaped (base/term_escape.h): file names, commands and pod
// names come from containers.
void PrintTable(Rows rows) {
  for (auto& r : rows) {
    for (std::string& cell : r) cell = TermEscape(cell);
  }
  std::vector<size_t> width;
  for (const auto& r : rows) {
    width.resize(std::max(width.size(), r.size()));
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 2, ' ');
    }
    std::cout << line << "\n";
  }
}

std::string Seconds(const google::protobuf::Duration& d) {
  int64_t s = TimeUtil::DurationToSeconds(d);
  if (s < 120) return std::to_string(s) + "s";
  if (s < 7200) return std::to_string(s / 60) + "m";
  return std::to_string(s / 3600) + "h";
}

// One unary call with a deadline; a failed RPC becomes a Status naming the agent.
template <typename Call>
Status Unary(const AgentFlags& f, Call call) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status s = call(&ctx);
  return s.ok() ? Status::Ok() : RpcError(f, s);
}

// Runs `body` with a connected stub; errors land in `outcome`.
template <typename Body>
std::function<void()> WithStub(const std::shared_ptr<AgentFlags>& flags, Outcome& outcome, Body body) {
  return [flags, &outcome, body] {
    Result<std::unique_ptr<v1::ShmKeeper::Stub>> stub = Connect(*flags);
    if (!stub.ok()) {
      outcome.status = stub.status();
      return;
    }
    outcome.status = body(**stub);
  };
}

std::string ConfigFileRunning(const v1::ConfigFile& c) {
  std::string from = c.path().empty() ? "built-in defaults" : c.path();
  return from + ", loaded " + TimeUtil::ToString(c.loaded_time()) +
         (c.reload_failed() ? " (the last reload was refused: the file is invalid)" : "");
}

std::string ConfigFileOnDisk(const v1::ConfigFile& c) {
  const std::string& d = c.on_disk();
  if (d == "same") return "same as running";
  if (d == "changed") return "changed, not loaded yet: kill -HUP the agent (see docs/configuration.md#reload)";
  if (d == "missing") return "missing: a reload would run on the built-in defaults";
  return "invalid: " + c.on_disk_error() +
         " (the agent keeps the running policy; shmkeeper-runtime and shmkeeper-hook pass new containers through "
         "with their engine's default /dev/shm until it is fixed)";
}

// The `nri` row: off, connected to which runtime, or why not.
std::string NriCell(const v1::Node& n) {
  if (!n.has_nri()) return "off (agent.nri.socket)";
  const v1::NriPlugin& p = n.nri();
  std::string counts = std::to_string(p.connections()) + " registrations, " + std::to_string(p.refusals()) +
                       " refused, " + std::to_string(p.failures()) + " failures";
  if (p.connected()) {
    return "connected to " + p.runtime_name() + " " + p.runtime_version() + " at " + p.socket() + " (" + counts + ")";
  }
  return "not connected to " + p.socket() + ": " + p.last_error() + " (" + counts + ")";
}

Status Status_(v1::ShmKeeper::Stub& stub, const AgentFlags& f) {
  v1::GetNodeResponse resp;
  SHMK_RETURN_IF_ERROR(Unary(f, [&](grpc::ClientContext* ctx) { return stub.GetNode(ctx, {}, &resp); }));
  if (f.output == "json") return PrintJson(resp);
  const v1::Node& n = resp.node();
  PrintTable({{"node", n.hostname()},
              {"agent", n.agent_version()},
              {"host /dev/shm", Iec(n.host_shm_used_bytes()) + " used of " + Iec(n.host_shm_size_bytes())},
              {"pods", std::to_string(n.pod_count()) + ", " + Iec(n.pods_shm_used_bytes()) + " of shared memory"},
              {"leaked", Iec(n.leaked_bytes())},
              {"unheld", Iec(n.unheld_bytes())},
              {"policy", "default " + (n.policy().shm_default_bytes() ? Iec(n.policy().shm_default_bytes()) : "auto") +
                             ", max " + Iec(n.policy().shm_max_bytes()) + " (" + n.policy().shm_over_max() +
                             "), leaks " + n.policy().leaks_reclaim()},
              {"scan interval", std::to_string(TimeUtil::DurationToMilliseconds(n.policy().scan_interval())) + "ms"},
              {"last scan", TimeUtil::ToString(n.last_scan_time()) + " in " +
                                std::to_string(TimeUtil::DurationToMilliseconds(n.last_scan_duration())) + "ms"},
              {"running policy", ConfigFileRunning(n.config_file())},
              {"file on disk", ConfigFileOnDisk(n.config_file())},
              {"nri", NriCell(n)}});
  return Status::Ok();
}

// The FILES cell: the count, and the limit a tmpfs is over (its files are
// then kept, not judged).
std::string FilesCell(const v1::ShmUsage& u) {
  if (!u.files_over_limit()) return std::to_string(u.files());
  return std::to_string(u.files()) + " (over limit " + std::to_string(u.files_limit()) + ")";
}

Status Pods(v1::ShmKeeper::Stub& stub, const AgentFlags& f, const v1::ListPodsRequest& req) {
  v1::ListPodsResponse resp;
  SHMK_RETURN_IF_ERROR(Unary(f, [&](grpc::ClientContext* ctx) { return stub.ListPods(ctx, req, &resp); }));
  if (f.output == "json") return PrintJson(resp);
  Rows rows = {{"NAMESPACE", "NAME", "KIND", "SIZE", "USED", "PEAK", "FILES", "UNLINKED", "SYSV", "UNHELD", "LEAKED",
                "REQUESTED"}};
  for (const v1::Pod& p : resp.pods()) {
    const v1::ShmUsage& u = p.shm();
    std::string limit = u.memory_limit_bytes() ? ", memory limit from " + u.memory_limit_source() : "";
    std::string req_s = u.requested_bytes() ? Iec(u.requested_bytes()) + " (" + u.requested_source() + limit +
                                                  (u.sized_by().empty() ? "" : ", by " + u.sized_by()) + ")"
                                            : "-";
    rows.push_back({p.namespace_().empty() ? "-" : p.namespace_(), p.name(), KindName(p.kind()), Iec(u.size_bytes()),
                    Iec(u.used_bytes()), Iec(u.peak_used_bytes()), FilesCell(u), Iec(u.unlinked_bytes()),
                    Iec(u.sysv_bytes()), Iec(p.unheld_bytes()), Iec(p.leaked_bytes()), req_s});
  }
  PrintTable(rows);
  return Status::Ok();
}

Rows LeakRows(const google::protobuf::RepeatedPtrField<v1::Leak>& leaks) {
  Rows rows = {{"POD", "SEGMENT", "SIZE", "STATE", "AGE", "UNHELD", "CREATOR", "RECLAIMABLE"}};
  for (const v1::Leak& l : leaks) {
    std::string state = v1::LeakState_Name(l.state()).substr(11);
    for (char& c : state) c = static_cast<char>(std::tolower(c));
    const v1::LeakEvidence& e = l.evidence();
    std::string creator = e.creator_pid()
                              ? "pid " + std::to_string(e.creator_pid()) + (e.creator_dead() ? " (dead)" : " (alive)")
                              : (e.name_pattern().empty() ? "?" : e.name_pattern());
    rows.push_back({PodName(l.pod().namespace_(), l.pod().name()),
                    l.sysv_id() >= 0 ? "sysv:" + std::to_string(l.sysv_id()) : l.path(), Iec(l.bytes()), state,
                    Seconds(l.age()), Seconds(l.unheld_for()), creator, l.reclaimable() ? "yes" : "no"});
  }
  return rows;
}

Status Leaks(v1::ShmKeeper::Stub& stub, const AgentFlags& f, const v1::ListLeaksRequest& req) {
  v1::ListLeaksResponse resp;
  SHMK_RETURN_IF_ERROR(Unary(f, [&](grpc::ClientContext* ctx) { return stub.ListLeaks(ctx, req, &resp); }));
  if (f.output == "json") return PrintJson(resp);
  PrintTable(LeakRows(resp.leaks()));
  return Status::Ok();
}

Status Reclaim(v1::ShmKeeper::Stub& stub, const AgentFlags& f, const v1::ReclaimLeaksRequest& req) {
  v1::ReclaimLeaksResponse resp;
  SHMK_RETURN_IF_ERROR(Unary(f, [&](grpc::ClientContext* ctx) { return stub.ReclaimLeaks(ctx, req, &resp); }));
  // A path asked for that is neither reclaimed nor skipped is no leak the agent knows: say so, exit 1.
  std::string unknown;
  for (const std::string& p : req.paths()) {
    bool known = false;
    for (const v1::Leak& l : resp.reclaimed()) known = known || l.path() == p;
    for (const v1::SkippedLeak& k : resp.skipped()) known = known || k.leak().path() == p;
    if (!known) unknown += (unknown.empty() ? "" : ", ") + p;
  }
  Status not_found = unknown.empty() ? Status::Ok()
                                     : Status::NotFound("not a leaked segment the agent knows: " + unknown +
                                                        " (it is held, unheld for less than leaks.grace, or does "
                                                        "not exist; `shmkeeper leaks` lists what can be reclaimed)");
  if (f.output == "json") {
    SHMK_RETURN_IF_ERROR(PrintJson(resp));
    return not_found;
  }
  std::cout << (resp.dry_run() ? "would reclaim" : "reclaimed") << " " << resp.reclaimed_size() << " segment(s), "
            << Iec(resp.freed_bytes()) << (resp.dry_run() ? " (dry run; add --yes to remove)" : "") << "\n";
  if (resp.reclaimed_size()) PrintTable(LeakRows(resp.reclaimed()));
  for (const v1::SkippedLeak& k : resp.skipped()) {
    const v1::Leak& l = k.leak();
    std::cout << "skipped " << TermEscape(l.sysv_id() >= 0 ? "sysv:" + std::to_string(l.sysv_id()) : l.path()) << " in "
              << TermEscape(PodName(l.pod().namespace_(), l.pod().name())) << ": " << TermEscape(SkipText(k)) << "\n";
  }
  return not_found;
}

Status Watch(v1::ShmKeeper::Stub& stub, const AgentFlags& f, const v1::WatchRequest& req) {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<v1::Event>> reader = stub.Watch(&ctx, req);
  v1::Event e;
  while (reader->Read(&e)) {
    if (f.output == "json") {  // JSON Lines: one event per line, flushed (a pipe sees each at once)
      SHMK_RETURN_IF_ERROR(PrintJson(e, -1));
      std::cout.flush();
      continue;
    }
    std::string type = v1::EventType_Name(e.type()).substr(11);
    std::cout << TimeUtil::ToString(e.time()) << "  " << type << "  "
              << TermEscape(PodName(e.pod().namespace_(), e.pod().name())) << "  " << TermEscape(e.message())
              << std::endl;
  }
  grpc::Status s = reader->Finish();
  return s.ok() ? Status::Ok() : RpcError(f, s);
}

}  // namespace

void RegisterAgent(CLI::App& app, Outcome& outcome) {
  auto flags = std::make_shared<AgentFlags>();
  CLI::App* status = app.add_subcommand("status", "Node totals from the agent");
  flags->Add(status);
  status->callback(WithStub(flags, outcome, [flags](v1::ShmKeeper::Stub& s) { return Status_(s, *flags); }));

  auto pods_req = std::make_shared<v1::ListPodsRequest>();
  auto ns = std::make_shared<std::string>(), sel = std::make_shared<std::string>();
  auto leaks_only = std::make_shared<bool>(false);
  CLI::App* pods = app.add_subcommand("pods", "Per-pod shared memory usage");
  flags->Add(pods);
  pods->add_option("-n,--namespace", *ns, "Only this namespace (compose: project)");
  pods->add_option("-l,--selector", *sel, "Label/annotation selector: k=v,k2!=v2,k3");
  pods->add_flag("--leaks", *leaks_only, "Only pods with leaks");
  pods->callback(WithStub(flags, outcome, [=](v1::ShmKeeper::Stub& s) {
    pods_req->set_namespace_(*ns);
    pods_req->set_selector(*sel);
    pods_req->set_only_with_leaks(*leaks_only);
    return Pods(s, *flags, *pods_req);
  }));

  auto pod = std::make_shared<std::string>();
  CLI::App* leaks = app.add_subcommand("leaks", "Segments no process holds");
  flags->Add(leaks);
  leaks->add_option("-n,--namespace", *ns, "Only this namespace");
  leaks->add_option("--pod", *pod, "Only this pod (name or uid)");
  leaks->callback(WithStub(flags, outcome, [=](v1::ShmKeeper::Stub& s) {
    v1::ListLeaksRequest req;
    req.set_namespace_(*ns);
    req.set_pod(*pod);
    return Leaks(s, *flags, req);
  }));

  auto yes = std::make_shared<bool>(false);
  auto paths = std::make_shared<std::vector<std::string>>();
  CLI::App* reclaim = app.add_subcommand("reclaim", "Remove reclaimable leaks (a dry run without --yes)");
  flags->Add(reclaim);
  reclaim->add_flag("--yes", *yes, "Really remove them");
  reclaim->add_option("-n,--namespace", *ns, "Only this namespace");
  reclaim->add_option("--pod", *pod, "Only this pod (name or uid)");
  reclaim->add_option("paths", *paths, "Only these segments (paths as `shmkeeper leaks` shows them)");
  reclaim->callback(WithStub(flags, outcome, [=](v1::ShmKeeper::Stub& s) {
    v1::ReclaimLeaksRequest req;
    req.set_dry_run(!*yes);
    req.set_namespace_(*ns);
    req.set_pod(*pod);
    for (const std::string& p : *paths) req.add_paths(p);
    return Reclaim(s, *flags, req);
  }));

  CLI::App* watch = app.add_subcommand("watch", "Stream agent events until interrupted");
  flags->Add(watch);
  watch->add_option("-n,--namespace", *ns, "Only this namespace");
  watch->callback(WithStub(flags, outcome, [=](v1::ShmKeeper::Stub& s) {
    v1::WatchRequest req;
    req.set_namespace_(*ns);
    return Watch(s, *flags, req);
  }));
}

}  // namespace shmkeeper::cli
