#include "decide/node_config.h"

namespace shmkeeper {

std::string ContainerPolicy::Problem() const {
  if (file.ok()) return "";
  if (file.code() == Code::kNotFound) return "policy file missing, built-in defaults used: " + file.message();
  return "policy file invalid, the container passed through with its engine's /dev/shm: " + file.message();
}

ContainerPolicy LoadContainerPolicy(std::string_view flag) {
  ContainerPolicy out;
  std::string path = ResolveConfigPath(flag);
  bool from_env = flag.empty() && path != kDefaultConfigPath;
  Result<Config> loaded = LoadConfig(path, !flag.empty() || from_env);
  if (loaded.ok()) {
    out.config = std::move(loaded).value();
    return out;
  }
  if (from_env && loaded.status().code() == Code::kNotFound) {
    out.file = Status::NotFound(std::string(kConfigEnv) + " names " + path + ", which does not exist");
    out.warnings.push_back(Status::NotFound(out.file.message() + ": using the defaults"));
  } else if (loaded.status().code() == Code::kNotFound) {
    out.file = Status::Invalid(loaded.status().message());  // --config names a missing file
  } else {
    out.file = loaded.status();
  }
  return out;
}

}  // namespace shmkeeper
