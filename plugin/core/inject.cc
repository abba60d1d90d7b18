#include "shmkeeper/inject.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <climits>
#include <map>
#include <sstream>

#include "shmkeeper/fileutil.h"
#include "shmkeeper/safe_path.h"

namespace shmkeeper {
namespace {

bool IsFalse(const std::optional<std::string>& v) { return v && (*v == "false" || *v == "0" || *v == "no"); }
bool IsTrue(const std::optional<std::string>& v) { return v && (*v == "true" || *v == "1" || *v == "yes"); }

InjectResult Skip(std::string why) { return {false, "skip: " + std::move(why)}; }

// The library to mount: inject.library if set, else next to the runtime or in
// its ../lib/shmkeeper; "" if that file is not there.
std::string LibraryPath(const Config& config, const std::string& runtime_dir) {
  std::vector<std::string> candidates = {config.inject.library};
  if (config.inject.library.empty()) {
    candidates = {runtime_dir + "/libshmkeeper-preload.so", runtime_dir + "/../lib/shmkeeper/libshmkeeper-preload.so"};
  }
  for (const std::string& p : candidates) {
    if (PathExists(p)) return p;
  }
  return "";
}

// glibc's dynamic loader, looked up inside the image only.
bool HasGlibcLoader(int root_fd) {
  for (const char* loader : {"lib64/ld-linux-x86-64.so.2", "lib/ld-linux-aarch64.so.1"}) {
    if (OpenInRoot(root_fd, loader, O_PATH).ok()) return true;
  }
  return false;
}

// Each existing component of the mount point's parent must be a real
// directory: a symlink there (aimed anywhere) refuses the injection.
Status CheckMountParents(int root_fd, const std::string& dir) {
  std::string prefix;
  std::istringstream parts(dir);
  for (std::string part; std::getline(parts, part, '/');) {
    if (part.empty()) continue;
    prefix += (prefix.empty() ? "" : "/") + part;
    Result<UniqueFd> fd = OpenNoSymlinks(root_fd, prefix, O_PATH | O_DIRECTORY);
    if (fd.ok()) continue;
    if (fd.status().err() == ENOENT) return Status::Ok();  // runc creates the rest
    return Status::Invalid("/" + prefix + " in the image is not a plain directory (" + fd.status().message() + ")");
  }
  return Status::Ok();
}

Json BindMount(const std::string& dest, const std::string& source, bool noexec) {
  Json opts = Json::array({"bind", "ro", "nosuid", "nodev"});
  if (noexec) opts.push_back("noexec");
  return {{"destination", dest}, {"type", "bind"}, {"source", source}, {"options", opts}};
}

void AppendEnvList(Spec* spec, const std::string& name, const std::string& value) {
  Json& env = spec->doc()["process"]["env"];
  if (!env.is_array()) env = Json::array();
  for (Json& e : env) {
    if (e.is_string() && e.get_ref<const std::string&>().starts_with(name + "=")) {
      std::string cur = e.get<std::string>().substr(name.size() + 1);
      e = name + "=" + (cur.empty() ? value : cur + ":" + value);
      return;
    }
  }
  env.push_back(name + "=" + value);
}

}  // namespace

InjectResult InjectPreload(Spec* spec, const std::string& bundle, const Config& config,
                           const std::string& runtime_dir) {
  if (!config.inject.preload) return Skip("inject.preload is off");
  if (IsFalse(spec->Annotation(kInjectAnnotation))) return Skip("annotation shmkeeper.io/inject is false");
  if (IsFalse(spec->Env(kInjectEnv))) return Skip("SHMKEEPER_INJECT=0");
  std::string library = LibraryPath(config, runtime_dir);
  if (library.empty()) return Skip("libshmkeeper-preload.so not found on the host");
  const Json& root = spec->doc()["root"];
  std::string root_path = StringField(root, "path");
  if (root_path.empty()) return Skip("the spec has no root.path");
  if (root_path[0] != '/') root_path = bundle + "/" + root_path;
  UniqueFd root_fd(::open(root_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd.valid()) return Skip("cannot open the rootfs " + root_path);
  if (!HasGlibcLoader(root_fd.get())) return Skip("the image has no glibc dynamic loader (static or musl)");
  if (Status s = CheckMountParents(root_fd.get(), "run/shmkeeper/events"); !s.ok()) {
    return Skip("refused: " + s.message());
  }
  Json& mounts = spec->doc()["mounts"];
  if (!mounts.is_array()) mounts = Json::array();
  mounts.push_back(BindMount(kPreloadMountPoint, library, /*noexec=*/false));
  std::string events = config.agent.event_socket;
  size_t slash = events.rfind('/');
  std::string events_dir = slash == std::string::npos ? "" : events.substr(0, slash);
  struct stat st;
  if (!events_dir.empty() && ::stat(events_dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    mounts.push_back(BindMount(kEventsMountPoint, events_dir, /*noexec=*/true));
    spec->doc()["process"]["env"].push_back(std::string("SHMKEEPER_EVENT_SOCKET=") + kEventsMountPoint +
                                            events.substr(slash));
  }
  AppendEnvList(spec, "LD_PRELOAD", kPreloadMountPoint);
  return {true, "preload"};
}

namespace {

// Character-device majors the kernel lists under names starting with "nvidia".
std::map<unsigned, std::string> NvidiaMajors(const std::string& proc_devices) {
  std::map<unsigned, std::string> out;
  Result<std::string> text = ReadFile(proc_devices, 1 << 20);
  if (!text.ok()) return out;
  std::istringstream in(*text);
  bool chars = false;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("Character devices")) chars = true;
    if (line.starts_with("Block devices")) chars = false;
    unsigned major = 0;
    char name[128] = {0};
    if (chars && std::sscanf(line.c_str(), " %u %127s", &major, name) == 2 && std::string(name).starts_with("nvidia")) {
      out[major] = name;
    }
  }
  return out;
}

bool IsNvidiaNode(const std::string& name) {
  if (name == "nvidiactl" || name == "nvidia-uvm" || name == "nvidia-uvm-tools") return true;
  if (!name.starts_with("nvidia") || name.size() == 6) return false;
  return name.find_first_not_of("0123456789", 6) == std::string::npos;
}

std::vector<std::string> ListNames(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') out.emplace_back(e->d_name);
  }
  ::closedir(d);
  return out;
}

struct DeviceNode {
  std::string container_path;
  unsigned major, minor;
  mode_t mode;
};

std::vector<DeviceNode> FindNvidiaNodes(const Config& config) {
  std::map<unsigned, std::string> majors = NvidiaMajors(config.cuda.proc_devices);
  std::vector<std::pair<std::string, std::string>> candidates;  // host path, container path
  for (const std::string& n : ListNames(config.cuda.dev_dir)) {
    if (IsNvidiaNode(n)) candidates.push_back({config.cuda.dev_dir + "/" + n, "/dev/" + n});
  }
  for (const std::string& n : ListNames(config.cuda.dev_dir + "/nvidia-caps")) {
    candidates.push_back({config.cuda.dev_dir + "/nvidia-caps/" + n, "/dev/nvidia-caps/" + n});
  }
  std::vector<DeviceNode> out;
  for (const auto& [host, inside] : candidates) {
    struct stat st;
    if (::lstat(host.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) continue;  // symlinks and files are not devices
    if (!majors.count(::major(st.st_rdev))) continue;  // the kernel does not list that major as NVIDIA's
    out.push_back({inside, ::major(st.st_rdev), ::minor(st.st_rdev), static_cast<mode_t>(st.st_mode & 07777)});
  }
  return out;
}

void AddDevice(Spec* spec, const DeviceNode& d) {
  Json& linux_ = spec->doc()["linux"];
  Json& devices = linux_["devices"];
  if (!devices.is_array()) devices = Json::array();
  for (const Json& e : devices) {
    if (StringField(e, "path") == d.container_path) return;
  }
  devices.push_back({{"path", d.container_path},
                     {"type", "c"},
                     {"major", d.major},
                     {"minor", d.minor},
                     {"fileMode", d.mode},
                     {"uid", 0},
                     {"gid", 0}});
  Json& allow = linux_["resources"]["devices"];
  if (!allow.is_array()) allow = Json::array();
  allow.push_back({{"allow", true}, {"type", "c"}, {"major", d.major}, {"minor", d.minor}, {"access", "rwm"}});
}

// RLIMIT_MEMLOCK unlimited, or the highest this node allows: raising the hard
// limit needs CAP_SYS_RESOURCE, which a confined runtime may lack (runc would
// then fail the container).
uint64_t MemlockLimit(std::vector<std::string>* notes) {
  struct rlimit cur;
  if (::getrlimit(RLIMIT_MEMLOCK, &cur) != 0) return UINT64_MAX;
  struct rlimit want = {RLIM_INFINITY, RLIM_INFINITY};
  if (cur.rlim_max == RLIM_INFINITY || ::setrlimit(RLIMIT_MEMLOCK, &want) == 0) return UINT64_MAX;
  notes->push_back("RLIMIT_MEMLOCK raised only to the node's hard limit of " + std::to_string(cur.rlim_max) +
                   " bytes (unlimited needs CAP_SYS_RESOURCE)");
  return cur.rlim_max;
}

void SetMemlock(Spec* spec, uint64_t limit) {
  Json& rl = spec->doc()["process"]["rlimits"];
  if (!rl.is_array()) rl = Json::array();
  Json kept = Json::array();
  for (const Json& r : rl) {
    if (StringField(r, "type") != "RLIMIT_MEMLOCK") kept.push_back(r);
  }
  rl = std::move(kept);
  rl.push_back({{"type", "RLIMIT_MEMLOCK"}, {"hard", limit}, {"soft", limit}});
}

}  // namespace

InjectResult InjectCudaIpc(Spec* spec, const Config& config, std::vector<std::string>* notes) {
  if (!IsTrue(spec->Annotation(kCudaIpcAnnotation)) && !IsTrue(spec->Env(kCudaIpcEnv))) return {false, ""};
  std::vector<DeviceNode> nodes = FindNvidiaNodes(config);
  if (nodes.empty()) {
    notes->push_back("CUDA IPC asked for, but this host has no NVIDIA device nodes; nothing added");
    return {false, "cuda-ipc: no devices"};
  }
  std::string names;
  for (const DeviceNode& d : nodes) {
    AddDevice(spec, d);
    names += (names.empty() ? "" : ",") + d.container_path;
  }
  uint64_t memlock = MemlockLimit(notes);
  SetMemlock(spec, memlock);
  notes->insert(notes->begin(), "CUDA IPC: added " + names + " and RLIMIT_MEMLOCK " +
                                    (memlock == UINT64_MAX ? std::string("unlimited") : std::to_string(memlock)));
  std::optional<std::string> pid_ns = spec->Namespace("pid");
  if (pid_ns && pid_ns->empty()) {
    notes->push_back(
        "this container has its own PID namespace: legacy CUDA IPC (cudaIpcOpenMemHandle) works only between "
        "processes that share one (pods: shareProcessNamespace: true; Docker: --pid=container:<peer> and --ipc)");
  }
  return {true, "cuda-ipc"};
}

}  // namespace shmkeeper
