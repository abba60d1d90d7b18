#include "decide/cuda_ipc.h"

#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cstdio>
#include <map>
#include <optional>
#include <sstream>

#include "base/fileutil.h"

namespace shmkeeper {
namespace {

bool IsTrue(const std::optional<std::string>& v) { return v && (*v == "true" || *v == "1" || *v == "yes"); }

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
  if (!IsTrue(spec->Annotation(kCudaIpcAnnotation)) && !IsTrue(spec->Env(kCudaIpcEnv))) return {false, "", ""};
  std::vector<DeviceNode> nodes = FindNvidiaNodes(config);
  if (nodes.empty()) {
    notes->push_back("CUDA IPC asked for, but this host has no NVIDIA device nodes; nothing added");
    return {false, "cuda-ipc: no devices", ""};
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
  return {true, "cuda-ipc", ""};
}

}  // namespace shmkeeper
