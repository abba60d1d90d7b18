#include "kube/node_label.h"

#include <httplib.h>

#include <cctype>
#include <cstdlib>

#include "base/fileutil.h"
#include "base/json.h"

namespace shmkeeper {
namespace {

bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// DNS-1123 label: lower-case alphanumerics and '-', alphanumeric at both ends.
bool IsDnsLabel(std::string_view s) {
  if (s.empty() || s.size() > 63 || !IsAlnum(s.front()) || !IsAlnum(s.back())) return false;
  for (char c : s) {
    if (!(IsAlnum(c) && !std::isupper(static_cast<unsigned char>(c))) && c != '-') return false;
  }
  return true;
}

bool IsDnsSubdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (true) {
    size_t dot = s.find('.', start);
    if (!IsDnsLabel(s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start))) {
      return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

// A label name or value: alphanumerics, '-', '_', '.', alphanumeric at both
// ends, at most 63 (a value may be empty).
bool IsLabelToken(std::string_view s, bool may_be_empty) {
  if (s.empty()) return may_be_empty;
  if (s.size() > 63 || !IsAlnum(s.front()) || !IsAlnum(s.back())) return false;
  for (char c : s) {
    if (!IsAlnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

Result<int> ParsePort(const std::string& s, const std::string& what) {
  char* end = nullptr;
  long v = s.empty() ? 0 : std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < 1 || v > 65535) return Status::Invalid(what + ": invalid port \"" + s + "\"");
  return static_cast<int>(v);
}

std::string TrimNewline(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

// The API's message from a Status object body, or the body's start.
std::string ApiMessage(const std::string& body) {
  Json j = Json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("message") && j["message"].is_string()) return j["message"].get<std::string>();
  return EscapeControl(body.substr(0, 200));
}

}  // namespace

Result<KubeApi> InClusterApi(const std::string& sa_dir, const std::string& server) {
  KubeApi api;
  if (!server.empty()) {
    constexpr std::string_view kScheme = "https://";
    if (!server.starts_with(kScheme)) return Status::Invalid("API server \"" + server + "\" must be https://HOST:PORT");
    std::string rest = server.substr(kScheme.size());
    while (!rest.empty() && rest.back() == '/') rest.pop_back();
    size_t colon = rest.rfind(':');
    if (colon == std::string::npos || rest.find(']', colon) != std::string::npos) {
      api.host = rest;
    } else {
      api.host = rest.substr(0, colon);
      SHMK_ASSIGN_OR_RETURN(api.port, ParsePort(rest.substr(colon + 1), "API server " + server));
    }
  } else {
    const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
    const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
    if (!host || !*host) {
      return Status::Precondition("KUBERNETES_SERVICE_HOST is unset: not in a pod (pass --api-server)");
    }
    api.host = host;
    SHMK_ASSIGN_OR_RETURN(api.port, ParsePort(port ? port : "443", "KUBERNETES_SERVICE_PORT"));
  }
  if (api.host.size() > 2 && api.host.front() == '[' && api.host.back() == ']') {
    api.host = api.host.substr(1, api.host.size() - 2);
  }
  if (api.host.empty()) return Status::Invalid("API server host is empty");
  SHMK_ASSIGN_OR_RETURN(std::string token, ReadFile(sa_dir + "/token", 64 << 10));
  api.token = TrimNewline(token);
  if (api.token.empty()) return Status::Invalid(sa_dir + "/token is empty");
  api.ca_file = sa_dir + "/ca.crt";
  if (!PathExists(api.ca_file)) return Status::NotFound(api.ca_file + " does not exist (the cluster CA)");
  return api;
}

Status CheckNodeName(const std::string& name) {
  if (IsDnsSubdomain(name)) return Status::Ok();
  return Status::Invalid("node name \"" + EscapeControl(name) + "\" is not a DNS-1123 subdomain");
}

Status CheckLabel(const std::string& key, const std::string& value) {
  size_t slash = key.find('/');
  std::string_view prefix = slash == std::string::npos ? std::string_view() : std::string_view(key).substr(0, slash);
  std::string_view name = slash == std::string::npos ? std::string_view(key) : std::string_view(key).substr(slash + 1);
  if ((slash != std::string::npos && !IsDnsSubdomain(prefix)) || !IsLabelToken(name, false)) {
    return Status::Invalid("label key \"" + EscapeControl(key) + "\" is not [DNS-subdomain/]name");
  }
  if (!IsLabelToken(value, true)) {
    return Status::Invalid("label value \"" + EscapeControl(value) + "\" is not a valid label value");
  }
  return Status::Ok();
}

std::string NodeLabelPatch(const std::string& key, const std::optional<std::string>& value) {
  Json labels = Json::object();
  labels[key] = value ? Json(*value) : Json(nullptr);
  return DumpJson(Json{{"metadata", Json{{"labels", labels}}}});
}

Status PatchNodeLabel(const KubeApi& api, const std::string& node, const std::string& key,
                      const std::optional<std::string>& value) {
  SHMK_RETURN_IF_ERROR(CheckNodeName(node));
  SHMK_RETURN_IF_ERROR(CheckLabel(key, value.value_or("")));
  httplib::SSLClient cli(api.host, api.port);
  cli.set_ca_cert_path(api.ca_file);
  cli.enable_server_certificate_verification(true);
  cli.set_bearer_token_auth(api.token);
  cli.set_connection_timeout(10, 0);
  cli.set_read_timeout(30, 0);
  cli.set_write_timeout(30, 0);
  std::string what = std::string(value ? "label" : "unlabel") + " node " + node + " (" + key + ") at https://" +
                     api.host + ":" + std::to_string(api.port);
  httplib::Headers headers = {{"Accept", "application/json"}};
  httplib::Result res =
      cli.Patch("/api/v1/nodes/" + node, headers, NodeLabelPatch(key, value), "application/merge-patch+json");
  if (!res) {
    std::string detail = httplib::to_string(res.error());
    if (long v = cli.get_openssl_verify_result(); v != 0)
      detail += " (certificate: verify error " + std::to_string(v) + ")";
    return Status::Internal(what + ": " + detail);
  }
  if (res->status >= 200 && res->status < 300) return Status::Ok();
  if (res->status == 404 && !value) return Status::Ok();
  return Status::Internal(what + ": HTTP " + std::to_string(res->status) + ": " + ApiMessage(res->body));
}

}  // namespace shmkeeper
