#include "nri_inject.h"

#include <map>

#include "base/json.h"
#include "decide/cuda_ipc.h"
#include "decide/inject.h"

namespace shmkeeper::agent {
namespace api = ::nri::pkg::api::v1alpha1;
namespace {

// The array at doc[a][b] (doc[a] when b is empty), or an empty one.
const Json& ArrayAt(const Json& doc, const char* a, const char* b = nullptr) {
  static const Json kEmpty = Json::array();
  auto x = doc.find(a);
  if (x == doc.end() || (!x->is_object() && b)) return kEmpty;
  if (!b) return x->is_array() ? *x : kEmpty;
  auto y = x->find(b);
  return y != x->end() && y->is_array() ? *y : kEmpty;
}

// NAME -> value of an OCI env list (the last entry wins, as in execve's env).
std::map<std::string, std::string> EnvMap(const Json& env) {
  std::map<std::string, std::string> out;
  for (const Json& e : env) {
    if (!e.is_string()) continue;
    const std::string& s = e.get_ref<const std::string&>();
    size_t eq = s.find('=');
    if (eq != std::string::npos) out[s.substr(0, eq)] = s.substr(eq + 1);
  }
  return out;
}

std::map<std::string, const Json*> ByField(const Json& list, const char* field) {
  std::map<std::string, const Json*> out;
  for (const Json& e : list) out[StringField(e, field)] = &e;
  return out;
}

uint64_t U64(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}

int64_t I64(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

void AddMounts(const Json& before, const Json& after, api::ContainerAdjustment* adj) {
  std::map<std::string, const Json*> old = ByField(ArrayAt(before, "mounts"), "destination");
  for (const Json& m : ArrayAt(after, "mounts")) {
    auto it = old.find(StringField(m, "destination"));
    if (it != old.end() && *it->second == m) continue;
    api::Mount* out = adj->add_mounts();
    out->set_destination(StringField(m, "destination"));
    out->set_type(StringField(m, "type"));
    out->set_source(StringField(m, "source"));
    for (const Json& o : ArrayAt(m, "options")) {
      if (o.is_string()) out->add_options(o.get<std::string>());
    }
  }
}

void AddEnv(const Json& before, const Json& after, api::ContainerAdjustment* adj) {
  std::map<std::string, std::string> old = EnvMap(ArrayAt(before, "process", "env"));
  for (const auto& [k, v] : EnvMap(ArrayAt(after, "process", "env"))) {
    auto it = old.find(k);
    if (it != old.end() && it->second == v) continue;
    api::KeyValue* kv = adj->add_env();
    kv->set_key(k);
    kv->set_value(v);
  }
}

void AddDevices(const Json& before, const Json& after, api::ContainerAdjustment* adj) {
  std::map<std::string, const Json*> old = ByField(ArrayAt(before, "linux", "devices"), "path");
  for (const Json& d : ArrayAt(after, "linux", "devices")) {
    if (old.count(StringField(d, "path"))) continue;
    api::LinuxDevice* out = adj->mutable_linux()->add_devices();
    out->set_path(StringField(d, "path"));
    out->set_type(StringField(d, "type"));
    out->set_major(I64(d, "major"));
    out->set_minor(I64(d, "minor"));
    if (d.contains("fileMode")) out->mutable_file_mode()->set_value(static_cast<uint32_t>(U64(d, "fileMode")));
    if (d.contains("uid")) out->mutable_uid()->set_value(static_cast<uint32_t>(U64(d, "uid")));
    if (d.contains("gid")) out->mutable_gid()->set_value(static_cast<uint32_t>(U64(d, "gid")));
  }
}

void AddRlimits(const Json& before, const Json& after, api::ContainerAdjustment* adj) {
  std::map<std::string, const Json*> old = ByField(ArrayAt(before, "process", "rlimits"), "type");
  for (const Json& r : ArrayAt(after, "process", "rlimits")) {
    auto it = old.find(StringField(r, "type"));
    if (it != old.end() && *it->second == r) continue;
    api::POSIXRlimit* out = adj->add_rlimits();
    out->set_type(StringField(r, "type"));
    out->set_hard(U64(r, "hard"));
    out->set_soft(U64(r, "soft"));
  }
}

}  // namespace

Result<Spec> NriContainerSpec(const api::PodSandbox& pod, const api::Container& container, const std::string& rootfs) {
  Json doc = Json::object();
  Json ann = Json::object();
  for (const auto& [k, v] : container.annotations()) ann[k] = v;
  for (const auto& [k, v] : pod.annotations()) {
    if (!ann.contains(k)) ann[k] = v;
  }
  doc["annotations"] = std::move(ann);
  doc["root"] = {{"path", rootfs}};
  Json env = Json::array();
  for (const std::string& e : container.env()) env.push_back(e);
  Json rlimits = Json::array();
  for (const api::POSIXRlimit& r : container.rlimits()) {
    rlimits.push_back({{"type", r.type()}, {"hard", r.hard()}, {"soft", r.soft()}});
  }
  doc["process"] = {{"env", std::move(env)}, {"rlimits", std::move(rlimits)}};
  Json mounts = Json::array();
  for (const api::Mount& m : container.mounts()) {
    Json jm = {{"destination", m.destination()}, {"type", m.type()}, {"source", m.source()}};
    jm["options"] = Json::array();
    for (const std::string& o : m.options()) jm["options"].push_back(o);
    mounts.push_back(std::move(jm));
  }
  doc["mounts"] = std::move(mounts);
  Json devices = Json::array(), namespaces = Json::array();
  if (container.has_linux()) {
    for (const api::LinuxDevice& d : container.linux().devices()) {
      devices.push_back({{"path", d.path()}, {"type", d.type()}, {"major", d.major()}, {"minor", d.minor()}});
    }
    for (const api::LinuxNamespace& ns : container.linux().namespaces()) {
      namespaces.push_back({{"type", ns.type()}, {"path", ns.path()}});
    }
  }
  doc["linux"] = {{"devices", std::move(devices)}, {"namespaces", std::move(namespaces)}};
  return Spec::Parse(DumpJson(doc), "NRI CreateContainer " + container.id());
}

std::string PreloadOutcome(const std::string& preload) {
  if (preload.starts_with("preload")) return "injected";
  if (preload.starts_with("skip: " + std::string(kNoImage))) return "undecided";
  return "skipped";
}

api::ContainerAdjustment AdjustmentOf(const Spec& before, const Spec& after) {
  api::ContainerAdjustment adj;
  AddMounts(before.doc(), after.doc(), &adj);
  AddEnv(before.doc(), after.doc(), &adj);
  AddDevices(before.doc(), after.doc(), &adj);
  AddRlimits(before.doc(), after.doc(), &adj);
  return adj;
}

NriInjection InjectIntoSpec(Spec* spec, const Config& config, const std::string& no_rootfs,
                            const std::string& runtime_dir) {
  NriInjection out;
  // Without the image the same checks run first, so that an opt-out is still
  // the reason logged; the first that needs the image names why there is none.
  InjectResult r = InjectPreload(spec, "", config, runtime_dir, MountPoints::kCheck);
  out.preload = !no_rootfs.empty() && r.what == "skip: the spec has no root.path" ? "skip: " + no_rootfs : r.what;
  if (!r.reserve.empty()) out.notes.push_back("preload reserve: " + r.reserve);
  out.cuda = InjectCudaIpc(spec, config, &out.notes).what;
  return out;
}

NriInjection InjectForNri(const api::PodSandbox& pod, const api::Container& container, const Config& config,
                          const std::string& rootfs, const std::string& no_rootfs, const std::string& runtime_dir) {
  Result<Spec> before = NriContainerSpec(pod, container, rootfs);
  if (!before.ok()) {
    NriInjection out;
    out.preload = "skip: " + before.status().message();
    return out;
  }
  Spec spec = *before;
  NriInjection out = InjectIntoSpec(&spec, config, rootfs.empty() ? no_rootfs : "", runtime_dir);
  // root.path is the agent's view of the image, not the container's: never adjusted.
  out.adjust = AdjustmentOf(*before, spec);
  return out;
}

}  // namespace shmkeeper::agent
