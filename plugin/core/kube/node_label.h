// Labelling this node in the Kubernetes API: after a successful install the
// DaemonSet's init container sets shmkeeper.io/runtime=ready on its own node
// (the RuntimeClass's scheduling.nodeSelector), and the uninstall init
// container removes it before unregistering. One request: a JSON merge patch
// of the node's metadata.labels (PATCH /api/v1/nodes/NAME), authenticated with
// the pod's service account token, TLS verified against the cluster CA. The
// RBAC it needs is `patch` on `nodes` (docs/kubernetes.md says why not more).
//
// Thread-compatible; no global state. Errors carry the API's status and
// message (e.g. 403 with the missing permission).
#pragma once

#include <optional>
#include <string>

#include "base/status.h"

namespace shmkeeper {

inline constexpr const char* kReadyLabel = "shmkeeper.io/runtime";
inline constexpr const char* kReadyValue = "ready";
inline constexpr const char* kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

struct KubeApi {
  std::string host;  // an address or name, no scheme
  int port = 443;
  std::string token;    // bearer token (the service account's)
  std::string ca_file;  // PEM bundle the server certificate must chain to
};

// The in-cluster API: KUBERNETES_SERVICE_HOST/_PORT from the environment (as
// the kubelet sets them), `sa_dir`/token and `sa_dir`/ca.crt. `server`
// ("https://HOST:PORT"), when set, replaces the environment's address.
Result<KubeApi> InClusterApi(const std::string& sa_dir, const std::string& server);

// Checks: a node name is a DNS-1123 subdomain; a label key is [prefix/]name
// and a value is a label value, as the API server validates them.
Status CheckNodeName(const std::string& name);
Status CheckLabel(const std::string& key, const std::string& value);

// The merge patch body: {"metadata":{"labels":{KEY:VALUE}}}, null removes.
std::string NodeLabelPatch(const std::string& key, const std::optional<std::string>& value);

// PATCH /api/v1/nodes/NODE with that body. Removing a label from a node that
// no longer exists (404) succeeds.
Status PatchNodeLabel(const KubeApi& api, const std::string& node, const std::string& key,
                      const std::optional<std::string>& value);

}  // namespace shmkeeper
