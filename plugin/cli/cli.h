// The shmkeeper CLI: each verb lives in its own file and registers itself on
// the CLI11 app from the table in main.cc.
#pragma once

#include <CLI/CLI.hpp>

#include "base/status.h"

namespace shmkeeper::cli {

// What a verb's callback hands back to main, which turns it into the exit.
struct Outcome {
  Status status;      // non-OK: printed as "shmkeeper: <message>", exit 1 (2 for bad input)
  int exit_code = 0;  // used when status is OK (e.g. 1 for "findings")
};

using Registrar = void (*)(CLI::App& app, Outcome& outcome);

void RegisterVersion(CLI::App& app, Outcome& outcome);
void RegisterInstall(CLI::App& app, Outcome& outcome);
void RegisterAgent(CLI::App& app, Outcome& outcome);
void RegisterCompose(CLI::App& app, Outcome& outcome);
void RegisterDoctor(CLI::App& app, Outcome& outcome);
void RegisterTop(CLI::App& app, Outcome& outcome);
void RegisterMan(CLI::App& app, Outcome& outcome);

}  // namespace shmkeeper::cli
