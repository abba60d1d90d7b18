#include "decide/cuda_ipc.h"

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

constexpr const char* kDocs = " (docs/sharing-runtime.md#cuda-ipc-device-access)";

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

// "/dev/nvidiaN": a GPU's device node.
bool IsGpuPath(const std::string& path) {
  constexpr std::string_view kPrefix = "/dev/nvidia";
  if (!path.starts_with(kPrefix) || path.size() == kPrefix.size()) return false;
  return path.find_first_not_of("0123456789", kPrefix.size()) == std::string::npos;
}

struct DeviceNode {
  std::string container_path;
  unsigned major, minor;
  mode_t mode;
};

// The nodes CUDA IPC needs besides the GPUs themselves, the host's control
// and UVM nodes, each only if it is a character device whose major
// /proc/devices lists under an nvidia* name. Never a GPU (/dev/nvidiaN) and
// never /dev/nvidia-caps/* (MIG capabilities grant access to GPU instances).
std::vector<DeviceNode> FindControlNodes(const Config& config) {
  std::map<unsigned, std::string> majors = NvidiaMajors(config.cuda.proc_devices);
  std::vector<DeviceNode> out;
  for (const char* n : {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}) {
    std::string host = config.cuda.dev_dir + "/" + n;
    struct stat st;
    if (::lstat(host.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) continue;  // symlinks and files are not devices
    if (!majors.count(::major(st.st_rdev))) continue;  // the kernel does not list that major as NVIDIA's
    out.push_back(
        {std::string("/dev/") + n, ::major(st.st_rdev), ::minor(st.st_rdev), static_cast<mode_t>(st.st_mode & 07777)});
  }
  return out;
}

// The GPUs the spec already holds (linux.devices /dev/nvidiaN, char devices),
// as the engine, the device plugin or CDI put them there.
std::vector<std::string> SpecGpus(const Spec& spec) {
  std::vector<std::string> out;
  auto linux_ = spec.doc().find("linux");
  if (linux_ == spec.doc().end() || !linux_->is_object()) return out;
  auto devices = linux_->find("devices");
  if (devices == linux_->end() || !devices->is_array()) return out;
  for (const Json& d : *devices) {
    std::string path = StringField(d, "path");
    if (IsGpuPath(path) && StringField(d, "type") == "c") out.push_back(path);
  }
  return out;
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ",") + s;
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

std::vector<std::string> Paths(const std::vector<DeviceNode>& nodes) {
  std::vector<std::string> out;
  for (const DeviceNode& d : nodes) out.push_back(d.container_path);
  return out;
}

// The decision, the spec untouched: what to add (empty: nothing) and why.
struct CudaIpcPlan {
  std::string what;  // the decision log's "cuda"; "" when nothing was asked
  std::vector<DeviceNode> add;
  std::vector<std::string> gpus;
};

CudaIpcPlan PlanCudaIpc(const Spec& spec, const Config& config, std::vector<std::string>* notes) {
  bool asked = IsTrue(spec.Annotation(kCudaIpcAnnotation));
  if (!asked) {
    // The env is the image's or the user's: it never gives a container devices.
    if (!spec.Env(kCudaIpcEnv)) return {};
    notes->push_back(std::string(kCudaIpcEnv) + " in the container's env is ignored: CUDA IPC access is asked for " +
                     "only by the annotation " + kCudaIpcAnnotation + " on a node with cuda.ipc: allocated" + kDocs);
    return {"cuda-ipc: env ignored", {}, {}};
  }
  if (config.cuda.ipc == CudaIpc::kOff) {
    notes->push_back(std::string("the annotation ") + kCudaIpcAnnotation +
                     " asks for CUDA IPC, but this node's policy is cuda.ipc: off; nothing added" + kDocs);
    return {"cuda-ipc: off on this node", {}, {}};
  }
  std::vector<std::string> gpus = SpecGpus(spec);
  if (gpus.empty()) {
    notes->push_back(
        "CUDA IPC asked for, but the container holds no NVIDIA GPU (no /dev/nvidiaN in the spec's linux.devices: "
        "give it one with --gpus, the device plugin or CDI); nothing added");
    return {"cuda-ipc: no GPU in the spec", {}, {}};
  }
  std::vector<DeviceNode> nodes = FindControlNodes(config);
  if (nodes.empty()) {
    notes->push_back("CUDA IPC asked for, but this host has no NVIDIA control or UVM device nodes; nothing added");
    return {"cuda-ipc: no devices", {}, gpus};
  }
  return {"cuda-ipc", std::move(nodes), std::move(gpus)};
}

void NotePidNamespace(const Spec& spec, std::vector<std::string>* notes) {
  std::optional<std::string> pid_ns = spec.Namespace("pid");
  if (pid_ns && pid_ns->empty()) {
    notes->push_back(
        "this container has its own PID namespace: legacy CUDA IPC (cudaIpcOpenMemHandle) works only between "
        "processes that share one (pods: shareProcessNamespace: true; Docker: --pid=container:<peer> and --ipc)");
  }
}

}  // namespace

InjectResult InjectCudaIpc(Spec* spec, const Config& config, std::vector<std::string>* notes) {
  CudaIpcPlan plan = PlanCudaIpc(*spec, config, notes);
  if (plan.add.empty()) return {false, plan.what, ""};
  for (const DeviceNode& d : plan.add) AddDevice(spec, d);
  uint64_t memlock = MemlockLimit(notes);
  SetMemlock(spec, memlock);
  notes->insert(notes->begin(), "CUDA IPC for the container's GPUs " + Join(plan.gpus) + ": added " +
                                    Join(Paths(plan.add)) + " and RLIMIT_MEMLOCK " +
                                    (memlock == UINT64_MAX ? std::string("unlimited") : std::to_string(memlock)));
  NotePidNamespace(*spec, notes);
  return {true, plan.what, ""};
}

InjectResult ExplainCudaIpc(const Spec& spec, const Config& config, std::vector<std::string>* notes) {
  CudaIpcPlan plan = PlanCudaIpc(spec, config, notes);
  if (plan.add.empty()) return {false, plan.what, ""};
  notes->push_back(
      "CUDA IPC is allowed for this container, but an OCI hook runs after the runtime has read the "
      "spec: only shmkeeper-runtime can add " +
      Join(Paths(plan.add)) + " and RLIMIT_MEMLOCK");
  return {false, "cuda-ipc: not applied by the hook", ""};
}

}  // namespace shmkeeper
