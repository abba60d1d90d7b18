// shmkeeper-node-label set|remove: the install and uninstall init containers
// mark their own node as able to run shmkeeper pods (shmkeeper.io/runtime=ready,
// what the RuntimeClass's scheduling.nodeSelector asks for) or no longer able.
// In the image only (it links OpenSSL); never copied to the host.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>

#include "kube/node_label.h"
#include "shmkeeper/version.h"

int main(int argc, char** argv) {
  CLI::App app{"shmkeeper-node-label: set or remove this node's shmkeeper readiness label", "shmkeeper-node-label"};
  app.set_version_flag("--version", std::string("shmkeeper-node-label ") + SHMKEEPER_VERSION);
  const char* env_node = std::getenv("NODE_NAME");
  std::string node = env_node ? env_node : "";
  std::string key = shmkeeper::kReadyLabel, value = shmkeeper::kReadyValue;
  std::string server, sa_dir = shmkeeper::kServiceAccountDir;
  std::string verb;
  app.add_option("verb", verb, "set or remove")->required()->check(CLI::IsMember({"set", "remove"}));
  app.add_option("--node", node, "The node (default: $NODE_NAME, the downward API's spec.nodeName)");
  app.add_option("--label", key, "Label key")->capture_default_str();
  app.add_option("--value", value, "Label value (set)")->capture_default_str();
  app.add_option("--api-server", server, "https://HOST:PORT (default: KUBERNETES_SERVICE_HOST/_PORT)");
  app.add_option("--service-account-dir", sa_dir, "Directory with token and ca.crt")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "shmkeeper-node-label: " << e.what() << "\n";
    return 2;
  }
  if (node.empty()) {
    std::cerr << "shmkeeper-node-label: no node name: set NODE_NAME (fieldRef spec.nodeName) or --node\n";
    return 2;
  }
  std::optional<std::string> v;
  if (verb == "set") v = value;
  shmkeeper::Status s = shmkeeper::CheckNodeName(node);
  if (s.ok()) s = shmkeeper::CheckLabel(key, value);
  if (s.ok()) {
    shmkeeper::Result<shmkeeper::KubeApi> api = shmkeeper::InClusterApi(sa_dir, server);
    s = api.ok() ? shmkeeper::PatchNodeLabel(*api, node, key, v) : api.status();
  }
  if (!s.ok()) {
    std::cerr << "shmkeeper-node-label: " << s.message() << "\n";
    return 1;
  }
  std::cout << "shmkeeper-node-label: node " << node << (v ? " labelled " + key + "=" + *v : " unlabelled " + key)
            << "\n";
  return 0;
}
