// The node policy: one typed schema, loaded from /etc/shmkeeper/config.yaml.
//
// Every key, its meaning and its default is documented here and in
// deploy/config/config.yaml. Unknown keys and bad values are errors that name
// the file, line, column and key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "shmkeeper/status.h"

namespace shmkeeper {

inline constexpr const char* kDefaultConfigPath = "/etc/shmkeeper/config.yaml";
inline constexpr const char* kConfigEnv = "SHMKEEPER_CONFIG";

enum class OverMax { kReject, kClamp };
enum class OnInternalError { kPassthrough, kFail };
enum class LogLevel { kDebug, kInfo, kWarn, kError };

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
  } log;
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

}  // namespace shmkeeper
