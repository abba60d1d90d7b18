// The node policy: one typed schema, loaded from /etc/shmkeeper/config.yaml.
//
// Every key, its meaning and its default is documented here and in
// deploy/config/config.yaml. Unknown keys and bad values are errors that name
// the file, line, column and key.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace shmkeeper {

inline constexpr const char* kDefaultConfigPath = "/etc/shmkeeper/config.yaml";
inline constexpr const char* kConfigEnv = "SHMKEEPER_CONFIG";

enum class OverMax { kReject, kClamp };
enum class OnInternalError { kPassthrough, kFail };
enum class LogLevel { kDebug, kInfo, kWarn, kError };
// leaks.reclaim; the order is that of the names in config.cc.
enum class LeakReclaim { kReport, kAuto, kOff };
enum class CudaIpc { kOff, kAllocated };

struct Config {
  struct Shm {
    // shm.default: size for containers that ask for nothing. nullopt = "auto":
    // the container's memory limit when it has one, else 50% of host RAM.
    std::optional<int64_t> default_bytes;
    // shm.max: the largest size any container may get. nullopt = host RAM.
    std::optional<int64_t> max_bytes;
    // shm.overMax: what a request above shm.max gets.
    OverMax over_max = OverMax::kReject;
  } shm;
  // onInternalError: on a shmkeeper failure that is not the user's fault,
  // hand the spec to the real runtime untouched (and log why), or fail.
  OnInternalError on_internal_error = OnInternalError::kPassthrough;
  struct Runtime {
    // runtime.path: the low-level runtime to exec. "" = runc from PATH, then crun.
    std::string path;
  } runtime;
  struct Log {
    std::string path = "/var/log/shmkeeper/runtime.log";  // log.path; "" = no file log
    LogLevel level = LogLevel::kInfo;                     // log.level
    // log.maxSize: once the file is larger, the writer that notices renames
    // it to <path>.1 (older ones shift up). 0 = never rotate.
    int64_t max_bytes = 10 << 20;
    // log.maxFiles: rotated files kept (<path>.1 .. <path>.N), 1..9.
    int max_files = 3;
  } log;
  struct Agent {
    // agent.socket: the gRPC unix socket (mode 0660, root).
    std::string socket = "/run/shmkeeper/agent.sock";
    // agent.scanInterval: time between scans ("10s", "500ms", "1m"). With
    // the fanotify observer a periodic scan re-reads the pods' directories and
    // asks the observer; it does not walk /proc.
    std::chrono::milliseconds scan_interval{10000};
    // agent.observer: how holders are learnt. fanotify (default): kernel
    // events and lease probes, falling back to scan when fanotify is
    // unavailable; scan: walk /proc on every scan (forced).
    bool observe = true;
    // agent.auditInterval: with the observer, how often a scan walks /proc
    // anyway and counts where the two disagree (docs/agent.md).
    std::chrono::milliseconds audit_interval{600000};
    // agent.metricsAddress: HTTP /metrics, /healthz, /readyz ("" = off).
    // Loopback by default: exposing /metrics (which names every pod) to the
    // network, and to every container that reaches the host, is a choice.
    std::string metrics_address = "127.0.0.1:9731";
    // agent.runtimeRoots: runc/crun state directories to discover containers
    // in. Empty = Docker's, containerd's and CRI-O's defaults.
    std::vector<std::string> runtime_roots;
    // agent.dockerSocket: Docker Engine API for names and compose labels ("" = off).
    std::string docker_socket = "/var/run/docker.sock";
    // agent.hostShmDirs: host tmpfs directories to watch as pods of kind host.
    std::vector<std::string> host_shm_dirs;
    // agent.eventSocket: the datagram socket the hook's poststop and the
    // sharing runtime's creator records go to ("" = off).
    std::string event_socket = "/run/shmkeeper/events/events.sock";
    // agent.stateDir: where the agent keeps its lock (one agent per node:
    // shmkeeperd.lock, flock) and its identity (agent-id, in its quarantine
    // names). Every agent of a node must use the same one.
    std::string state_dir = "/run/shmkeeper";
    // agent.criSocket: the CRI runtime socket (containerd or CRI-O) the agent
    // lists pod sandboxes on, "unix:///run/containerd/containerd.sock";
    // "auto" = containerd's or CRI-O's default socket, whichever exists; "" = off.
    std::string cri_socket;
    // agent.reconcile: agent-only mode. Resize each pod sandbox's /dev/shm to
    // its annotation (or the policy) from the CRI's view, for nodes whose
    // runtime config cannot be changed. Needs criSocket.
    bool reconcile = false;
    // agent.nri.*: the agent as an NRI plugin of the runtime (containerd
    // 1.7 with NRI enabled, 2.x by default): it sizes each pod's /dev/shm
    // when the runtime creates a container, before the container starts.
    struct Nri {
      std::string socket;        // agent.nri.socket: the runtime's NRI socket ("" = off)
      std::string index = "10";  // agent.nri.index: the plugin's two-digit NRI index (call order)
    } nri;
    struct Tcp {
      std::string address;         // agent.tcp.address: "" = no TCP listener
      std::string cert_file;       // agent.tcp.certFile (PEM), required with address
      std::string key_file;        // agent.tcp.keyFile (PEM)
      std::string client_ca_file;  // agent.tcp.clientCAFile: set = mTLS
      bool insecure = false;       // agent.tcp.insecure: plaintext TCP, only when asked
    } tcp;
    // agent.metrics.*: the limits and the protection of the HTTP listener at
    // metricsAddress (docs/monitoring.md, "Exposure").
    struct Metrics {
      int max_connections = 64;                        // agent.metrics.maxConnections: open connections, all clients
      int max_connections_per_client = 8;              // agent.metrics.maxConnectionsPerClient: per source address
      std::chrono::milliseconds header_timeout{5000};  // agent.metrics.headerTimeout: a request head's time
      std::chrono::milliseconds idle_timeout{5000};    // agent.metrics.idleTimeout: keep-alive between requests
      std::chrono::milliseconds write_timeout{30000};  // agent.metrics.writeTimeout: a response's time
      std::string cert_file, key_file;                 // agent.metrics.certFile, keyFile (PEM): serve HTTPS
      std::string client_ca_file;                      // agent.metrics.clientCAFile: require client certificates
      std::string bearer_token_file;  // agent.metrics.bearerTokenFile: /metrics needs this bearer token
    } metrics;
    // agent.maxWatchStreams: concurrent Watch streams; more get RESOURCE_EXHAUSTED.
    int max_watch_streams = 64;
    // agent.maxFilesPerPod: the most entries (files, directories) of one
    // pod's /dev/shm the agent lists and judges, 1..100000. A tmpfs with more
    // is reported (files over limit) and all its files are kept, so that one
    // pod never sets the agent's memory and CPU (docs/agent.md).
    int max_files_per_pod = 10000;
  } agent;
  struct Inject {
    // inject.preload: bind-mount libshmkeeper-preload.so into containers whose
    // image has glibc's loader and add it to LD_PRELOAD (opt out per container:
    // annotation shmkeeper.io/inject: "false" or env SHMKEEPER_INJECT=0).
    bool preload = true;
    // inject.library: the library on the host. "" = next to shmkeeper-runtime,
    // or ../lib/shmkeeper/ from it.
    std::string library;
  } inject;
  struct Preload {
    // preload.reserve: the preload reserves (fallocate) the whole size a file
    // on /dev/shm is grown to at ftruncate time, charged to the container's
    // memory at once, so every page it was given is backed. Off: a growth that
    // cannot fit the tmpfs's free space is ENOSPC, any other is the plain call
    // (no page allocated). Per container: annotation
    // shmkeeper.io/preload-reserve, env SHMKEEPER_PRELOAD_RESERVE.
    bool reserve = false;
  } preload;
  struct Cuda {
    // cuda.ipc: "off" (default): no container gets CUDA IPC device access.
    // "allocated": a container that holds NVIDIA GPUs in its spec (linux.devices
    // /dev/nvidiaN, put there by the engine, the device plugin or CDI) and
    // asks with the annotation shmkeeper.io/cuda-ipc: "true" gets the control
    // and UVM nodes and RLIMIT_MEMLOCK, never another GPU (decide/cuda_ipc.h).
    // The container's env never enables it.
    CudaIpc ipc = CudaIpc::kOff;
    // cuda.devDir and cuda.procDevices: where the NVIDIA device nodes and the
    // kernel's device list are read (other values only for tests).
    std::string dev_dir = "/dev";
    std::string proc_devices = "/proc/devices";
  } cuda;
  struct Leaks {
    // leaks.grace: how long a segment must stay unheld before reclaim.
    std::chrono::seconds grace{60};
    // leaks.reclaim: "report" (default: listed; removed only by a request,
    // `shmkeeper reclaim --yes`), "auto" (also removed at each scan; a pod
    // may opt out) or "off" (never removed, not even on request). No pod
    // annotation raises it.
    LeakReclaim reclaim = LeakReclaim::kReport;
  } leaks;
  // Where this config came from: a file path, or "" for built-in defaults.
  std::string source;
};

// The config path in force: `flag` when not empty, else $SHMKEEPER_CONFIG when
// set, else kDefaultConfigPath.
std::string ResolveConfigPath(std::string_view flag);

// Parses YAML text; `name` is used in error messages ("name:line:col: ...").
// An empty document yields the defaults.
Result<Config> ParseConfig(std::string_view yaml, const std::string& name);

// Loads `path`. A missing file yields the defaults unless `must_exist`.
Result<Config> LoadConfig(const std::string& path, bool must_exist);

// The effective config as JSON, for logs and `shmkeeper config show`.
nlohmann::json ConfigToJson(const Config& config);

const char* LogLevelName(LogLevel level);
// "report", "auto" or "off", as leaks.reclaim spells it.
const char* LeakReclaimName(LeakReclaim mode);

// Parses "250ms", "10s", "5m", "1h" (a positive integer and one unit).
Result<std::chrono::milliseconds> ParseDuration(std::string_view text);

}  // namespace shmkeeper
