// The command lines of shmkeeperd, shmkeeper-hook, shmkeeper-doctor (and a
// description of shmkeeper-runtime's), defined once: each binary parses its own with these, and
// `shmkeeper man` / `shmkeeper completion` walk the same definitions. Each
// Define* call adds options to a fresh app and binds them to `*flags`, which
// must outlive the app.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace shmkeeper::cli {

// shmkeeperd's flags (not the CLI's AgentFlags in agent_client.h: one name, one type).
struct AgentdFlags {
  std::string config, socket, metrics_address, state_dir;
  bool reconcile = false, check_config = false, probe = false, read_only = false;
};
void DefineAgentCli(CLI::App& app, AgentdFlags* flags);

struct HookFlags {
  std::string config, stage;
};
void DefineHookCli(CLI::App& app, HookFlags* flags);

struct DoctorFlags {
  std::string output = "table";
  std::string shm_path = "/dev/shm";
};
void DefineDoctorCli(CLI::App& app, DoctorFlags* flags);

// shmkeeper-runtime takes runc's command line (ParseRuntimeArgs reads what it
// needs and passes everything on): this describes that command line, for the
// man page and completion only; nothing parses with it.
void DescribeRuntimeCli(CLI::App& app);

// The five binaries, for `shmkeeper man` and `shmkeeper completion`.
inline constexpr const char* kBinaries[] = {"shmkeeper", "shmkeeperd", "shmkeeper-runtime", "shmkeeper-hook",
                                            "shmkeeper-doctor"};

}  // namespace shmkeeper::cli
