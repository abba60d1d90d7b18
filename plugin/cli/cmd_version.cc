#include <iostream>

#include "cli.h"
#include "shmkeeper/version.h"

namespace shmkeeper::cli {

void RegisterVersion(CLI::App& app, Outcome&) {
  app.add_subcommand("version", "Print the shmkeeper version")->callback([] {
    std::cout << "shmkeeper " << SHMKEEPER_VERSION << "\n";
  });
}

}  // namespace shmkeeper::cli
