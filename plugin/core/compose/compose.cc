#include "compose/compose.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>

#include "base/bytes.h"
#include "base/fileutil.h"
#include "decide/workloads.h"

namespace shmkeeper {
namespace {

constexpr size_t kMaxFileBytes = 4 << 20;
constexpr int kMaxDepth = 64;
constexpr size_t kMaxNodes = 200000;
constexpr int kMaxExtends = 10;

SourcePos At(const std::string& file, const YAML::Node& n) {
  YAML::Mark m = n.Mark();
  if (m.is_null()) return {file, 0, 0};
  return {file, m.line + 1, m.column + 1};
}

Status BadAt(const SourcePos& p, const std::string& why) { return Status::Invalid(p.ToString() + ": " + why); }

// Rejects duplicate keys, runaway nesting and alias bombs.
Status Validate(const YAML::Node& n, const std::string& file, int depth, size_t* budget) {
  if (++*budget > kMaxNodes) return BadAt(At(file, n), "too many YAML nodes (alias expansion?)");
  if (depth > kMaxDepth) return BadAt(At(file, n), "nested deeper than " + std::to_string(kMaxDepth) + " levels");
  if (n.IsMap()) {
    std::set<std::string> keys;
    for (const auto& kv : n) {
      if (kv.first.IsScalar() && !keys.insert(kv.first.Scalar()).second) {
        return BadAt(At(file, kv.first), "duplicate key '" + kv.first.Scalar() + "'");
      }
      SHMK_RETURN_IF_ERROR(Validate(kv.second, file, depth + 1, budget));
    }
  } else if (n.IsSequence()) {
    for (const auto& item : n) SHMK_RETURN_IF_ERROR(Validate(item, file, depth + 1, budget));
  }
  return Status::Ok();
}

struct LoadedFile {
  std::string path;
  std::string text;
  YAML::Node root;
};

// In-memory files (fuzzing); consulted before the filesystem.
thread_local const std::map<std::string, std::string>* g_texts = nullptr;

Result<std::string> ReadComposeText(const std::string& path) {
  if (!g_texts) return ReadFile(path, kMaxFileBytes);
  auto it = g_texts->find(path);
  if (it == g_texts->end()) return Status::Invalid(path + ": not found");
  if (it->second.size() > kMaxFileBytes) return Status::Invalid(path + ": larger than 4 MiB");
  return it->second;
}

Result<LoadedFile> ParseComposeText(const std::string& path, std::string text);

Result<LoadedFile> LoadComposeFile(const std::string& path) {
  Result<std::string> text = ReadComposeText(path);
  if (!text.ok()) {
    if (text.status().message().find("larger than") != std::string::npos) {
      return Status::Invalid(path + ": larger than " + std::to_string(kMaxFileBytes >> 20) + " MiB");
    }
    return Status::Invalid(path + ": " + text.status().message());
  }
  return ParseComposeText(path, std::move(*text));
}

// Everything the reader requires of a file's text: YAML that parses, no
// duplicate keys, bounded, a mapping whose services are mappings.
Result<LoadedFile> ParseComposeText(const std::string& path, std::string text) {
  if (text.find('\0') != std::string::npos) return Status::Invalid(path + ": binary data, not YAML");
  LoadedFile f{path, std::move(text), {}};
  try {
    f.root = YAML::Load(f.text);
  } catch (const YAML::Exception& e) {
    return Status::Invalid(path + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                           ": " + e.msg);
  }
  size_t budget = 0;
  SHMK_RETURN_IF_ERROR(Validate(f.root, path, 0, &budget));
  if (!f.root.IsMap()) return BadAt(At(path, f.root), "a compose file must be a mapping");
  YAML::Node services = f.root["services"];
  if (services && !services.IsMap() && !services.IsNull()) {
    return BadAt(At(path, services), "'services' must be a mapping");
  }
  if (services && services.IsMap()) {
    for (const auto& kv : services) {
      if (kv.first.IsScalar() && !kv.second.IsMap() && !kv.second.IsNull()) {
        return BadAt(At(path, kv.second), "service '" + kv.first.Scalar() + "' must be a mapping");
      }
    }
  }
  return f;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// "shm-size", "shmsize", "shmSize", "SHM_SIZE" and friends, but not shm_size.
bool IsShmSizeMisspelling(const std::string& key) {
  if (key == "shm_size") return false;
  std::string k;
  for (char c : Lower(key)) {
    if (c != '-' && c != '_' && c != ' ') k += c;
  }
  return k == "shmsize";
}

// One key of a merged service: where it was written last.
struct Entry {
  YAML::Node key, value;
  std::string file;
};

struct Service {
  std::string name;
  SourcePos pos;  // first definition
  std::map<std::string, Entry> keys;
  std::map<std::string, YAML::Node> nodes;  // file -> the service's mapping there
};

void MergeKeys(Service* s, const YAML::Node& node, const std::string& file, bool override_existing, int depth) {
  if (!node.IsMap() || depth > 8) return;
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) continue;
    const std::string& k = kv.first.Scalar();
    if (k == "<<") continue;
    if (override_existing || !s->keys.count(k)) s->keys[k] = {kv.first, kv.second, file};
  }
  // YAML merge keys (<<: *anchor or a list of them), as docker-compose reads
  // them: the mapping's own keys win.
  if (YAML::Node merge = node["<<"]; merge) {
    if (merge.IsMap()) MergeKeys(s, merge, file, false, depth + 1);
    if (merge.IsSequence()) {
      for (const auto& m : merge) MergeKeys(s, m, file, false, depth + 1);
    }
  }
}

void MergeService(Service* s, const YAML::Node& node, const std::string& file, bool override_existing) {
  if (!node.IsMap()) return;
  s->nodes[file] = node;
  MergeKeys(s, node, file, override_existing, 0);
}

std::string DirOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string Join(const std::string& dir, const std::string& rel) {
  return !rel.empty() && rel[0] == '/' ? rel : dir + "/" + rel;
}

// Folds `extends` chains into `s` (base keys only where the service has none).
// `all` holds the services of the file(s) a plain `extends: name` refers to.
Status ResolveExtends(Service* s, const std::map<std::string, Service>& all, int depth) {
  auto ext = s->keys.find("extends");
  if (ext == s->keys.end()) return Status::Ok();
  const Entry e = ext->second;
  if (depth > kMaxExtends) return BadAt(At(e.file, e.key), "extends chain too long (a cycle?)");
  std::string base_name, base_file;
  if (e.value.IsScalar()) {
    base_name = e.value.Scalar();
  } else if (e.value.IsMap() && e.value["service"] && e.value["service"].IsScalar()) {
    base_name = e.value["service"].Scalar();
    if (e.value["file"] && e.value["file"].IsScalar()) base_file = Join(DirOf(e.file), e.value["file"].Scalar());
  } else {
    return BadAt(At(e.file, e.value), "extends must name a service");
  }
  std::map<std::string, Service> other;  // the services of base_file
  if (!base_file.empty()) {
    Result<LoadedFile> loaded = LoadComposeFile(base_file);
    if (!loaded.ok()) return BadAt(At(e.file, e.value), "extends: " + loaded.status().message());
    const LoadedFile& lf = *loaded;
    if (YAML::Node services = lf.root["services"]; services && services.IsMap()) {
      for (const auto& kv : services) {
        if (!kv.first.IsScalar()) continue;
        Service& b = other[kv.first.Scalar()];
        b.name = kv.first.Scalar();
        MergeService(&b, kv.second, base_file, true);
      }
    }
  }
  const std::map<std::string, Service>& scope = base_file.empty() ? all : other;
  auto it = scope.find(base_name);
  if (it == scope.end()) {
    return BadAt(At(e.file, e.value),
                 "extends: no service '" + base_name + "'" + (base_file.empty() ? "" : " in " + base_file));
  }
  Service base = it->second;
  SHMK_RETURN_IF_ERROR(ResolveExtends(&base, scope, depth + 1));
  s->keys.erase("extends");
  for (auto& [k, v] : base.keys) s->keys.try_emplace(k, v);
  return Status::Ok();
}

// Every scalar under `n`, lower-cased, joined (bounded). URLs are left out:
// "http://vllm:8000" names a service the container talks to, not one it runs.
void Flatten(const YAML::Node& n, std::string* out, int depth = 0) {
  if (depth > 16 || out->size() > 65536) return;
  if (n.IsScalar() && n.Scalar().find("://") != std::string::npos) return;
  if (n.IsScalar()) {
    *out += Lower(n.Scalar());
    *out += ' ';
  } else if (n.IsMap()) {
    for (const auto& kv : n) {
      Flatten(kv.first, out, depth + 1);
      Flatten(kv.second, out, depth + 1);
    }
  } else if (n.IsSequence()) {
    for (const auto& item : n) Flatten(item, out, depth + 1);
  }
}

struct Need {
  bool needs = false;
  int64_t bytes = 0;
  std::string reason;
};

bool HasGpu(const Service& s) {
  auto rt = s.keys.find("runtime");
  if (rt != s.keys.end() && rt->second.value.IsScalar() && rt->second.value.Scalar() == "nvidia") return true;
  auto dep = s.keys.find("deploy");
  if (dep == s.keys.end()) return false;
  std::string blob;
  Flatten(dep->second.value, &blob);
  return blob.find("gpu") != std::string::npos || blob.find("nvidia") != std::string::npos;
}

int NumWorkers(const std::string& blob) {
  for (const char* key : {"num_workers", "num-workers", "numworkers"}) {
    size_t at = blob.find(key);
    if (at == std::string::npos) continue;
    size_t p = at + std::string(key).size();
    while (p < blob.size() && (blob[p] == '=' || blob[p] == ' ' || blob[p] == ':' || blob[p] == '"')) ++p;
    int n = 0;
    while (p < blob.size() && std::isdigit(static_cast<unsigned char>(blob[p])) && n < 100000)
      n = n * 10 + (blob[p++] - '0');
    if (n > 0) return n;
  }
  return 0;
}

// What a service shows of itself to the workload table (workloads.h): its
// image, the words of its command and entrypoint, its environment's names,
// and every scalar of those and of build, working_dir and labels.
WorkloadSignals Signals(const Service& s) {
  WorkloadSignals sig;
  for (const char* k : {"image", "command", "entrypoint", "environment", "build", "working_dir", "labels"}) {
    auto it = s.keys.find(k);
    if (it != s.keys.end()) Flatten(it->second.value, &sig.text);
  }
  if (auto it = s.keys.find("image"); it != s.keys.end() && it->second.value.IsScalar()) {
    sig.image = Lower(it->second.value.Scalar());
  }
  for (const char* k : {"entrypoint", "command"}) {
    auto it = s.keys.find(k);
    if (it == s.keys.end()) continue;
    const YAML::Node& v = it->second.value;
    if (v.IsScalar()) AddCommandWords(v.Scalar(), true, &sig);
    if (!v.IsSequence()) continue;
    bool first = true;
    for (const auto& item : v) {
      if (!item.IsScalar()) continue;
      AddCommandWords(item.Scalar(), first, &sig);
      first = false;
    }
  }
  if (auto env = s.keys.find("environment"); env != s.keys.end()) {
    for (const auto& item : env->second.value) {
      if (env->second.value.IsMap() && item.first.IsScalar()) sig.env_keys.push_back(Lower(item.first.Scalar()));
      if (env->second.value.IsSequence() && item.IsScalar()) {
        sig.env_keys.push_back(Lower(item.Scalar().substr(0, item.Scalar().find('='))));
      }
    }
  }
  return sig;
}

// Which workloads of the table a service shows, and the size that serves them.
Need Evidence(const Service& s) {
  WorkloadSignals sig = Signals(s);
  Need need;
  auto add = [&](const std::string& why, int64_t bytes) {
    need.needs = true;
    need.bytes = std::max(need.bytes, bytes);
    need.reason += (need.reason.empty() ? "" : ", ") + why;
  };
  for (const ShmWorkload* w : MatchShmWorkloads(sig)) {
    add("uses " + std::string(w->name) + " (at 64MiB: " + w->symptom + ")", w->bytes);
  }
  if (int n = NumWorkers(sig.text))
    add("num_workers=" + std::to_string(n), std::max<int64_t>(2 * kGiB, n * 512 * kMiB));
  if (HasGpu(s)) add("reserves GPUs", 8 * kGiB);
  return need;
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

// The host /dev/shm binds of a service, in each file that declares its volumes.
std::vector<std::pair<std::string, YAML::Node>> HostShmBinds(const Service& s) {
  std::vector<std::pair<std::string, YAML::Node>> out;
  for (const auto& [file, node] : s.nodes) {
    YAML::Node vols = node["volumes"];
    if (!vols || !vols.IsSequence()) continue;
    for (const auto& item : vols) {
      if (IsHostShmBind(item)) out.emplace_back(file, item);
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

bool DockerfileRunsTorchTests(const Service& s) {
  auto b = s.keys.find("build");
  if (b == s.keys.end() || g_texts) return false;
  std::string context = ".", dockerfile = "Dockerfile";
  if (b->second.value.IsScalar()) context = b->second.value.Scalar();
  if (b->second.value.IsMap()) {
    if (b->second.value["context"] && b->second.value["context"].IsScalar())
      context = b->second.value["context"].Scalar();
    if (b->second.value["dockerfile"] && b->second.value["dockerfile"].IsScalar()) {
      dockerfile = b->second.value["dockerfile"].Scalar();
    }
  }
  Result<std::string> text = ReadFile(Join(Join(DirOf(b->second.file), context), dockerfile), 1 << 20);
  if (!text.ok()) return false;
  std::string t = Lower(*text);
  return t.find("torch") != std::string::npos &&
         (t.find("pytest") != std::string::npos || t.find("unittest") != std::string::npos);
}

struct Checked {
  std::vector<LoadedFile> files;
  std::map<std::string, Service> services;
  ComposeReport report;
};

void Add(ComposeReport* r, std::string code, Severity sev, std::string service, SourcePos pos, std::string msg,
         std::string suggestion) {
  r->findings.push_back(
      {std::move(code), sev, std::move(service), std::move(pos), std::move(msg), std::move(suggestion)});
}

// Misplaced or misspelled shm keys inside `map` (a service, its deploy or environment).
void CheckKeys(const YAML::Node& map, const std::string& file, const std::string& svc, const std::string& where,
               ComposeReport* r) {
  if (map.IsMap()) {
    for (const auto& kv : map) {
      if (!kv.first.IsScalar()) continue;
      const std::string& k = kv.first.Scalar();
      if (IsShmSizeMisspelling(k)) {
        Add(r, "misspelled-key", Severity::kError, svc, At(file, kv.first),
            "'" + k + "'" + where + " is not a compose key (docker-compose rejects it); the key is shm_size",
            "shm_size");
        // The value is kept by the rename only when it is a size compose accepts.
        if (kv.second.IsScalar() && !IsComposeSize(kv.second.Scalar()) &&
            kv.second.Scalar().find('$') == std::string::npos) {
          Add(r, "invalid-size", Severity::kError, svc, At(file, kv.second),
              "'" + k + "' has \"" + kv.second.Scalar() + "\", which is not a size docker-compose accepts", "");
        }
      } else if (k == "shm_size" && !where.empty()) {
        Add(r, "misplaced-shm-size", Severity::kError, svc, At(file, kv.first),
            "shm_size" + where + " has no effect; it belongs directly under the service", "move it up to the service");
      }
    }
  } else if (map.IsSequence()) {  // environment: ["SHM_SIZE=1g"]
    for (const auto& item : map) {
      if (!item.IsScalar()) continue;
      std::string k = item.Scalar().substr(0, item.Scalar().find('='));
      if (k == "shm_size" || IsShmSizeMisspelling(k)) {
        Add(r, "misplaced-shm-size", Severity::kError, svc, At(file, item),
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

Status CheckService(const Service& s, const ComposeCheckOptions& o, Checked* c) {
  ComposeReport& r = c->report;
  for (const auto& [file, node] : s.nodes) {
    CheckKeys(node, file, s.name, "", &r);
    if (node["deploy"]) CheckKeys(node["deploy"], file, s.name, " under deploy", &r);
    if (node["environment"]) CheckKeys(node["environment"], file, s.name, " under environment", &r);
  }
  Need need = Evidence(s);
  auto measured = o.measured.find(c->report.project + "/" + s.name);
  if (measured != o.measured.end() && measured->second > 0) {
    int64_t want = (2 * measured->second + kGiB - 1) / kGiB * kGiB;
    if (want > need.bytes) {
      need.bytes = want;
      need.reason += (need.reason.empty() ? "" : ", ") + std::string("measured peak ") + FormatSize(measured->second);
      need.needs = true;
    }
  }
  std::string suggest = ComposeSizeText(need.bytes ? need.bytes : 2 * kGiB);
  std::vector<std::pair<std::string, YAML::Node>> binds = HostShmBinds(s);
  if (need.needs) {
    c->report.suggestions[s.name] = {suggest, need.reason};
  } else if (!binds.empty()) {
    c->report.suggestions[s.name] = {suggest, "binds the host's /dev/shm"};
  }
  for (const auto& [file, item] : binds) {
    Add(&r, "host-shm-bind", Severity::kWarning, s.name, At(file, item),
        "binds the host's /dev/shm: the container sees every host segment, has no limit and its files outlive it; "
        "set shm_size instead",
        "shm_size: \"" + suggest + "\"");
  }
  std::string ipc = IpcMode(s);
  auto shm = s.keys.find("shm_size");
  if (shm != s.keys.end()) {
    const Entry& e = shm->second;
    if (!e.value.IsScalar()) {
      Add(&r, "invalid-size", Severity::kError, s.name, At(e.file, e.value), "shm_size must be a size", suggest);
    } else {
      Result<std::string> v = Interpolate(e.value.Scalar(), o.env);
      Result<int64_t> bytes = v.ok() ? ParseSize(*v) : Result<int64_t>(v.status());
      if (!v.ok() || !IsComposeSize(*v) || !bytes.ok()) {
        Add(&r, "invalid-size", Severity::kError, s.name, At(e.file, e.value),
            "shm_size \"" + e.value.Scalar() + "\" is not a size docker-compose accepts (like 2gb, 512m or bytes)",
            suggest);
      } else if (*bytes < o.min_bytes && need.needs) {
        Add(&r, "size-too-small", Severity::kWarning, s.name, At(e.file, e.value),
            "shm_size " + FormatSize(*bytes) + " is below " + FormatSize(o.min_bytes) + " for a service that " +
                need.reason,
            suggest);
      }
    }
  } else if (!binds.empty() || HasShmTmpfs(s)) {
    // /dev/shm comes from a mount; a host bind is reported above.
  } else if (ipc == "host" && need.needs) {
    auto it = s.keys.find("ipc");
    Add(&r, "ipc-host-for-shm", Severity::kWarning, s.name, At(it->second.file, it->second.value),
        "ipc: host shares the host's IPC namespace (and /dev/shm) with the container; to get a bigger /dev/shm, "
        "set shm_size instead",
        "shm_size: \"" + suggest + "\"");
  } else if (need.needs && !HasMisspelledShmSize(s) && ipc != "shareable" && !ipc.starts_with("service:") &&
             !ipc.starts_with("container:") && ipc != "host") {
    Add(&r, "missing-shm-size", Severity::kWarning, s.name, s.pos,
        "service " + need.reason + " but sets no shm_size: Docker gives it a 64MiB /dev/shm",
        "shm_size: \"" + suggest + "\"");
  }
  auto build = s.keys.find("build");
  if (build != s.keys.end() && DockerfileRunsTorchTests(s) &&
      !(build->second.value.IsMap() && build->second.value["shm_size"])) {
    Add(&r, "build-shm-size", Severity::kWarning, s.name, At(build->second.file, build->second.key),
        "the build runs PyTorch tests but build.shm_size is not set: RUN steps get a 64MiB /dev/shm",
        "build.shm_size: \"" + suggest + "\"");
  }
  return Status::Ok();
}

void LoadDotEnv(const std::string& dir, std::map<std::string, std::string>* env) {
  if (g_texts) return;
  Result<std::string> text = ReadFile(dir + "/.env", 1 << 20);
  if (!text.ok()) return;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    env->try_emplace(line.substr(0, eq), line.substr(eq + 1));  // the process environment wins
  }
}

Result<Checked> Run(const ComposeCheckOptions& o) {
  Checked c;
  std::vector<std::string> files = o.files;
  if (files.empty()) {
    SHMK_ASSIGN_OR_RETURN(files, DefaultComposeFiles(o.dir));
  }
  ComposeCheckOptions opts = o;
  LoadDotEnv(DirOf(files.front()), &opts.env);
  std::string dir = DirOf(files.front());
  std::string base = dir == "." ? "" : dir.substr(dir.rfind('/') + 1);
  c.report.project = Lower(base.empty() ? "default" : base);
  for (const std::string& f : files) {
    SHMK_ASSIGN_OR_RETURN(LoadedFile lf, LoadComposeFile(f));
    c.report.files.push_back(f);
    if (lf.root["shm_size"] || lf.root["shm-size"]) {
      YAML::Node k = lf.root["shm_size"] ? lf.root["shm_size"] : lf.root["shm-size"];
      Add(&c.report, "misplaced-shm-size", Severity::kError, "", At(f, k),
          "shm_size at the top level of the file has no effect; set it under each service", "");
    }
    if (YAML::Node services = lf.root["services"]; services && services.IsMap()) {
      for (const auto& kv : services) {
        if (!kv.first.IsScalar()) continue;
        Service& s = c.services[kv.first.Scalar()];
        if (s.name.empty()) {
          s.name = kv.first.Scalar();
          s.pos = At(f, kv.first);
        }
        MergeService(&s, kv.second, f, true);
      }
    }
    c.files.push_back(std::move(lf));
  }
  std::map<std::string, Service> resolved = c.services;
  for (auto& [name, s] : resolved) SHMK_RETURN_IF_ERROR(ResolveExtends(&s, c.services, 0));
  c.services = std::move(resolved);
  for (const auto& [name, s] : c.services) SHMK_RETURN_IF_ERROR(CheckService(s, opts, &c));
  std::stable_sort(
      c.report.findings.begin(), c.report.findings.end(), [](const ComposeFinding& a, const ComposeFinding& b) {
        return std::tie(a.pos.file, a.pos.line, a.pos.column) < std::tie(b.pos.file, b.pos.line, b.pos.column);
      });
  return c;
}

// ---- fixing ------------------------------------------------------------------

struct Edit {
  int line;  // 0-based line index the edit applies at
  enum Kind { kReplace, kInsertBefore, kDelete } kind;
  int column = 0;  // kReplace: 0-based start
  int length = 0;  // kReplace: bytes replaced
  std::string text;
  size_t group = 0;  // the finding it fixes: a group is kept or dropped whole
};

// The lines with `edits` applied bottom-up, so earlier line numbers stay valid.
std::string ApplyEdits(std::vector<std::string> lines, std::vector<Edit> edits, const std::string& eol) {
  // Bottom-up, and right to left within a line, so no edit moves another's position.
  std::stable_sort(edits.begin(), edits.end(), [](const Edit& a, const Edit& b) {
    return a.line != b.line ? a.line > b.line : a.column > b.column;
  });
  for (const Edit& e : edits) {
    std::string& l = lines[static_cast<size_t>(e.line)];
    if (e.kind == Edit::kReplace) {
      l.replace(static_cast<size_t>(e.column), static_cast<size_t>(e.length), e.text);
    } else if (e.kind == Edit::kDelete) {
      lines.erase(lines.begin() + e.line);
    } else {
      std::string text = e.text;
      if (e.line > 0 && !lines[static_cast<size_t>(e.line - 1)].ends_with("\n")) text = eol + text;
      lines.insert(lines.begin() + e.line, text);
    }
  }
  std::string out;
  for (const std::string& l : lines) out += l;
  return out;
}

// Whether the reader itself accepts `text`.
bool Parses(const std::string& text) { return ParseComposeText("", text).ok(); }

std::vector<std::string> SplitLines(const std::string& text, bool* crlf) {
  std::vector<std::string> lines;
  size_t start = 0;
  *crlf = text.find("\r\n") != std::string::npos;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) {
      lines.push_back(text.substr(start));
      break;
    }
    lines.push_back(text.substr(start, end - start + 1));  // keeps its own ending
    start = end + 1;
  }
  return lines;
}

// Length of the scalar written at `col` on `line` (quoted or plain, up to a comment).
int ScalarLength(const std::string& line, int col) {
  if (col >= static_cast<int>(line.size())) return 0;
  char q = line[static_cast<size_t>(col)];
  if (q == '"' || q == '\'') {
    size_t close = line.find(q, static_cast<size_t>(col) + 1);
    return close == std::string::npos ? 0 : static_cast<int>(close) - col + 1;
  }
  size_t end = line.find(" #", static_cast<size_t>(col));
  std::string v = line.substr(static_cast<size_t>(col),
                              end == std::string::npos ? std::string::npos : end - static_cast<size_t>(col));
  while (!v.empty() && (v.back() == '\n' || v.back() == '\r' || v.back() == ' ' || v.back() == '\t')) v.pop_back();
  return static_cast<int>(v.size());
}

std::string Quote(const std::string& size) { return "\"" + size + "\""; }

// The last line any node under `n` starts on.
int LastLine(const YAML::Node& n, int depth = 0) {
  int last = n.Mark().is_null() ? -1 : n.Mark().line;
  if (depth > kMaxDepth) return last;
  if (n.IsMap()) {
    for (const auto& kv : n) last = std::max({last, LastLine(kv.first, depth + 1), LastLine(kv.second, depth + 1)});
  } else if (n.IsSequence()) {
    for (const auto& item : n) last = std::max(last, LastLine(item, depth + 1));
  }
  return last;
}

// Whether only blanks or a comment follow column `col` of `line`.
bool RestIsBlank(const std::string& line, size_t col) {
  size_t p = line.find_first_not_of(" \t\r\n", std::min(col, line.size()));
  return p == std::string::npos || line[p] == '#';
}

// The key node named `name` of the block mapping `map`.
YAML::Node KeyNode(const YAML::Node& map, const std::string& name) {
  if (!map || !map.IsMap()) return YAML::Node();
  for (const auto& kv : map) {
    if (kv.first.IsScalar() && kv.first.Scalar() == name) return kv.first;
  }
  return YAML::Node();
}

// The 0-based lines to delete to drop the item of block sequence `seq`
// (under key `key`) that starts at `line`:`col`, and the key line too when it
// is the only item (compose rejects an empty volumes). Empty when the item
// shares a line with anything else.
std::vector<int> ItemLines(const YAML::Node& key, const YAML::Node& seq, int line, int col,
                           const std::vector<std::string>& lines) {
  if (!key || !seq || !seq.IsSequence() || seq.Style() == YAML::EmitterStyle::Flow) return {};
  // Written here, under the key: not an alias of a list other services share.
  if (seq.Mark().line <= key.Mark().line) return {};
  for (const auto& item : seq) {
    if (item.Mark().line != line || item.Mark().column != col) continue;
    const std::string& l = lines[static_cast<size_t>(line)];
    std::string before = l.substr(0, static_cast<size_t>(col));
    size_t dash = before.find_first_not_of(" \t");
    if (dash == std::string::npos || before[dash] != '-' ||
        before.find_first_not_of(" \t", dash + 1) != std::string::npos)
      return {};
    if (item.IsScalar() && !RestIsBlank(l, static_cast<size_t>(col + ScalarLength(l, col)))) return {};
    std::vector<int> out;
    for (int i = line; i <= LastLine(item); ++i) out.push_back(i);
    if (seq.size() == 1) {
      int kl = key.Mark().line, kc = key.Mark().column;
      const std::string& k = lines[static_cast<size_t>(kl)];
      size_t colon = k.find_first_not_of(" \t", static_cast<size_t>(kc) + key.Scalar().size());
      if (kl >= line || colon == std::string::npos || k[colon] != ':' || !RestIsBlank(k, colon + 1)) return {};
      out.push_back(kl);
    }
    return out;
  }
  return {};
}

}  // namespace

std::string SourcePos::ToString() const {
  if (line == 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

bool IsComposeSize(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0) return false;
  if (i < text.size() && text[i] == '.') {
    size_t start = ++i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
    if (i == start) return false;
  }
  std::string unit = Lower(text.substr(i));
  static const std::set<std::string> kUnits = {"", "b", "k", "kb", "m", "mb", "g", "gb"};
  return kUnits.count(unit) > 0;
}

Result<std::string> Interpolate(const std::string& text, const std::map<std::string, std::string>& env) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '$') {
      out += text[i];
      continue;
    }
    if (i + 1 < text.size() && text[i + 1] == '$') {
      out += '$';
      ++i;
      continue;
    }
    std::string name, def;
    bool has_def = false, colon = false;
    if (i + 1 < text.size() && text[i + 1] == '{') {
      size_t close = text.find('}', i + 2);
      if (close == std::string::npos) return Status::Invalid("unterminated ${ in \"" + text + "\"");
      std::string body = text.substr(i + 2, close - i - 2);
      size_t dash = body.find('-');
      if (dash != std::string::npos) {
        colon = dash > 0 && body[dash - 1] == ':';
        name = body.substr(0, colon ? dash - 1 : dash);
        def = body.substr(dash + 1);
        has_def = true;
      } else {
        name = body;
      }
      i = close;
    } else {
      size_t j = i + 1;
      while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_')) ++j;
      name = text.substr(i + 1, j - i - 1);
      i = j - 1;
    }
    if (name.empty()) return Status::Invalid("empty variable name in \"" + text + "\"");
    auto it = env.find(name);
    bool unset = it == env.end(), empty = !unset && it->second.empty();
    if (has_def && (unset || (colon && empty))) {
      out += def;
    } else if (!unset) {
      out += it->second;
    }
  }
  return out;
}

Result<std::vector<std::string>> DefaultComposeFiles(const std::string& dir) {
  for (const char* name : {"compose.yaml", "compose.yml", "docker-compose.yaml", "docker-compose.yml"}) {
    std::string path = dir + "/" + name;
    if (!PathExists(path)) continue;
    std::vector<std::string> files = {path};
    std::string stem = std::string(name).substr(0, std::string(name).rfind('.'));
    for (const char* ext : {".override.yaml", ".override.yml"}) {
      if (PathExists(dir + "/" + stem + ext)) {
        files.push_back(dir + "/" + stem + ext);
        break;
      }
    }
    return files;
  }
  return Status::Invalid("no compose file in " + dir +
                         " (looked for compose.yaml, compose.yml, docker-compose.yaml, docker-compose.yml)");
}

namespace {

// Errors quote user values, which may hold newlines or control bytes: escape
// them so every error stays one line.
Status OneLine(const Status& s) {
  std::string out = EscapeControl(s.message());
  return s.IsUserError() ? Status::Invalid(out) : Status::Internal(out);
}

}  // namespace

Result<ComposeReport> CheckCompose(const ComposeCheckOptions& options) {
  Result<Checked> c = Run(options);
  if (!c.ok()) return OneLine(c.status());
  return c->report;
}

Result<ComposeFix> FixComposeText(const std::string& name, const std::string& text, const std::string& size) {
  std::map<std::string, std::string> texts = {{name, text}};
  g_texts = &texts;
  ComposeCheckOptions o;
  o.files = {name};
  Result<ComposeFix> fix = PlanComposeFix(o, name, size);
  g_texts = nullptr;
  return fix;
}

Json ComposeReportToJson(const ComposeReport& r) {
  static constexpr const char* kSev[] = {"info", "warning", "error"};
  Json findings = Json::array();
  for (const ComposeFinding& f : r.findings) {
    findings.push_back({{"code", f.code},
                        {"severity", kSev[static_cast<int>(f.severity)]},
                        {"service", f.service},
                        {"file", f.pos.file},
                        {"line", f.pos.line},
                        {"column", f.pos.column},
                        {"message", f.message},
                        {"suggestion", f.suggestion}});
  }
  Json sugg = Json::object();
  for (const auto& [svc, v] : r.suggestions) sugg[svc] = {{"shm_size", v.first}, {"reason", v.second}};
  return {{"files", r.files}, {"project", r.project}, {"findings", findings}, {"suggestions", sugg}};
}

Result<ComposeFix> PlanComposeFix(const ComposeCheckOptions& options, const std::string& file,
                                  const std::string& size) {
  if (!size.empty()) {
    if (!IsComposeSize(size) || !ParseSize(size).ok()) {
      return Status::Invalid("--size \"" + size + "\" is not a size docker-compose accepts (like 2gb, 512m)");
    }
  }
  Result<Checked> checked = Run(options);
  if (!checked.ok()) return OneLine(checked.status());
  Checked& c = *checked;
  ComposeFix fix;
  fix.file = file.empty() ? c.report.files.front() : file;
  const LoadedFile* lf = nullptr;
  for (const LoadedFile& f : c.files) {
    if (f.path == fix.file) lf = &f;
  }
  if (!lf) return Status::Invalid(fix.file + " is not one of the compose files read");
  fix.original = lf->text;
  bool crlf = false;
  std::vector<std::string> lines = SplitLines(lf->text, &crlf);
  std::string eol = crlf ? "\r\n" : "\n";
  std::vector<Edit> edits;
  auto size_for = [&](const std::string& svc) {
    if (!size.empty()) return size;
    auto it = c.report.suggestions.find(svc);
    return it != c.report.suggestions.end() ? it->second.first : std::string("2gb");
  };
  auto svc_node = [&](const std::string& svc) -> YAML::Node {
    auto it = c.services.find(svc);
    if (it == c.services.end()) return YAML::Node();
    auto n = it->second.nodes.find(fix.file);
    return n == it->second.nodes.end() ? YAML::Node() : n->second;
  };
  // The line and indentation where a new key goes into a block mapping.
  auto insert_point = [&](const YAML::Node& map, int* line, std::string* indent) {
    if (!map || !map.IsMap() || map.Style() == YAML::EmitterStyle::Flow || map.size() == 0) return false;
    YAML::Mark m = map.begin()->first.Mark();
    if (m.is_null() || m.line >= static_cast<int>(lines.size())) return false;
    *line = m.line;
    *indent = std::string(static_cast<size_t>(m.column), ' ');
    return lines[static_cast<size_t>(m.line)].compare(0, static_cast<size_t>(m.column), *indent) == 0;
  };
  // Renames and moves first: a service that gets its shm_size that way needs no new one.
  std::vector<const ComposeFinding*> ordered;
  for (const ComposeFinding& f : c.report.findings) {
    if (f.code != "missing-shm-size") ordered.push_back(&f);
  }
  for (const ComposeFinding& f : c.report.findings) {
    if (f.code == "missing-shm-size") ordered.push_back(&f);
  }
  std::set<std::string> sized;
  // shm_size for a service that loses its host bind or ipc: host (none when it has one).
  auto add_shm_size = [&](const std::string& svc, size_t group) {
    auto it = c.services.find(svc);
    if (sized.count(svc) || (it != c.services.end() && it->second.keys.count("shm_size"))) return true;
    int at = 0;
    std::string indent;
    if (!insert_point(svc_node(svc), &at, &indent)) return false;
    edits.push_back({at, Edit::kInsertBefore, 0, 0, indent + "shm_size: " + Quote(size_for(svc)) + eol, group});
    sized.insert(svc);
    return true;
  };
  for (const ComposeFinding* fp : ordered) {
    const ComposeFinding& f = *fp;
    if (f.pos.file != fix.file && f.code != "missing-shm-size" && f.code != "ipc-host-for-shm") continue;
    if (f.code == "missing-shm-size" && sized.count(f.service)) continue;
    int li = f.pos.line - 1, col = f.pos.column - 1;
    const std::string* line =
        li >= 0 && li < static_cast<int>(lines.size()) ? &lines[static_cast<size_t>(li)] : nullptr;
    if (f.code == "misspelled-key" && line) {
      // The key's own text: plain up to the ':', or a quoted scalar.
      size_t colon = line->find(':', static_cast<size_t>(col));
      char q = (*line)[static_cast<size_t>(col)];
      int len = q == '"' || q == '\'' ? ScalarLength(*line, col)
                                      : static_cast<int>((colon == std::string::npos ? line->size() : colon)) - col;
      std::string old = line->substr(static_cast<size_t>(col), static_cast<size_t>(len));
      while (!old.empty() && (old.back() == ' ' || old.back() == '\t')) old.pop_back();
      len = static_cast<int>(old.size());
      edits.push_back({li, Edit::kReplace, col, len, old[0] == '"' || old[0] == '\'' ? Quote("shm_size") : "shm_size",
                       fix.changes.size()});
      fix.changes.push_back(f.pos.ToString() + ": renamed " + old + " to shm_size in service '" + f.service + "'");
      sized.insert(f.service);
    } else if ((f.code == "invalid-size" || f.code == "size-too-small") && line) {
      int len = ScalarLength(*line, col);
      if (len == 0) {
        fix.skipped.push_back(f.pos.ToString() + ": " + f.message);
        continue;
      }
      edits.push_back({li, Edit::kReplace, col, len, Quote(size_for(f.service)), fix.changes.size()});
      fix.changes.push_back(f.pos.ToString() + ": shm_size of '" + f.service + "' set to " + size_for(f.service));
    } else if (f.code == "missing-shm-size") {
      int at = 0;
      std::string indent;
      if (!insert_point(svc_node(f.service), &at, &indent)) {
        fix.skipped.push_back(f.pos.ToString() + ": service '" + f.service + "' is not a block mapping in " + fix.file +
                              "; add shm_size by hand");
        continue;
      }
      edits.push_back({at, Edit::kInsertBefore, 0, 0, indent + "shm_size: " + Quote(size_for(f.service)) + eol,
                       fix.changes.size()});
      fix.changes.push_back(fix.file + ":" + std::to_string(at + 1) + ": added shm_size " + size_for(f.service) +
                            " to service '" + f.service + "'");
    } else if (f.code == "host-shm-bind" && line) {
      // Deletes first: an insert on a deleted line's index then lands after it.
      YAML::Node svc = svc_node(f.service);
      std::vector<int> drop = ItemLines(KeyNode(svc, "volumes"), svc ? svc["volumes"] : YAML::Node(), li, col, lines);
      std::vector<Edit> kept = edits;
      for (int d : drop) edits.push_back({d, Edit::kDelete, 0, 0, "", fix.changes.size()});
      if (drop.empty() || !add_shm_size(f.service, fix.changes.size())) {
        edits = std::move(kept);
        fix.skipped.push_back(f.pos.ToString() + ": " + f.message + "; replace it by shm_size by hand");
        continue;
      }
      fix.changes.push_back(f.pos.ToString() + ": removed the host /dev/shm bind of service '" + f.service +
                            "'; its shm_size is " + size_for(f.service));
    } else if (f.code == "ipc-host-for-shm" && line && f.pos.file == fix.file) {
      // In place, so a comment after it stays: "ipc: host  # x" -> "shm_size: \"2gb\"  # x".
      YAML::Node key = KeyNode(svc_node(f.service), "ipc");
      int len = ScalarLength(*line, col);
      if (!key || key.Mark().line != li || len == 0) {
        fix.skipped.push_back(f.pos.ToString() + ": " + f.message);
        continue;
      }
      int kcol = key.Mark().column;
      edits.push_back(
          {li, Edit::kReplace, kcol, col + len - kcol, "shm_size: " + Quote(size_for(f.service)), fix.changes.size()});
      sized.insert(f.service);
      fix.changes.push_back(f.pos.ToString() + ": replaced ipc: host of service '" + f.service + "' by shm_size " +
                            size_for(f.service));
    } else if (f.code == "misplaced-shm-size" && line && !f.service.empty()) {
      YAML::Node svc = svc_node(f.service);
      YAML::Node deploy = svc ? svc["deploy"] : YAML::Node();
      int at = 0;
      std::string indent;
      // Only a one-line scalar under a deploy that keeps other keys can move
      // without touching anything else.
      bool movable = deploy && deploy.IsMap() && deploy.size() >= 2 && deploy["shm_size"] &&
                     deploy["shm_size"].IsScalar() && deploy["shm_size"].Mark().line == li && !svc["shm_size"];
      if (!movable || !insert_point(svc, &at, &indent)) {
        fix.skipped.push_back(f.pos.ToString() + ": " + f.message);
        continue;
      }
      int vcol = deploy["shm_size"].Mark().column;
      std::string value = line->substr(static_cast<size_t>(vcol), static_cast<size_t>(ScalarLength(*line, vcol)));
      edits.push_back({li, Edit::kDelete, 0, 0, "", fix.changes.size()});
      edits.push_back({at, Edit::kInsertBefore, 0, 0, indent + "shm_size: " + value + eol, fix.changes.size()});
      sized.insert(f.service);
      fix.changes.push_back(f.pos.ToString() + ": moved shm_size out of deploy in service '" + f.service + "'");
    } else {
      fix.skipped.push_back(f.pos.ToString() + ": " + f.message);
    }
  }
  // A line edit can meet YAML it cannot see from one line (a plain scalar
  // continued below, say): keep only the fixes whose result still parses.
  fix.fixed = ApplyEdits(lines, edits, eol);
  if (!Parses(fix.fixed)) {
    std::vector<Edit> kept;
    std::vector<std::string> changes;
    for (size_t g = 0; g < fix.changes.size(); ++g) {
      std::vector<Edit> trial = kept;
      for (const Edit& e : edits) {
        if (e.group == g) trial.push_back(e);
      }
      if (Parses(ApplyEdits(lines, trial, eol))) {
        kept = std::move(trial);
        changes.push_back(fix.changes[g]);
      } else {
        fix.skipped.push_back(fix.changes[g] + ": not applied, the result would not parse; fix it by hand");
      }
    }
    fix.changes = std::move(changes);
    fix.fixed = ApplyEdits(lines, kept, eol);
  }
  return fix;
}

}  // namespace shmkeeper
