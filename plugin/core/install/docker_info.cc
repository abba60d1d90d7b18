#include "install/docker_info.h"

#include "base/json.h"

namespace shmkeeper {
namespace {

// The -H/--host values of a dockerd command line, in order.
std::vector<std::string> HostFlags(const std::vector<std::string>& argv) {
  std::vector<std::string> out;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if ((a == "-H" || a == "--host") && i + 1 < argv.size()) out.push_back(argv[++i]);
    if (a.starts_with("-H=")) out.push_back(a.substr(3));
    if (a.starts_with("--host=")) out.push_back(a.substr(7));
  }
  return out;
}

Result<std::vector<std::string>> ConfigHosts(const std::string& text) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  Json doc = Json::parse(text, nullptr, false);
  if (!doc.is_object()) return Status::Invalid("daemon.json is not a JSON object");
  if (!doc.contains("hosts")) return out;
  const Json& hosts = doc["hosts"];
  if (!hosts.is_array()) return Status::Invalid("daemon.json: \"hosts\" is not a list");
  for (const Json& h : hosts) {
    if (!h.is_string()) return Status::Invalid("daemon.json: \"hosts\" holds a value that is not a string");
    out.push_back(h.get<std::string>());
  }
  return out;
}

std::string Joined(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

Result<std::string> DockerdApiSocket(const std::vector<std::string>& argv, const std::string& daemon_json_text) {
  std::vector<std::string> hosts = HostFlags(argv);
  if (hosts.empty()) {
    SHMK_ASSIGN_OR_RETURN(hosts, ConfigHosts(daemon_json_text));
  }
  if (hosts.empty()) return std::string(kDockerDefaultSocket);
  bool systemd = false;
  for (const std::string& h : hosts) {
    if (h.starts_with("unix://")) return h.size() > 7 ? h.substr(7) : std::string(kDockerDefaultSocket);
    systemd = systemd || h.starts_with("fd://");
  }
  if (systemd) return std::string(kDockerDefaultSocket);  // docker.socket's ListenStream
  return Status::NotFound("it listens on no unix socket (hosts: " + Joined(hosts) +
                          "), so what it runs cannot be checked from here");
}

Result<DockerInfo> ParseDockerInfo(const std::string& text) {
  Json info = Json::parse(text, nullptr, false);
  if (!info.is_object()) return Status::Internal("docker info printed no JSON object");
  if (info.contains("ServerErrors") && info["ServerErrors"].is_array() && !info["ServerErrors"].empty()) {
    std::vector<std::string> errors;
    for (const Json& e : info["ServerErrors"]) errors.push_back(e.is_string() ? e.get<std::string>() : e.dump());
    return Status::Internal("docker info: " + Joined(errors));
  }
  DockerInfo out;
  out.server_version = StringField(info, "ServerVersion");
  if (out.server_version.empty()) return Status::Internal("docker info: no daemon answered (no ServerVersion)");
  out.default_runtime = StringField(info, "DefaultRuntime");
  if (info.contains("Runtimes") && info["Runtimes"].is_object()) {
    for (const auto& [name, v] : info["Runtimes"].items()) out.runtimes.push_back(name);
  }
  return out;
}

}  // namespace shmkeeper
