#include "node/discovery.h"

#include <httplib.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <memory>

#include "base/bytes.h"
#include "base/fileutil.h"
#include "base/json.h"
#include "decide/decision_log.h"
#include "decide/plan.h"
#include "decide/spec.h"
#include "scan/proc_table.h"

namespace shmkeeper {
namespace {

std::string BundleFromLabels(const Json& labels) {
  if (!labels.is_array()) return "";
  for (const Json& l : labels) {
    if (l.is_string() && l.get_ref<const std::string&>().starts_with("bundle=")) {
      return l.get<std::string>().substr(7);
    }
  }
  return "";
}

bool IsHexId(const std::string& s) {
  return s.size() == 64 &&
         std::all_of(s.begin(), s.end(), [](char ch) { return std::isxdigit(ch) && !std::isupper(ch); });
}

// Names in one containers-storage containers.json, by container id.
using StorageNames = std::map<std::string, std::string>;

StorageNames ReadStorageNames(const std::string& path) {
  StorageNames out;
  Result<std::string> text = ReadFile(path, 64 << 20);
  if (!text.ok()) return out;
  Json list = Json::parse(*text, nullptr, false);
  if (!list.is_array()) return out;
  for (const Json& e : list) {
    if (!e.is_object() || !e.contains("names") || !e["names"].is_array() || e["names"].empty()) continue;
    if (e["names"][0].is_string()) out[StringField(e, "id")] = e["names"][0].get<std::string>();
  }
  return out;
}

// podman writes no name or pod into the spec: the name is in its storage,
// the pod id in the cgroup path, the pod name in the infra's hostname.
void ReadPodman(Spec& spec, std::map<std::string, StorageNames>* storage, ContainerRecord* c) {
  std::string file = PodmanStorageFile(c->bundle, c->id);
  if (!file.empty()) {
    auto it = storage->find(file);
    if (it == storage->end()) it = storage->emplace(file, ReadStorageNames(file)).first;
    if (auto n = it->second.find(c->id); n != it->second.end()) c->name = n->second;
  }
  const Json& linux = spec.doc().contains("linux") ? spec.doc()["linux"] : Json();
  c->pod_id = PodmanPodId(linux.is_object() ? StringField(linux, "cgroupsPath") : "");
  if (!c->pod_id.empty() && c->owns_shm) c->pod_name = StringField(spec.doc(), "hostname");
}

void ReadBundle(ContainerRecord* c, std::map<std::string, StorageNames>* storage) {
  if (c->bundle.empty()) return;
  Result<Spec> spec = Spec::Load(c->bundle);
  if (!spec.ok()) return;
  const Json& ann = spec->doc().contains("annotations") ? spec->doc()["annotations"] : Json();
  if (ann.is_object()) {
    for (auto it = ann.begin(); it != ann.end(); ++it) {
      if (it.value().is_string()) c->annotations[it.key()] = it.value().get<std::string>();
    }
  }
  if (std::optional<size_t> m = spec->FindMount("/dev/shm")) {
    const Json& mount = spec->Mount(*m);
    std::string type = StringField(mount, "type");
    if (type == "bind" || type.empty()) c->shm_bind_source = StringField(mount, "source");
  }
  c->owns_shm = c->shm_bind_source.empty() || c->shm_bind_source.find("/" + c->id + "/") != std::string::npos;
  auto ctr_name = c->annotations.find("io.kubernetes.cri.container-name");
  if (ctr_name != c->annotations.end()) c->name = ctr_name->second;
  if (auto m = c->annotations.find("io.container.manager"); m != c->annotations.end() && m->second == "libpod") {
    ReadPodman(*spec, storage, c);
  }
  Result<std::optional<ShmRequest>> req = UserShmRequest(*spec);
  if (std::optional<SizingRecord> rec = ReadSizingRecord(c->bundle)) {
    c->sized_by = rec->by;
    c->requested_bytes = RoundUpToPage(rec->bytes);
    c->requested_source = rec->source;
    c->memory_limit_bytes = rec->limit.bytes;
    c->memory_limit_source = rec->limit.source;
  } else if (!c->owns_shm) {
    // Another container's tmpfs (a pod's): its size is that container's decision, not this spec's.
  } else if (req.ok() && req->has_value()) {
    c->requested_bytes = RoundUpToPage((*req)->bytes);
    c->requested_source = (*req)->source;
  } else if (std::optional<size_t> m = spec->FindMount("/dev/shm")) {
    if (std::optional<int64_t> size = spec->MountSizeOption(*m)) {
      c->requested_bytes = RoundUpToPage(*size);
      c->requested_source = "spec";
    }
  }
}

// runc keeps <root>/<id>/state.json; crun keeps <root>/<id>/status.
bool ReadRuntimeState(const std::string& root, const std::string& id, ContainerRecord* c) {
  if (Result<std::string> text = ReadFile(root + "/" + id + "/state.json", 4 << 20); text.ok()) {
    Json st = Json::parse(*text, nullptr, false);
    if (!st.is_object()) return false;
    c->id = StringField(st, "id", id);
    c->pid = IntegerField<int>(st, "init_process_pid", 0);
    c->start_ticks = IntegerField<uint64_t>(st, "init_process_start", 0);
    if (st.contains("config") && st["config"].is_object() && st["config"].contains("labels")) {
      c->bundle = BundleFromLabels(st["config"]["labels"]);
    }
    return true;
  }
  Result<std::string> text = ReadFile(root + "/" + id + "/status", 1 << 20);
  if (!text.ok()) return false;
  Json st = Json::parse(*text, nullptr, false);
  if (!st.is_object()) return false;
  c->id = id;
  c->pid = IntegerField<int>(st, "pid", 0);
  c->start_ticks = IntegerField<uint64_t>(st, "process-start-time", 0);
  c->bundle = StringField(st, "bundle");
  return true;
}

bool ReadState(const std::string& root, const std::string& id, const std::string& proc, ContainerRecord* c) {
  if (!ReadRuntimeState(root, id, c)) return false;
  c->runtime_root = root;
  uint64_t live_start = 0;
  if (c->pid <= 0 || !ReadProcStat(c->pid, nullptr, &live_start, proc)) return false;
  return c->start_ticks == 0 || live_start == c->start_ticks;
}

}  // namespace

std::vector<std::string> DefaultRuntimeRoots() {
  return {"/run/docker/runtime-runc/moby", "/run/containerd/runc/k8s.io", "/run/containerd/runc/default", "/run/runc",
          "/run/crun"};
}

std::string PodmanStorageFile(const std::string& bundle, const std::string& id) {
  std::string tail = "-containers/" + id + "/userdata";
  if (id.empty() || !bundle.ends_with(tail)) return "";
  return bundle.substr(0, bundle.size() - id.size() - std::string("/userdata").size()) + "containers.json";
}

std::string PodmanPodId(const std::string& cgroups_path) {
  size_t at = cgroups_path.find("libpod_pod_");
  if (at != std::string::npos) {  // systemd
    std::string id = cgroups_path.substr(at + 11, 64);
    return IsHexId(id) ? id : "";
  }
  size_t last = cgroups_path.rfind("/libpod-");
  if (last == std::string::npos || last == 0) return "";
  size_t parent = cgroups_path.rfind('/', last - 1);
  std::string id = cgroups_path.substr(parent + 1, last - parent - 1);
  return IsHexId(id) ? id : "";
}

std::vector<ContainerRecord> DiscoverContainers(const std::vector<std::string>& roots, const std::string& proc) {
  ContainerDiscovery once;
  return once.Discover(roots, proc);
}

namespace {

// What identifies one version of a file: a file rewritten in place or
// replaced (runc and the sharing runtime write atomically: a new inode) has
// another stamp; one that does not exist has the empty stamp.
ContainerDiscovery::Stamp StampOf(const std::string& path) {
  struct stat st;
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return {};
  return {st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec,
          st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec};
}

// A pidfd of `pid` if it is still the process that started at
// `start_ticks` (checked after the pidfd is open: it then names that very
// process); invalid when it is not, or pidfds are unavailable.
UniqueFd OpenInit(pid_t pid, uint64_t start_ticks, const std::string& proc) {
  if (pid <= 0 || start_ticks == 0) return UniqueFd();
  UniqueFd fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  uint64_t live_start = 0;
  if (!fd.valid() || !ReadProcStat(pid, nullptr, &live_start, proc) || live_start != start_ticks) return UniqueFd();
  return fd;
}

// Whether the process of a pidfd has exited (POLLIN: it has; an error counts as exited).
bool Exited(const UniqueFd& pidfd) {
  struct pollfd p = {pidfd.get(), POLLIN, 0};
  int n = ::poll(&p, 1, 0);
  return n != 0;
}

}  // namespace

std::vector<ContainerRecord> ContainerDiscovery::Discover(const std::vector<std::string>& roots,
                                                          const std::string& proc) {
  std::vector<ContainerRecord> out;
  std::map<std::string, StorageNames> storage;  // each podman storage file read once per discovery
  std::map<std::string, Entry> seen;
  for (const std::string& root : roots) {
    for (const std::string& id : ListDir(root)) {
      std::string dir = root + "/" + id;
      Stamp state = StampOf(dir + "/state.json");
      if (state == Stamp{}) state = StampOf(dir + "/status");
      auto cached = cache_.find(dir);
      if (cached != cache_.end() && cached->second.state == state && state != Stamp{}) {
        // The runtime's state is the one parsed before: the same container,
        // if its init process is still the one it started.
        Entry& e = cached->second;
        const ContainerRecord& c = e.record;
        if (e.init.valid()) {
          if (Exited(e.init)) continue;
        } else {
          uint64_t live_start = 0;
          if (c.pid <= 0 || !ReadProcStat(c.pid, nullptr, &live_start, proc)) continue;
          if (c.start_ticks != 0 && live_start != c.start_ticks) continue;
        }
        if (e.config == StampOf(c.bundle.empty() ? "" : c.bundle + "/config.json") &&
            e.sizing == StampOf(c.bundle.empty() ? "" : c.bundle + "/" + kSizingRecordFile) &&
            e.storage == StampOf(PodmanStorageFile(c.bundle, c.id))) {
          out.push_back(c);
          seen.emplace(dir, std::move(e));
          continue;
        }
      }
      ContainerRecord c;
      if (!ReadState(root, id, proc, &c)) continue;
      Entry e;
      e.state = state;
      // Stamped before they are read: a change while reading is seen next time.
      e.config = StampOf(c.bundle.empty() ? "" : c.bundle + "/config.json");
      e.sizing = StampOf(c.bundle.empty() ? "" : c.bundle + "/" + kSizingRecordFile);
      e.storage = StampOf(PodmanStorageFile(c.bundle, c.id));
      ReadBundle(&c, &storage);
      e.init = OpenInit(c.pid, c.start_ticks, proc);
      e.record = c;
      seen.emplace(dir, std::move(e));
      out.push_back(std::move(c));
    }
  }
  cache_ = std::move(seen);  // containers that are gone are forgotten
  return out;
}

namespace {

// runc's <id>/state.json or crun's <id>/status (ReadRuntimeState reads both).
bool HoldsState(const std::string& dir, const std::string& id) {
  return PathExists(dir + "/" + id + "/state.json") || PathExists(dir + "/" + id + "/status");
}

// The subdirectories of `root` that hold container state themselves.
std::vector<std::string> NamespaceDirs(const std::string& root, const std::vector<std::string>& entries) {
  std::vector<std::string> out;
  for (const std::string& ns : entries) {
    for (const std::string& id : ListDir(root + "/" + ns)) {
      if (HoldsState(root + "/" + ns, id)) {
        out.push_back(ns);
        break;
      }
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> RuntimeRootWarnings(const std::vector<std::string>& roots) {
  std::vector<std::string> out;
  for (const std::string& root : roots) {
    std::vector<std::string> entries = ListDir(root);
    if (entries.empty()) continue;
    bool known = false;
    for (const std::string& id : entries) known = known || HoldsState(root, id);
    if (known) continue;
    std::vector<std::string> nss = NamespaceDirs(root, entries);
    if (!nss.empty()) {
      std::string list;
      for (const std::string& ns : nss) list += (list.empty() ? "" : ", ") + root + "/" + ns;
      out.push_back("runtime root " + root +
                    " holds namespace directories, not containers: no pod under it is found; "
                    "list the namespace directories in agent.runtimeRoots instead (" +
                    list + ")");
    } else {
      std::string seen;
      for (size_t i = 0; i < entries.size() && i < 5; ++i) seen += (i ? ", " : "") + entries[i];
      out.push_back(
          "runtime root " + root +
          " holds no container state (runc's <id>/state.json or crun's <id>/status) the agent knows (it has: " + seen +
          "): no pod under it is found; point agent.runtimeRoots at the OCI runtime's state directory (its "
          "--root, e.g. /run/containerd/runc/k8s.io or /run/crun)");
    }
  }
  return out;
}

Status EnrichFromDocker(const std::string& socket, std::vector<ContainerRecord>* containers,
                        std::set<std::string>* listed) {
  httplib::Client cli(socket);
  cli.set_address_family(AF_UNIX);
  cli.set_default_headers({{"Host", "docker"}});  // the socket path is not a valid Host
  cli.set_connection_timeout(1, 0);
  cli.set_read_timeout(2, 0);
  httplib::Result res = cli.Get("/containers/json?all=1");
  if (!res) return Status::NotFound("docker API on " + socket + ": " + httplib::to_string(res.error()));
  if (res->status != 200) return Status::Internal("docker API: HTTP " + std::to_string(res->status));
  Json list = Json::parse(res->body, nullptr, false);
  if (!list.is_array()) return Status::Internal("docker API: /containers/json is not a list");
  std::map<std::string, const Json*> by_id;
  for (const Json& c : list) {
    if (c.is_object() && c.contains("Id") && c["Id"].is_string()) by_id[c["Id"].get<std::string>()] = &c;
  }
  for (ContainerRecord& c : *containers) {
    auto it = by_id.find(c.id);
    if (it == by_id.end()) continue;
    if (listed) listed->insert(c.id);
    const Json& d = *it->second;
    if (d.contains("Names") && d["Names"].is_array() && !d["Names"].empty() && d["Names"][0].is_string()) {
      std::string n = d["Names"][0].get<std::string>();
      c.name = n.starts_with("/") ? n.substr(1) : n;
    }
    if (d.contains("Labels") && d["Labels"].is_object()) {
      for (auto l = d["Labels"].begin(); l != d["Labels"].end(); ++l) {
        if (l.value().is_string()) c.labels[l.key()] = l.value().get<std::string>();
      }
    }
  }
  return Status::Ok();
}

}  // namespace shmkeeper
