#include "compose/compose_rules.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "base/bytes.h"
#include "compose/compose_evidence.h"

namespace shmkeeper {
namespace compose {
namespace {

// "shm-size", "shmsize", "shmSize", "SHM_SIZE" and friends, but not shm_size.
bool IsShmSizeMisspelling(const std::string& key) {
  if (key == "shm_size") return false;
  std::string k;
  for (char c : Lower(key)) {
    if (c != '-' && c != '_' && c != ' ') k += c;
  }
  return k == "shmsize";
}

bool IsShmPath(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path == "/dev/shm";
}

// A volumes item that binds the host's /dev/shm over the container's:
// "/dev/shm:/dev/shm[:mode]" or {type: bind, source: /dev/shm, target: /dev/shm}.
bool IsHostShmBind(const YAML::Node& item) {
  if (item.IsScalar()) {
    const std::string& v = item.Scalar();
    size_t c1 = v.find(':');
    if (c1 == std::string::npos) return false;
    size_t c2 = v.find(':', c1 + 1);
    return IsShmPath(v.substr(0, c1)) &&
           IsShmPath(v.substr(c1 + 1, c2 == std::string::npos ? std::string::npos : c2 - c1 - 1));
  }
  if (!item.IsMap()) return false;
  auto scalar = [&](const char* k) { return item[k] && item[k].IsScalar() ? item[k].Scalar() : std::string(); };
  return scalar("type") == "bind" && IsShmPath(scalar("source")) && IsShmPath(scalar("target"));
}

// Whether the service mounts a tmpfs of its own at /dev/shm (tmpfs:, or a
// volumes item of type tmpfs): sized by hand, not by shm_size.
bool HasShmTmpfs(const Service& s) {
  if (auto t = s.keys.find("tmpfs"); t != s.keys.end()) {
    const YAML::Node& v = t->second.value;
    auto at_shm = [](const YAML::Node& n) {
      return n.IsScalar() && IsShmPath(n.Scalar().substr(0, n.Scalar().find(':')));
    };
    if (at_shm(v)) return true;
    if (v.IsSequence() && std::any_of(v.begin(), v.end(), at_shm)) return true;
  }
  auto vols = s.keys.find("volumes");
  if (vols == s.keys.end() || !vols->second.value.IsSequence()) return false;
  for (const auto& item : vols->second.value) {
    if (item.IsMap() && item["type"] && item["type"].IsScalar() && item["type"].Scalar() == "tmpfs" && item["target"] &&
        item["target"].IsScalar() && IsShmPath(item["target"].Scalar())) {
      return true;
    }
  }
  return false;
}

// The mappings the service is written in: its own in each file, then those
// of the services it extends (file, mapping).
std::vector<std::pair<std::string, YAML::Node>> WrittenIn(const Service& s) {
  std::vector<std::pair<std::string, YAML::Node>> out(s.nodes.begin(), s.nodes.end());
  out.insert(out.end(), s.inherited.begin(), s.inherited.end());
  return out;
}

// `key` of mapping `node`, or of the mappings it merges (<<: *anchor) when it has none.
YAML::Node OwnOrMerged(const YAML::Node& node, const std::string& key, int depth = 0) {
  if (!node.IsMap() || depth > 8) return YAML::Node();
  if (YAML::Node v = node[key]; v) return v;
  YAML::Node merge = node["<<"];
  if (merge && merge.IsMap()) return OwnOrMerged(merge, key, depth + 1);
  if (merge && merge.IsSequence()) {
    for (const auto& m : merge) {
      if (YAML::Node v = OwnOrMerged(m, key, depth + 1); v) return v;
    }
  }
  return YAML::Node();
}

// The host /dev/shm binds of a service, where each is written (an anchor it
// merges, a service it extends included), each place once.
std::vector<std::pair<std::string, YAML::Node>> HostShmBinds(const Service& s) {
  std::vector<std::pair<std::string, YAML::Node>> out;
  std::set<std::pair<std::string, int>> seen;
  for (const auto& [file, node] : WrittenIn(s)) {
    // A later file's `volumes: !reset` or `!override` drops this file's volumes.
    if (auto d = s.dropped.find("volumes"); d != s.dropped.end() && d->second.count(file)) continue;
    YAML::Node vols = OwnOrMerged(node, "volumes");
    if (!vols || !vols.IsSequence()) continue;
    for (const auto& item : vols) {
      if (IsHostShmBind(item) && seen.insert({file, item.Mark().line}).second) out.emplace_back(file, item);
    }
  }
  return out;
}

std::string ComposeSizeText(int64_t bytes) {
  if (bytes % kGiB == 0) return std::to_string(bytes / kGiB) + "gb";
  return std::to_string((bytes + kMiB - 1) / kMiB) + "mb";
}

std::string IpcMode(const Service& s) {
  auto it = s.keys.find("ipc");
  return it != s.keys.end() && it->second.value.IsScalar() ? it->second.value.Scalar() : "";
}

void Add(ComposeReport* r, FindingCode code, Severity sev, std::string service, SourcePos pos, std::string msg,
         std::string suggestion, std::string because = "") {
  r->findings.push_back(
      {code, sev, std::move(service), std::move(pos), std::move(msg), std::move(suggestion), std::move(because)});
}

// Misplaced or misspelled shm keys inside `map` (a service, its deploy or environment).
void CheckKeys(const YAML::Node& map, const std::string& file, const std::string& svc, const std::string& where,
               ComposeReport* r) {
  if (map.IsMap()) {
    for (const auto& kv : map) {
      if (!kv.first.IsScalar()) continue;
      const std::string& k = kv.first.Scalar();
      if (IsShmSizeMisspelling(k)) {
        Add(r, FindingCode::kMisspelledKey, Severity::kError, svc, At(file, kv.first),
            "'" + k + "'" + where + " is not a compose key (docker-compose rejects it); the key is shm_size",
            "shm_size");
        // The value is kept by the rename only when it is a size compose accepts.
        if (kv.second.IsScalar() && !IsComposeSize(kv.second.Scalar()) &&
            kv.second.Scalar().find('$') == std::string::npos) {
          Add(r, FindingCode::kInvalidSize, Severity::kError, svc, At(file, kv.second),
              "'" + k + "' has \"" + kv.second.Scalar() + "\", which is not a size docker-compose accepts", "");
        }
      } else if (k == "shm_size" && !where.empty()) {
        Add(r, FindingCode::kMisplacedShmSize, Severity::kError, svc, At(file, kv.first),
            "shm_size" + where + " has no effect; it belongs directly under the service", "move it up to the service");
      }
    }
  } else if (map.IsSequence()) {  // environment: ["SHM_SIZE=1g"]
    for (const auto& item : map) {
      if (!item.IsScalar()) continue;
      std::string k = item.Scalar().substr(0, item.Scalar().find('='));
      if (k == "shm_size" || IsShmSizeMisspelling(k)) {
        Add(r, FindingCode::kMisplacedShmSize, Severity::kError, svc, At(file, item),
            "'" + k + "'" + where + " is an environment variable, not the container's /dev/shm size",
            "shm_size under the service");
      }
    }
  }
}

// A misspelled shm-size states the intent: renaming it is the fix, not adding one.
bool HasMisspelledShmSize(const Service& s) {
  for (const auto& [k, e] : s.keys) {
    if (IsShmSizeMisspelling(k)) return true;
  }
  return false;
}

// Misplaced or misspelled shm keys of the service, its deploy and its environment, in every file.
void CheckMappingKeys(const YAML::Node& node, const std::string& file, const std::string& svc, ComposeReport* r,
                      int depth) {
  if (!node.IsMap() || depth > 8) return;
  CheckKeys(node, file, svc, "", r);
  if (node["deploy"]) CheckKeys(node["deploy"], file, svc, " under deploy", r);
  if (node["environment"]) CheckKeys(node["environment"], file, svc, " under environment", r);
  // The anchors it merges are written elsewhere in the file: their keys count too.
  if (YAML::Node merge = node["<<"]; merge && merge.IsMap()) CheckMappingKeys(merge, file, svc, r, depth + 1);
  if (YAML::Node merge = node["<<"]; merge && merge.IsSequence()) {
    for (const auto& m : merge) CheckMappingKeys(m, file, svc, r, depth + 1);
  }
}

void CheckServiceKeys(const Service& s, ComposeReport* r) {
  for (const auto& [file, node] : WrittenIn(s)) CheckMappingKeys(node, file, s.name, r, 0);
}

void CheckHostBinds(const Service& s, const std::vector<std::pair<std::string, YAML::Node>>& binds,
                    const std::string& suggest, ComposeReport* r) {
  for (const auto& [file, item] : binds) {
    Add(r, FindingCode::kHostShmBind, Severity::kWarning, s.name, At(file, item),
        "binds the host's /dev/shm: the container sees every host segment, has no limit and its files outlive it; "
        "set shm_size instead",
        "shm_size: \"" + suggest + "\"", "a volume binds the host's /dev/shm at /dev/shm");
  }
}

// Whether the plain YAML scalar `v` is a number with a fraction: compose v1
// hands the float to the engine, which refuses it, and v2 ignores it.
bool IsPlainFloat(const YAML::Node& v) {
  if (v.Tag() != "?") return false;
  const std::string& t = v.Scalar();
  return t.find('.') != std::string::npos && t.find_first_not_of("0123456789.+-eE_") == std::string::npos;
}

// The service's shm_size `e`: a size compose accepts, and not too small for what it needs.
void CheckShmSizeValue(const Service& s, const Entry& e, const Need& need, const std::string& suggest,
                       const ComposeCheckOptions& o, ComposeReport* r) {
  if (!e.value.IsScalar()) {
    Add(r, FindingCode::kInvalidSize, Severity::kError, s.name, At(e.file, e.value), "shm_size must be a size",
        suggest);
    return;
  }
  Result<std::string> v = Interpolate(e.value.Scalar(), o.env);
  Result<int64_t> bytes = v.ok() ? ParseComposeSize(*v) : Result<int64_t>(v.status());
  if (!v.ok() || !bytes.ok() || IsPlainFloat(e.value)) {
    Add(r, FindingCode::kInvalidSize, Severity::kError, s.name, At(e.file, e.value),
        "shm_size \"" + e.value.Scalar() + "\" is not a size docker-compose accepts (like 2gb, 512m or bytes)",
        suggest);
  } else if (*bytes < o.min_bytes && need.needs) {
    Add(r, FindingCode::kSizeTooSmall, Severity::kWarning, s.name, At(e.file, e.value),
        "shm_size " + FormatSize(*bytes) + " is below " + FormatSize(o.min_bytes) + " for a service that " +
            need.reason,
        suggest, need.because);
  } else if (*bytes < need.floor && need.needs) {
    Add(r, FindingCode::kSizeTooSmall, Severity::kWarning, s.name, At(e.file, e.value),
        "shm_size " + FormatSize(*bytes) + " is below the " + FormatSize(need.floor) +
            " it needs at least: the service " + need.reason,
        suggest, need.because);
  }
}

// What a service without shm_size gets on this node, for messages.
std::string DefaultShmText(const Service& s, const ComposeCheckOptions& o) {
  std::string runtime = o.default_runtime;
  if (auto rt = s.keys.find("runtime"); rt != s.keys.end() && rt->second.value.IsScalar()) {
    runtime = rt->second.value.Scalar();
    if (runtime.find("shmkeeper") == std::string::npos) return "its runtime " + runtime + " gives it a 64MiB /dev/shm";
  }
  if (runtime.find("shmkeeper") != std::string::npos) {
    return "on this node the default runtime (" + runtime +
           ") sizes /dev/shm by its policy, but every engine without it gives the service a 64MiB /dev/shm";
  }
  if (!runtime.empty()) return "Docker's default runtime here (" + runtime + ") gives it a 64MiB /dev/shm";
  return "Docker gives it a 64MiB /dev/shm";
}

// Whether another service of the project shares an IPC namespace with `s`'s
// (ipc: host too, or ipc: service:s).
bool HasIpcPeer(const Service& s, const ComposeProject& project) {
  return std::any_of(project.services.begin(), project.services.end(), [&](const auto& kv) {
    std::string ipc = IpcMode(kv.second);
    return kv.first != s.name && (ipc == "host" || ipc == "service:" + s.name);
  });
}

// A service without shm_size: ipc: host used for its /dev/shm, or no size where it needs one.
void CheckNoShmSize(const Service& s, const Need& need, bool mounts_shm, const std::string& suggest,
                    const ComposeCheckOptions& o, const ComposeProject& project, ComposeReport* r) {
  std::string ipc = IpcMode(s);
  if (mounts_shm) {
    // /dev/shm comes from a mount; a host bind is reported on its own.
  } else if (ipc == "host" && need.needs && need.gpu_ipc && HasIpcPeer(s, project)) {
    // Not a fix to make silently: kept, and said so.
    auto it = s.keys.find("ipc");
    Add(r, FindingCode::kIpcHostForShm, Severity::kInfo, s.name, At(it->second.file, it->second.value),
        "ipc: host kept: it gives the service the host's /dev/shm and IPC namespace, which CUDA IPC and NCCL "
        "between containers may rely on; shm_size \"" +
            suggest + "\" instead would take both away (a choice left to you, not made by fix)",
        "", need.because);
  } else if (ipc == "host" && need.needs) {
    auto it = s.keys.find("ipc");
    Add(r, FindingCode::kIpcHostForShm, Severity::kWarning, s.name, At(it->second.file, it->second.value),
        "ipc: host shares the host's IPC namespace (and /dev/shm) with the container; to get a bigger /dev/shm, "
        "set shm_size instead (this also takes the container out of the host's IPC namespace: SysV IPC and CUDA "
        "IPC with processes outside it stop)",
        "shm_size: \"" + suggest + "\"", need.because);
  } else if (need.needs && !HasMisspelledShmSize(s) && ipc != "shareable" && !ipc.starts_with("service:") &&
             !ipc.starts_with("container:") && ipc != "host") {
    Add(r, FindingCode::kMissingShmSize, Severity::kWarning, s.name, s.pos,
        "service " + need.reason + " but sets no shm_size: " + DefaultShmText(s, o), "shm_size: \"" + suggest + "\"",
        need.because);
  }
}

void CheckBuild(const Service& s, const Need& need, const std::string& suggest, ComposeReport* r) {
  auto build = s.keys.find("build");
  if (build != s.keys.end() && !need.build_torch_tests.empty() &&
      !(build->second.value.IsMap() && build->second.value["shm_size"])) {
    Add(r, FindingCode::kBuildShmSize, Severity::kWarning, s.name, At(build->second.file, build->second.key),
        "the build runs PyTorch tests but build.shm_size is not set: RUN steps get a 64MiB /dev/shm",
        "build.shm_size: \"" + suggest + "\"", "the Dockerfile runs `" + need.build_torch_tests + "`");
  }
}

// Every check of one service; its suggested size goes to r->suggestions.
void CheckService(const Service& s, const ComposeCheckOptions& o, const ComposeProject& project, ComposeReport* r) {
  CheckServiceKeys(s, r);
  Need need = NeedOf(s, o, project);
  std::string suggest = ComposeSizeText(need.bytes ? need.bytes : 2 * kGiB);
  std::vector<std::pair<std::string, YAML::Node>> binds = HostShmBinds(s);
  if (need.needs) {
    r->suggestions[s.name] = {suggest, need.reason};
  } else if (!binds.empty()) {
    r->suggestions[s.name] = {suggest, "binds the host's /dev/shm"};
  }
  CheckHostBinds(s, binds, suggest, r);
  auto shm = s.keys.find("shm_size");
  if (shm != s.keys.end()) {
    CheckShmSizeValue(s, shm->second, need, suggest, o, r);
  } else {
    CheckNoShmSize(s, need, !binds.empty() || HasShmTmpfs(s), suggest, o, project, r);
  }
  CheckBuild(s, need, suggest, r);
}

// shm_size at the top level of a file.
void CheckTopLevel(const LoadedFile& lf, ComposeReport* r) {
  if (!lf.root["shm_size"] && !lf.root["shm-size"]) return;
  YAML::Node k = lf.root["shm_size"] ? lf.root["shm_size"] : lf.root["shm-size"];
  Add(r, FindingCode::kMisplacedShmSize, Severity::kError, "", At(lf.path, k),
      "shm_size at the top level of the file has no effect; set it under each service", "");
}

}  // namespace

Result<Checked> ReadAndCheck(const ComposeCheckOptions& o) {
  Checked c;
  SHMK_ASSIGN_OR_RETURN(c.project, ReadComposeProject(o));
  ComposeCheckOptions opts = o;
  opts.env = c.project.env;
  c.report.project = c.project.name;
  for (const LoadedFile& lf : c.project.files) {
    c.report.files.push_back(lf.path);
    CheckTopLevel(lf, &c.report);
  }
  for (const LoadedFile& lf : c.project.extended) c.report.files.push_back(lf.path);
  for (const auto& [name, s] : c.project.services) {
    c.report.services.push_back(name);
    CheckService(s, opts, c.project, &c.report);
  }
  std::stable_sort(
      c.report.findings.begin(), c.report.findings.end(), [](const ComposeFinding& a, const ComposeFinding& b) {
        return std::tie(a.pos.file, a.pos.line, a.pos.column) < std::tie(b.pos.file, b.pos.line, b.pos.column);
      });
  return c;
}

}  // namespace compose

}  // namespace shmkeeper
