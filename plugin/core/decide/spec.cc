#include "decide/spec.h"

#include "base/bytes.h"
#include "base/fileutil.h"

namespace shmkeeper {
namespace {

const Json* Find(const Json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::string NormalizeDest(std::string_view d) {
  std::string s(d);
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// The members shmkeeper reads or edits, with the type the OCI runtime spec
// gives them. Checked once at parse time, so no edit meets (and throws on) a
// member of the wrong type; runc would refuse such a spec anyway.
struct Member {
  const char* path;  // dotted, from the top level
  bool array;        // else an object
};
constexpr Member kShape[] = {
    {"mounts", true},
    {"annotations", false},
    {"process", false},
    {"process.env", true},
    {"process.rlimits", true},
    {"root", false},
    {"linux", false},
    {"linux.namespaces", true},
    {"linux.devices", true},
    {"linux.resources", false},
    {"linux.resources.devices", true},
};

const Json* Lookup(const Json& doc, std::string_view dotted) {
  const Json* v = &doc;
  while (v && !dotted.empty()) {
    size_t dot = dotted.find('.');
    v = Find(*v, dotted.substr(0, dot));
    dotted = dot == std::string_view::npos ? std::string_view() : dotted.substr(dot + 1);
  }
  return v;
}

Status CheckShape(const Json& doc) {
  for (const Member& m : kShape) {
    const Json* v = Lookup(doc, m.path);
    if (v && !(m.array ? v->is_array() : v->is_object())) {
      return Status::Invalid(std::string("\"") + m.path + "\" is not " + (m.array ? "an array" : "an object"));
    }
  }
  return Status::Ok();
}

// Whether arrays and objects nest deeper than `max` anywhere in `text` (outside
// strings): checked before parsing, whose recursion such a text would exhaust.
bool NestsDeeperThan(std::string_view text, int max) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

}  // namespace

Result<Spec> Spec::Load(const std::string& bundle) {
  std::string path = bundle + "/config.json";
  Result<std::string> text = ReadFile(path, kMaxSpecBytes);
  Result<Spec> spec = text.ok() ? Parse(*text, path) : Result<Spec>(text.status());
  if (!spec.ok()) return Status::Precondition(spec.status().message() + " (left to the runtime to judge)");
  return spec;
}

Result<Spec> Spec::Parse(std::string_view text, std::string path) {
  if (NestsDeeperThan(text, kMaxSpecDepth)) {
    return Status::Invalid(path + ": nested deeper than " + std::to_string(kMaxSpecDepth) + " levels");
  }
  Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status::Invalid(path + ": not valid JSON");
  if (!doc.is_object()) return Status::Invalid(path + ": not a JSON object");
  if (Status s = CheckShape(doc); !s.ok()) return s.WithContext(path);
  return Spec(std::move(doc), std::move(path));
}

// The bundle lives until the container is deleted, never across a reboot:
// atomicity (runc never reads a half-written spec) matters, the directory's
// durability does not, so the directory fsync is skipped on this hot path.
Status Spec::Save() const { return WriteFileAtomic(path_, DumpJson(doc_), 0644, /*sync_dir=*/false); }

std::optional<std::string> Spec::Annotation(std::string_view key) const {
  const Json* ann = Find(doc_, "annotations");
  const Json* v = ann ? Find(*ann, key) : nullptr;
  if (!v || !v->is_string()) return std::nullopt;
  return v->get<std::string>();
}

std::optional<std::string> Spec::Env(std::string_view name) const {
  const Json* proc = Find(doc_, "process");
  const Json* env = proc ? Find(*proc, "env") : nullptr;
  if (!env || !env->is_array()) return std::nullopt;
  std::optional<std::string> found;
  for (const Json& e : *env) {
    if (!e.is_string()) continue;
    const std::string& s = e.get_ref<const std::string&>();
    if (s.size() > name.size() && s.compare(0, name.size(), name) == 0 && s[name.size()] == '=') {
      found = s.substr(name.size() + 1);
    }
  }
  return found;
}

std::optional<int64_t> Spec::MemoryLimit() const {
  const Json* linux = Find(doc_, "linux");
  const Json* res = linux ? Find(*linux, "resources") : nullptr;
  const Json* mem = res ? Find(*res, "memory") : nullptr;
  const Json* limit = mem ? Find(*mem, "limit") : nullptr;
  if (!limit || !limit->is_number_integer()) return std::nullopt;
  int64_t v = limit->get<int64_t>();
  if (v <= 0) return std::nullopt;
  return v;
}

std::optional<std::string> Spec::Namespace(std::string_view type) const {
  const Json* linux = Find(doc_, "linux");
  const Json* nss = linux ? Find(*linux, "namespaces") : nullptr;
  if (!nss || !nss->is_array()) return std::nullopt;
  for (const Json& ns : *nss) {
    if (StringField(ns, "type") == type) return StringField(ns, "path");
  }
  return std::nullopt;
}

std::optional<size_t> Spec::FindMount(std::string_view destination) const {
  const Json* mounts = Find(doc_, "mounts");
  if (!mounts) return std::nullopt;
  std::string want = NormalizeDest(destination);
  std::optional<size_t> found;
  for (size_t i = 0; i < mounts->size(); ++i) {
    const Json* d = Find((*mounts)[i], "destination");
    if (d && d->is_string() && NormalizeDest(d->get_ref<const std::string&>()) == want) found = i;
  }
  return found;
}

std::optional<int64_t> Spec::MountSizeOption(size_t index) const {
  const Json* opts = Find(Mount(index), "options");
  if (!opts || !opts->is_array()) return std::nullopt;
  for (const Json& o : *opts) {
    if (!o.is_string()) continue;
    const std::string& s = o.get_ref<const std::string&>();
    if (s.starts_with("size=")) {
      Result<int64_t> v = ParseSize(std::string_view(s).substr(5));
      if (v.ok()) return *v;
    }
  }
  return std::nullopt;
}

void Spec::SetMountSizeOption(size_t index, int64_t bytes) {
  Json& mount = doc_["mounts"][index];
  Json& opts = mount["options"];
  if (!opts.is_array()) opts = Json::array();
  std::string value = "size=" + std::to_string(bytes);
  for (Json& o : opts) {
    if (o.is_string() && o.get_ref<const std::string&>().starts_with("size=")) {
      o = value;
      return;
    }
  }
  opts.push_back(value);
}

}  // namespace shmkeeper
