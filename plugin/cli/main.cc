#include <iostream>

#include "base/term_escape.h"
#include "cli.h"
#include "shmkeeper/version.h"

namespace shmkeeper::cli {
namespace {

constexpr Registrar kVerbs[] = {RegisterVersion, RegisterInstall, RegisterAgent, RegisterCompose,
                                RegisterDoctor,  RegisterTop,     RegisterMan};

int Run(int argc, char** argv) {
  CLI::App app{"shmkeeper: right-sized /dev/shm and visible, safe shared memory for containers", "shmkeeper"};
  app.set_version_flag("--version", std::string("shmkeeper ") + SHMKEEPER_VERSION);
  app.require_subcommand(1);
  Outcome outcome;
  for (Registrar reg : kVerbs) reg(app, outcome);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::cerr << "shmkeeper: " << e.what() << " (see shmkeeper --help)\n";
    return 2;
  }
  if (!outcome.status.ok()) {
    std::cerr << "shmkeeper: " << TermEscape(outcome.status.message()) << "\n";  // may quote the agent's paths
    return outcome.status.IsUserError() ? 2 : 1;
  }
  return outcome.exit_code;
}

}  // namespace
}  // namespace shmkeeper::cli

int main(int argc, char** argv) { return shmkeeper::cli::Run(argc, argv); }
