#include "decide/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>

#include "base/bytes.h"
#include "base/fileutil.h"

namespace shmkeeper {
namespace {

using Setter = Status (*)(const YAML::Node&, Config*);

Result<std::string> Scalar(const YAML::Node& node) {
  if (!node.IsScalar()) return Status::Invalid("expected a scalar value");
  return node.Scalar();
}

Result<std::optional<int64_t>> SizeOrAuto(const YAML::Node& node) {
  if (node.IsNull()) return std::optional<int64_t>();
  SHMK_ASSIGN_OR_RETURN(std::string text, Scalar(node));
  if (text == "auto") return std::optional<int64_t>();
  SHMK_ASSIGN_OR_RETURN(int64_t bytes, ParseSize(text));
  return std::optional<int64_t>(bytes);
}

// Parses one of `names` (index = enum value).
template <typename Enum, size_t N>
Status ParseEnum(const YAML::Node& node, const std::array<const char*, N>& names, Enum* out) {
  SHMK_ASSIGN_OR_RETURN(std::string text, Scalar(node));
  std::string allowed;
  for (size_t i = 0; i < N; ++i) {
    if (text == names[i]) {
      *out = static_cast<Enum>(i);
      return Status::Ok();
    }
    allowed += (i ? ", " : "") + std::string(names[i]);
  }
  return Status::Invalid("\"" + text + "\" is not one of " + allowed);
}

constexpr std::array<const char*, 2> kOverMaxNames = {"reject", "clamp"};
constexpr std::array<const char*, 2> kOnErrorNames = {"passthrough", "fail"};
constexpr std::array<const char*, 4> kLevelNames = {"debug", "info", "warn", "error"};
constexpr std::array<const char*, 3> kReclaimNames = {"report", "auto", "off"};
constexpr std::array<const char*, 2> kCudaIpcNames = {"off", "allocated"};

Status SetString(const YAML::Node& n, std::string* out) {
  if (n.IsNull()) return Status::Ok();
  SHMK_ASSIGN_OR_RETURN(*out, Scalar(n));
  return Status::Ok();
}

Status SetPathList(const YAML::Node& n, std::vector<std::string>* out) {
  if (n.IsNull()) return Status::Ok();
  if (!n.IsSequence()) return Status::Invalid("expected a list of absolute paths");
  out->clear();
  for (const YAML::Node& item : n) {
    SHMK_ASSIGN_OR_RETURN(std::string p, Scalar(item));
    if (p.empty() || p[0] != '/') return Status::Invalid("\"" + p + "\" is not an absolute path");
    out->push_back(p);
  }
  return Status::Ok();
}

Status SetBool(const YAML::Node& n, bool* out) {
  SHMK_ASSIGN_OR_RETURN(std::string text, Scalar(n));
  if (text == "true")
    *out = true;
  else if (text == "false")
    *out = false;
  else
    return Status::Invalid("\"" + text + "\" is not true or false");
  return Status::Ok();
}

Status SetCount(const YAML::Node& n, int max, int* out) {
  SHMK_ASSIGN_OR_RETURN(std::string text, Scalar(n));
  int v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 1 || v > max) {
    return Status::Invalid("\"" + text + "\" is not a whole number from 1 to " + std::to_string(max));
  }
  *out = v;
  return Status::Ok();
}

Status SetDuration(const YAML::Node& n, std::chrono::milliseconds* out) {
  SHMK_ASSIGN_OR_RETURN(std::string text, Scalar(n));
  SHMK_ASSIGN_OR_RETURN(*out, ParseDuration(text));
  return Status::Ok();
}

// How ConfigToJson (shmkeeperd --check-config, the agent's start and reload
// lines) shows a key's value.
using Shower = nlohmann::json (*)(const Config&);

nlohmann::json SizeOr(const std::optional<int64_t>& v, const char* unset) {
  if (!v) return unset;
  return *v;
}

struct Field {
  std::string_view key;
  Setter set;
  // nullptr: not shown (a key and certificate path shows only as the flag
  // of its pair's other key).
  Shower show;
  // Shown under this dotted key instead of `key` (a derived flag, such as
  // agent.tcp.mtls for agent.tcp.clientCAFile).
  std::string_view shown_as = {};
};

// The schema: every accepted key, how it is stored and how it is shown; the
// one place a key is spelled (the agent's proto shows a summary of a few
// of them as v1.Policy).
const Field kFields[] = {
    {"shm.default",
     [](const YAML::Node& n, Config* c) -> Status {
       SHMK_ASSIGN_OR_RETURN(c->shm.default_bytes, SizeOrAuto(n));
       return Status::Ok();
     },
     [](const Config& c) -> nlohmann::json { return SizeOr(c.shm.default_bytes, "auto"); }},
    {"shm.max",
     [](const YAML::Node& n, Config* c) -> Status {
       SHMK_ASSIGN_OR_RETURN(c->shm.max_bytes, SizeOrAuto(n));
       return Status::Ok();
     },
     [](const Config& c) -> nlohmann::json { return SizeOr(c.shm.max_bytes, "host RAM"); }},
    {"shm.overMax", [](const YAML::Node& n, Config* c) { return ParseEnum(n, kOverMaxNames, &c->shm.over_max); },
     [](const Config& c) -> nlohmann::json { return kOverMaxNames[static_cast<size_t>(c.shm.over_max)]; }},
    {"onInternalError",
     [](const YAML::Node& n, Config* c) { return ParseEnum(n, kOnErrorNames, &c->on_internal_error); },
     [](const Config& c) -> nlohmann::json { return kOnErrorNames[static_cast<size_t>(c.on_internal_error)]; }},
    {"runtime.path",
     [](const YAML::Node& n, Config* c) -> Status {
       if (n.IsNull()) return Status::Ok();
       SHMK_ASSIGN_OR_RETURN(c->runtime.path, Scalar(n));
       if (!c->runtime.path.empty() && c->runtime.path[0] != '/') {
         return Status::Invalid("must be an absolute path");
       }
       return Status::Ok();
     },
     [](const Config& c) -> nlohmann::json {
       return c.runtime.path.empty() ? "runc or crun from PATH" : c.runtime.path;
     }},
    {"log.path",
     [](const YAML::Node& n, Config* c) -> Status {
       if (n.IsNull()) return Status::Ok();
       SHMK_ASSIGN_OR_RETURN(c->log.path, Scalar(n));
       return Status::Ok();
     },
     [](const Config& c) -> nlohmann::json { return c.log.path; }},
    {"log.level", [](const YAML::Node& n, Config* c) { return ParseEnum(n, kLevelNames, &c->log.level); },
     [](const Config& c) -> nlohmann::json { return LogLevelName(c.log.level); }},
    {"log.maxSize",
     [](const YAML::Node& n, Config* c) -> Status {
       SHMK_ASSIGN_OR_RETURN(std::string text, Scalar(n));
       if (text == "0") {
         c->log.max_bytes = 0;
         return Status::Ok();
       }
       SHMK_ASSIGN_OR_RETURN(c->log.max_bytes, ParseSize(text));
       return Status::Ok();
     },
     [](const Config& c) -> nlohmann::json { return c.log.max_bytes; }},
    {"log.maxFiles",
     [](const YAML::Node& n, Config* c) -> Status {
       SHMK_ASSIGN_OR_RETURN(std::string text, Scalar(n));
       if (text.size() != 1 || text[0] < '1' || text[0] > '9') {
         return Status::Invalid("\"" + text + "\" is not a number from 1 to 9");
       }
       c->log.max_files = text[0] - '0';
       return Status::Ok();
     },
     [](const Config& c) -> nlohmann::json { return c.log.max_files; }},
    {"agent.socket", [](const YAML::Node& n, Config* c) { return SetString(n, &c->agent.socket); },
     [](const Config& c) -> nlohmann::json { return c.agent.socket; }},
    {"agent.scanInterval",
     [](const YAML::Node& n, Config* c) -> Status {
       SHMK_ASSIGN_OR_RETURN(std::string text, Scalar(n));
       SHMK_ASSIGN_OR_RETURN(c->agent.scan_interval, ParseDuration(text));
       return Status::Ok();
     },
     [](const Config& c) -> nlohmann::json { return std::to_string(c.agent.scan_interval.count()) + "ms"; }},
    {"agent.observer",
     [](const YAML::Node& n, Config* c) -> Status {
       SHMK_ASSIGN_OR_RETURN(std::string text, Scalar(n));
       if (text != "fanotify" && text != "scan") return Status::Invalid("must be fanotify or scan");
       c->agent.observe = text == "fanotify";
       return Status::Ok();
     },
     [](const Config& c) -> nlohmann::json { return c.agent.observe ? "fanotify" : "scan"; }},
    {"agent.auditInterval",
     [](const YAML::Node& n, Config* c) -> Status {
       SHMK_ASSIGN_OR_RETURN(std::string text, Scalar(n));
       SHMK_ASSIGN_OR_RETURN(c->agent.audit_interval, ParseDuration(text));
       if (c->agent.audit_interval.count() <= 0) return Status::Invalid("must be positive");
       return Status::Ok();
     },
     [](const Config& c) -> nlohmann::json { return std::to_string(c.agent.audit_interval.count()) + "ms"; }},
    {"agent.metricsAddress", [](const YAML::Node& n, Config* c) { return SetString(n, &c->agent.metrics_address); },
     [](const Config& c) -> nlohmann::json { return c.agent.metrics_address; }},
    {"agent.runtimeRoots", [](const YAML::Node& n, Config* c) { return SetPathList(n, &c->agent.runtime_roots); },
     [](const Config& c) -> nlohmann::json { return c.agent.runtime_roots; }},
    {"agent.dockerSocket", [](const YAML::Node& n, Config* c) { return SetString(n, &c->agent.docker_socket); },
     [](const Config& c) -> nlohmann::json { return c.agent.docker_socket; }},
    {"agent.hostShmDirs", [](const YAML::Node& n, Config* c) { return SetPathList(n, &c->agent.host_shm_dirs); },
     [](const Config& c) -> nlohmann::json { return c.agent.host_shm_dirs; }},
    {"agent.eventSocket", [](const YAML::Node& n, Config* c) { return SetString(n, &c->agent.event_socket); },
     [](const Config& c) -> nlohmann::json { return c.agent.event_socket; }},
    {"agent.criSocket", [](const YAML::Node& n, Config* c) { return SetString(n, &c->agent.cri_socket); },
     [](const Config& c) -> nlohmann::json { return c.agent.cri_socket; }},
    {"agent.stateDir", [](const YAML::Node& n, Config* c) { return SetString(n, &c->agent.state_dir); },
     [](const Config& c) -> nlohmann::json { return c.agent.state_dir; }},
    {"agent.reconcile", [](const YAML::Node& n, Config* c) { return SetBool(n, &c->agent.reconcile); },
     [](const Config& c) -> nlohmann::json { return c.agent.reconcile; }},
    {"agent.nri.socket", [](const YAML::Node& n, Config* c) { return SetString(n, &c->agent.nri.socket); },
     [](const Config& c) -> nlohmann::json { return c.agent.nri.socket; }},
    {"agent.nri.index",
     [](const YAML::Node& n, Config* c) -> Status {
       SHMK_RETURN_IF_ERROR(SetString(n, &c->agent.nri.index));
       const std::string& i = c->agent.nri.index;
       if (i.size() != 2 || !std::isdigit(static_cast<unsigned char>(i[0])) ||
           !std::isdigit(static_cast<unsigned char>(i[1]))) {
         return Status::Invalid("agent.nri.index must be two digits (\"00\" to \"99\"), got \"" + i + "\"");
       }
       return Status::Ok();
     },
     [](const Config& c) -> nlohmann::json { return c.agent.nri.index; }},
    {"agent.tcp.address", [](const YAML::Node& n, Config* c) { return SetString(n, &c->agent.tcp.address); },
     [](const Config& c) -> nlohmann::json { return c.agent.tcp.address; }},
    {"agent.tcp.certFile", [](const YAML::Node& n, Config* c) { return SetString(n, &c->agent.tcp.cert_file); },
     nullptr},
    {"agent.tcp.keyFile", [](const YAML::Node& n, Config* c) { return SetString(n, &c->agent.tcp.key_file); }, nullptr},
    {"agent.tcp.clientCAFile",
     [](const YAML::Node& n, Config* c) { return SetString(n, &c->agent.tcp.client_ca_file); },
     [](const Config& c) -> nlohmann::json { return !c.agent.tcp.client_ca_file.empty(); }, "agent.tcp.mtls"},
    {"agent.tcp.insecure", [](const YAML::Node& n, Config* c) { return SetBool(n, &c->agent.tcp.insecure); },
     [](const Config& c) -> nlohmann::json { return c.agent.tcp.insecure; }},
    {"agent.metrics.maxConnections",
     [](const YAML::Node& n, Config* c) { return SetCount(n, 4096, &c->agent.metrics.max_connections); },
     [](const Config& c) -> nlohmann::json { return c.agent.metrics.max_connections; }},
    {"agent.metrics.maxConnectionsPerClient",
     [](const YAML::Node& n, Config* c) { return SetCount(n, 4096, &c->agent.metrics.max_connections_per_client); },
     [](const Config& c) -> nlohmann::json { return c.agent.metrics.max_connections_per_client; }},
    {"agent.metrics.headerTimeout",
     [](const YAML::Node& n, Config* c) { return SetDuration(n, &c->agent.metrics.header_timeout); },
     [](const Config& c) -> nlohmann::json { return std::to_string(c.agent.metrics.header_timeout.count()) + "ms"; }},
    {"agent.metrics.idleTimeout",
     [](const YAML::Node& n, Config* c) { return SetDuration(n, &c->agent.metrics.idle_timeout); },
     [](const Config& c) -> nlohmann::json { return std::to_string(c.agent.metrics.idle_timeout.count()) + "ms"; }},
    {"agent.metrics.writeTimeout",
     [](const YAML::Node& n, Config* c) { return SetDuration(n, &c->agent.metrics.write_timeout); },
     [](const Config& c) -> nlohmann::json { return std::to_string(c.agent.metrics.write_timeout.count()) + "ms"; }},
    {"agent.metrics.certFile", [](const YAML::Node& n, Config* c) { return SetString(n, &c->agent.metrics.cert_file); },
     [](const Config& c) -> nlohmann::json { return !c.agent.metrics.cert_file.empty(); }, "agent.metrics.tls"},
    {"agent.metrics.keyFile", [](const YAML::Node& n, Config* c) { return SetString(n, &c->agent.metrics.key_file); },
     nullptr},
    {"agent.metrics.clientCAFile",
     [](const YAML::Node& n, Config* c) { return SetString(n, &c->agent.metrics.client_ca_file); },
     [](const Config& c) -> nlohmann::json { return !c.agent.metrics.client_ca_file.empty(); },
     "agent.metrics.clientCertificates"},
    {"agent.metrics.bearerTokenFile",
     [](const YAML::Node& n, Config* c) { return SetString(n, &c->agent.metrics.bearer_token_file); },
     [](const Config& c) -> nlohmann::json { return !c.agent.metrics.bearer_token_file.empty(); },
     "agent.metrics.bearerToken"},
    {"agent.maxWatchStreams",
     [](const YAML::Node& n, Config* c) { return SetCount(n, 100000, &c->agent.max_watch_streams); },
     [](const Config& c) -> nlohmann::json { return c.agent.max_watch_streams; }},
    {"agent.maxFilesPerPod",
     [](const YAML::Node& n, Config* c) { return SetCount(n, 100000, &c->agent.max_files_per_pod); },
     [](const Config& c) -> nlohmann::json { return c.agent.max_files_per_pod; }},
    {"inject.preload", [](const YAML::Node& n, Config* c) { return SetBool(n, &c->inject.preload); },
     [](const Config& c) -> nlohmann::json { return c.inject.preload; }},
    {"inject.library", [](const YAML::Node& n, Config* c) { return SetString(n, &c->inject.library); },
     [](const Config& c) -> nlohmann::json { return c.inject.library; }},
    {"preload.reserve", [](const YAML::Node& n, Config* c) { return SetBool(n, &c->preload.reserve); },
     [](const Config& c) -> nlohmann::json { return c.preload.reserve; }},
    {"cuda.ipc", [](const YAML::Node& n, Config* c) { return ParseEnum(n, kCudaIpcNames, &c->cuda.ipc); },
     [](const Config& c) -> nlohmann::json { return kCudaIpcNames[static_cast<size_t>(c.cuda.ipc)]; }},
    {"cuda.devDir", [](const YAML::Node& n, Config* c) { return SetString(n, &c->cuda.dev_dir); },
     [](const Config& c) -> nlohmann::json { return c.cuda.dev_dir; }},
    {"cuda.procDevices", [](const YAML::Node& n, Config* c) { return SetString(n, &c->cuda.proc_devices); },
     [](const Config& c) -> nlohmann::json { return c.cuda.proc_devices; }},
    {"leaks.grace",
     [](const YAML::Node& n, Config* c) -> Status {
       SHMK_ASSIGN_OR_RETURN(std::string text, Scalar(n));
       SHMK_ASSIGN_OR_RETURN(std::chrono::milliseconds d, ParseDuration(text));
       c->leaks.grace = std::chrono::duration_cast<std::chrono::seconds>(d);
       return Status::Ok();
     },
     [](const Config& c) -> nlohmann::json { return std::to_string(c.leaks.grace.count()) + "s"; }},
    {"leaks.reclaim", [](const YAML::Node& n, Config* c) { return ParseEnum(n, kReclaimNames, &c->leaks.reclaim); },
     [](const Config& c) -> nlohmann::json { return kReclaimNames[static_cast<size_t>(c.leaks.reclaim)]; }},
};

std::string Where(const std::string& name, const YAML::Node& node) {
  YAML::Mark m = node.Mark();
  if (m.is_null()) return name;
  return name + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

bool IsSection(std::string_view key) {
  for (const Field& f : kFields) {
    if (f.key.size() > key.size() && f.key.starts_with(key) && f.key[key.size()] == '.') return true;
  }
  return false;
}

Status Walk(const YAML::Node& map, const std::string& prefix, const std::string& name, Config* c) {
  std::set<std::string> seen;
  for (const auto& kv : map) {
    const YAML::Node& k = kv.first;
    std::string key = k.IsScalar() ? k.Scalar() : "?";
    std::string full = prefix.empty() ? key : prefix + "." + key;
    auto at = [&](const YAML::Node& n, const std::string& why) { return Status::Invalid(Where(name, n) + ": " + why); };
    if (!seen.insert(key).second) return at(k, "duplicate key '" + full + "'");
    const Field* field = nullptr;
    for (const Field& f : kFields) {
      if (f.key == full) field = &f;
    }
    if (field) {
      if (Status s = field->set(kv.second, c); !s.ok()) return at(kv.second, "key '" + full + "': " + s.message());
    } else if (IsSection(full)) {
      if (kv.second.IsNull()) continue;
      if (!kv.second.IsMap()) return at(kv.second, "key '" + full + "': expected a mapping");
      SHMK_RETURN_IF_ERROR(Walk(kv.second, full, name, c));
    } else {
      return at(k, "unknown key '" + full + "'");
    }
  }
  return Status::Ok();
}

Status Validate(const YAML::Node& root, const std::string& name, const Config& c) {
  const Config::Agent::Tcp& tcp = c.agent.tcp;
  if (!tcp.address.empty() && !tcp.insecure && (tcp.cert_file.empty() || tcp.key_file.empty())) {
    return Status::Invalid(Where(name, root["agent"]["tcp"]) +
                           ": key 'agent.tcp': a TCP listener needs certFile and keyFile (TLS), or "
                           "insecure: true to serve plaintext");
  }
  const Config::Agent::Metrics& m = c.agent.metrics;
  if (m.cert_file.empty() != m.key_file.empty() || (!m.client_ca_file.empty() && m.cert_file.empty())) {
    return Status::Invalid(Where(name, root["agent"]["metrics"]) +
                           ": key 'agent.metrics': HTTPS needs both certFile and keyFile (clientCAFile only with "
                           "them)");
  }
  if (m.max_connections_per_client > m.max_connections) {
    return Status::Invalid(Where(name, root["agent"]["metrics"]) +
                           ": key 'agent.metrics.maxConnectionsPerClient': larger than maxConnections");
  }
  if (c.agent.reconcile && c.agent.cri_socket.empty()) {
    return Status::Invalid(Where(name, root["agent"]["reconcile"]) +
                           ": key 'agent.reconcile': agent-only mode needs agent.criSocket (the CRI socket to list "
                           "pod sandboxes on)");
  }
  if (c.shm.default_bytes && c.shm.max_bytes && *c.shm.default_bytes > *c.shm.max_bytes) {
    return Status::Invalid(Where(name, root["shm"]["default"]) +
                           ": key 'shm.default': " + FormatSize(*c.shm.default_bytes) + " is larger than shm.max " +
                           FormatSize(*c.shm.max_bytes));
  }
  return Status::Ok();
}

}  // namespace

std::string ResolveConfigPath(std::string_view flag) {
  if (!flag.empty()) return std::string(flag);
  const char* env = std::getenv(kConfigEnv);
  if (env && *env) return env;
  return kDefaultConfigPath;
}

Result<Config> ParseConfig(std::string_view yaml, const std::string& name) {
  Config c;
  c.source = name;
  try {
    YAML::Node root = YAML::Load(std::string(yaml));
    if (root.IsNull()) return c;
    if (!root.IsMap()) return Status::Invalid(Where(name, root) + ": the document must be a mapping");
    SHMK_RETURN_IF_ERROR(Walk(root, "", name, &c));
    SHMK_RETURN_IF_ERROR(Validate(root, name, c));
  } catch (const YAML::Exception& e) {
    return Status::Invalid(name + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                           ": " + e.msg);
  }
  return c;
}

Result<Config> LoadConfig(const std::string& path, bool must_exist) {
  Result<std::string> text = ReadFile(path, 1 << 20);
  if (!text.ok()) {
    if (text.status().code() == Code::kNotFound && !must_exist) return Config();
    return text.status().WithContext("load config");
  }
  return ParseConfig(*text, path);
}

const char* LogLevelName(LogLevel level) { return kLevelNames[static_cast<size_t>(level)]; }

const char* LeakReclaimName(LeakReclaim mode) { return kReclaimNames[static_cast<size_t>(mode)]; }

Result<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  size_t i = 0;
  int64_t n = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    if (n > 100000000) return Status::Invalid("duration \"" + std::string(text) + "\" is too long");
    n = n * 10 + (text[i] - '0');
  }
  std::string_view unit = text.substr(i);
  int64_t ms = unit == "ms" ? 1 : unit == "s" ? 1000 : unit == "m" ? 60000 : unit == "h" ? 3600000 : 0;
  if (i == 0 || ms == 0) {
    return Status::Invalid("invalid duration \"" + std::string(text) + "\": want a number and ms, s, m or h");
  }
  if (n == 0) return Status::Invalid("duration \"" + std::string(text) + "\" must be greater than zero");
  return std::chrono::milliseconds(n * ms);
}

nlohmann::json ConfigToJson(const Config& c) {
  nlohmann::json out = {{"source", c.source.empty() ? "built-in defaults" : c.source}};
  for (const Field& f : kFields) {
    if (!f.show) continue;
    std::string pointer(f.shown_as.empty() ? f.key : f.shown_as);
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    out[nlohmann::json::json_pointer("/" + pointer)] = f.show(c);
  }
  return out;
}

}  // namespace shmkeeper
