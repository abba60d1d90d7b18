// The command line an engine gives an OCI runtime (runc/crun conventions):
//   [global flags] <subcommand> [flags] <container-id>
// Only what shmkeeper needs is extracted; every argument is passed on as-is,
// except shmkeeper's own --config, which is removed.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace shmkeeper {

struct RuntimeArgs {
  std::vector<std::string> passthrough;  // argv for the real runtime, without argv[0]
  std::string config_path;               // shmkeeper's own --config (global position)
  std::string subcommand;                // "" when none was given
  std::string bundle;                    // create/run: --bundle/-b, "" = working directory
  std::string container_id;              // create/run: the positional argument
  std::string log_path;                  // global --log
  std::string log_format;                // global --log-format ("text" or "json")
  std::string root;                      // global --root ("" = the runtime's default)

  // create and run are the subcommands whose spec shmkeeper edits.
  bool Intercepts() const { return subcommand == "create" || subcommand == "run"; }
};

// `args` excludes argv[0]. Flags may be written -flag or --flag, with the value
// as the next argument or after '='. Errors only for a flag missing its value.
Result<RuntimeArgs> ParseRuntimeArgs(const std::vector<std::string>& args);

}  // namespace shmkeeper
