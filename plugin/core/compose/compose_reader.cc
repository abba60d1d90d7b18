#include "compose/compose_reader.h"

#include <unistd.h>

#include <cctype>
#include <set>
#include <sstream>

#include "base/fileutil.h"

namespace shmkeeper {
namespace compose {

constexpr size_t kMaxNodes = 200000;
constexpr int kMaxExtends = 10;

SourcePos At(const std::string& file, const YAML::Node& n) {
  YAML::Mark m = n.Mark();
  if (m.is_null()) return {file, 0, 0};
  return {file, m.line + 1, m.column + 1};
}

Status BadAt(const SourcePos& p, const std::string& why) { return Status::Invalid(p.ToString() + ": " + why); }

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string DirOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string Join(const std::string& dir, const std::string& rel) {
  return !rel.empty() && rel[0] == '/' ? rel : dir + "/" + rel;
}

namespace {

// A compose v1 file: a mapping of mappings, none of its keys one of the
// compose specification's top-level keys.
bool IsComposeV1(const YAML::Node& root) {
  static const std::set<std::string> kTopLevel = {"version", "services", "volumes", "networks",
                                                  "secrets", "configs",  "name",    "include"};
  if (!root.IsMap() || root.size() == 0) return false;
  for (const auto& kv : root) {
    if (!kv.first.IsScalar() || kTopLevel.count(kv.first.Scalar()) || kv.first.Scalar().starts_with("x-") ||
        !kv.second.IsMap())
      return false;
  }
  return true;
}

}  // namespace

YAML::Node ServicesNode(const YAML::Node& root) {
  if (IsComposeV1(root)) return root;
  return root.IsMap() ? root["services"] : YAML::Node();
}

ComposeFileReader ReaderOf(const ComposeCheckOptions& options) {
  return options.read_file ? options.read_file : ComposeFileReader(ReadComposeFileFromDisk);
}

namespace {

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

// A reader's status for a file over the limit (see ComposeFileReader).
bool IsTooLarge(const Status& s) { return s.code() == Code::kInvalidArgument && s.err() == 0; }

Result<LoadedFile> LoadComposeFile(const std::string& path, const ComposeFileReader& read) {
  Result<std::string> text = read(path, kMaxFileBytes);
  if (!text.ok()) {
    if (IsTooLarge(text.status())) {
      return Status::Invalid(path + ": larger than " + std::to_string(kMaxFileBytes >> 20) + " MiB");
    }
    return Status::Invalid(path + ": " + text.status().message());
  }
  return ParseComposeText(path, std::move(*text));
}

void MergeKeys(Service* s, const YAML::Node& node, const std::string& file, bool override_existing, int depth) {
  if (!node.IsMap() || depth > 8) return;
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) continue;
    const std::string& k = kv.first.Scalar();
    if (k == "<<") continue;
    // compose v2: `key: !reset ...` removes the key, `key: !override ...`
    // replaces it whole; the earlier files' values of it no longer count.
    const std::string& tag = kv.second.Tag();
    if (override_existing && (tag == "!reset" || tag == "!override")) {
      for (const auto& [f, n] : s->nodes) {
        if (f != file) s->dropped[k].insert(f);
      }
    }
    // Never YAML::Node::operator= onto a held node: that rebinds the node
    // itself, so the earlier file's tree would show the later file's value.
    if (override_existing) s->keys.erase(k);
    if (tag == "!reset") continue;
    s->keys.try_emplace(k, Entry{kv.first, kv.second, file});
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
  s->nodes.erase(file);
  s->nodes.emplace(file, node);
  MergeKeys(s, node, file, override_existing, 0);
}

// The services of one file, each merged on its own (for `extends: {file: ...}`).
std::map<std::string, Service> ServicesOf(const LoadedFile& lf) {
  std::map<std::string, Service> out;
  if (YAML::Node services = ServicesNode(lf.root); services && services.IsMap()) {
    for (const auto& kv : services) {
      if (!kv.first.IsScalar()) continue;
      Service& b = out[kv.first.Scalar()];
      b.name = kv.first.Scalar();
      MergeService(&b, kv.second, lf.path, true);
    }
  }
  return out;
}

// Where an `extends` points: a service name and the file it is in ("": the same files).
struct ExtendsTarget {
  std::string name, file;
};

Result<ExtendsTarget> TargetOf(const Entry& e) {
  ExtendsTarget t;
  if (e.value.IsScalar()) {
    t.name = e.value.Scalar();
  } else if (e.value.IsMap() && e.value["service"] && e.value["service"].IsScalar()) {
    t.name = e.value["service"].Scalar();
    if (e.value["file"] && e.value["file"].IsScalar()) t.file = Join(DirOf(e.file), e.value["file"].Scalar());
  } else {
    return BadAt(At(e.file, e.value), "extends must name a service");
  }
  return t;
}

// Folds `extends` chains into `s` (base keys only where the service has none).
// `all` holds the services of the file(s) a plain `extends: name` refers to.
// `p` holds the files read so far (an `extends` file is read once, and kept
// in p->extended so that a fix can edit it).
Status ResolveExtends(Service* s, const std::map<std::string, Service>& all, const ComposeFileReader& read,
                      ComposeProject* p, int depth) {
  auto ext = s->keys.find("extends");
  if (ext == s->keys.end()) return Status::Ok();
  const Entry e = ext->second;
  if (depth > kMaxExtends) return BadAt(At(e.file, e.key), "extends chain too long (a cycle?)");
  SHMK_ASSIGN_OR_RETURN(ExtendsTarget target, TargetOf(e));
  std::map<std::string, Service> other;  // the services of target.file
  if (!target.file.empty()) {
    const LoadedFile* known = nullptr;
    for (const std::vector<LoadedFile>* list : {&p->files, &p->extended}) {
      for (const LoadedFile& lf : *list) {
        if (lf.path == target.file) known = &lf;
      }
    }
    if (!known) {
      if (p->extended.size() >= 64) return BadAt(At(e.file, e.value), "extends: too many files");
      Result<LoadedFile> loaded = LoadComposeFile(target.file, read);
      if (!loaded.ok()) return BadAt(At(e.file, e.value), "extends: " + loaded.status().message());
      p->extended.push_back(std::move(*loaded));
      known = &p->extended.back();
    }
    other = ServicesOf(*known);
  }
  const std::map<std::string, Service>& scope = target.file.empty() ? all : other;
  auto it = scope.find(target.name);
  if (it == scope.end()) {
    return BadAt(At(e.file, e.value),
                 "extends: no service '" + target.name + "'" + (target.file.empty() ? "" : " in " + target.file));
  }
  Service base = it->second;
  SHMK_RETURN_IF_ERROR(ResolveExtends(&base, scope, read, p, depth + 1));
  s->keys.erase("extends");
  for (auto& [k, v] : base.keys) s->keys.try_emplace(k, v);
  for (const auto& [file, node] : base.nodes) s->inherited.emplace_back(file, node);
  for (const auto& fn : base.inherited) s->inherited.push_back(fn);
  return Status::Ok();
}

// Adds the KEY=value lines of `dir`/.env to `env` (the process environment wins).
void LoadDotEnv(const std::string& dir, const ComposeFileReader& read, std::map<std::string, std::string>* env) {
  Result<std::string> text = read(dir + "/.env", 1 << 20);
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

// The project directory's name: the first file's directory, made absolute
// (os.path.abspath in compose v1, filepath.Abs in v2; no symlinks resolved).
std::string DirName(const std::string& first_file) {
  std::string dir = DirOf(first_file);
  if (!dir.starts_with("/")) {
    char cwd[4096];
    if (::getcwd(cwd, sizeof(cwd)) == nullptr) return "";
    dir = std::string(cwd) + "/" + dir;
  }
  // Lexically clean the path, as abspath does.
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(dir);
  while (std::getline(in, part, '/')) {
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else {
      parts.push_back(part);
    }
  }
  return parts.empty() ? "" : parts.back();
}

}  // namespace

std::string NormalizeProjectName(const std::string& name) {
  // v1: re.sub(r'[^-_a-z0-9]', '', name.lower()); v2 also trims leading '-' and '_'.
  std::string out;
  for (char c : Lower(name)) {
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_') out += c;
  }
  size_t b = out.find_first_not_of("-_");
  return b == std::string::npos ? "" : out.substr(b);
}

namespace {

// The project name as compose computes it: -p, then COMPOSE_PROJECT_NAME
// (environment, then .env), then the last top-level name: (compose v2; v1
// ignores it), then the project directory's name; "default" when all are empty.
void SetProjectName(const ComposeCheckOptions& o, const std::string& first_file, ComposeProject* p) {
  std::string dir_name = NormalizeProjectName(DirName(first_file));
  p->dir_name = dir_name.empty() ? "default" : dir_name;
  std::string top;
  for (const LoadedFile& lf : p->files) {
    if (YAML::Node n = lf.root["name"]; n && n.IsScalar()) {
      Result<std::string> v = Interpolate(n.Scalar(), p->env);
      top = v.ok() ? *v : n.Scalar();
    }
  }
  auto env = p->env.find("COMPOSE_PROJECT_NAME");
  for (const std::string& candidate :
       {o.project_name, env == p->env.end() ? std::string() : env->second, top, dir_name}) {
    std::string n = NormalizeProjectName(candidate);
    if (!n.empty()) {
      p->name = n;
      return;
    }
  }
  p->name = "default";
}

// Merges the services of `lf` into `p` (later files override earlier ones).
void AddServices(const LoadedFile& lf, ComposeProject* p) {
  YAML::Node services = ServicesNode(lf.root);
  if (!services || !services.IsMap()) return;
  for (const auto& kv : services) {
    if (!kv.first.IsScalar()) continue;
    Service& s = p->services[kv.first.Scalar()];
    if (s.name.empty()) {
      s.name = kv.first.Scalar();
      s.pos = At(lf.path, kv.first);
    }
    MergeService(&s, kv.second, lf.path, true);
  }
}

}  // namespace

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
  YAML::Node services = ServicesNode(f.root);
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

namespace {

constexpr int kMaxIncludeDepth = 8;
constexpr size_t kMaxFiles = 64;

// The paths a file's compose v2 `include:` names (a path, or {path: one or
// a list}), relative to the file's directory.
Result<std::vector<std::string>> IncludesOf(const LoadedFile& lf) {
  std::vector<std::string> out;
  YAML::Node inc = lf.root["include"];
  if (!inc) return out;
  if (!inc.IsSequence()) return BadAt(At(lf.path, inc), "include must be a list");
  for (const auto& item : inc) {
    YAML::Node path = item.IsMap() ? item["path"] : item;
    if (path && path.IsScalar()) {
      out.push_back(Join(DirOf(lf.path), path.Scalar()));
    } else if (path && path.IsSequence()) {
      for (const auto& p : path) {
        if (p.IsScalar()) out.push_back(Join(DirOf(lf.path), p.Scalar()));
      }
    } else {
      return BadAt(At(lf.path, item), "include: each entry must name a path");
    }
  }
  return out;
}

// Reads `path` and, first, the files it includes (depth-first, each once).
Status LoadWithIncludes(const std::string& path, const ComposeFileReader& read, ComposeProject* p, int depth) {
  SHMK_ASSIGN_OR_RETURN(LoadedFile lf, LoadComposeFile(path, read));
  SHMK_ASSIGN_OR_RETURN(std::vector<std::string> includes, IncludesOf(lf));
  for (const std::string& inc : includes) {
    bool known = false;
    for (const LoadedFile& f : p->files) known = known || f.path == inc;
    if (known || inc == path) continue;
    if (depth >= kMaxIncludeDepth || p->files.size() >= kMaxFiles)
      return BadAt(At(lf.path, lf.root["include"]), "include: too many or too deeply nested files (a cycle?)");
    Status s = LoadWithIncludes(inc, read, p, depth + 1);
    if (!s.ok()) return BadAt(At(lf.path, lf.root["include"]), "include: " + s.message());
  }
  AddServices(lf, p);
  p->files.push_back(std::move(lf));
  return Status::Ok();
}

}  // namespace

Result<ComposeProject> ReadComposeProject(const ComposeCheckOptions& o) {
  ComposeProject p;
  std::vector<std::string> files = o.files;
  if (files.empty()) {
    SHMK_ASSIGN_OR_RETURN(files, DefaultComposeFiles(o.dir));
  }
  ComposeFileReader read = ReaderOf(o);
  p.env = o.env;
  if (o.read_side_files) LoadDotEnv(DirOf(files.front()), read, &p.env);
  for (const std::string& f : files) SHMK_RETURN_IF_ERROR(LoadWithIncludes(f, read, &p, 0));
  SetProjectName(o, files.front(), &p);
  std::map<std::string, Service> resolved = p.services;
  p.extended.reserve(64);  // pointers into it stay valid while extends files are added
  for (auto& [name, s] : resolved) SHMK_RETURN_IF_ERROR(ResolveExtends(&s, p.services, read, &p, 0));
  p.services = std::move(resolved);
  return p;
}

}  // namespace compose

Result<std::string> ReadComposeFileFromDisk(const std::string& path, size_t max_bytes) {
  return ReadFile(path, max_bytes);
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

}  // namespace shmkeeper
