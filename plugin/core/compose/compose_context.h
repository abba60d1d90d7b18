// What a service's build shows of the image it makes (internal to
// shmkeeper_compose): the Dockerfile's final stage (FROM chain, ENV names,
// RUN lines' installed packages, ENTRYPOINT/CMD), the package.json and
// requirements.txt next to it, and the scripts a command names, read from a
// volume that mounts them or the build context. Every read goes through the
// options' reader, bounded; an unreadable file adds nothing.
#pragma once

#include <string>
#include <vector>

#include "compose/compose.h"
#include "compose/compose_reader.h"
#include "decide/workloads.h"

namespace shmkeeper::compose {

// What the image of a service's build is made of.
struct BuildInfo {
  bool found = false;  // a Dockerfile was read
  // The RUN command that runs PyTorch tests ("" : none): pytest or unittest
  // run (not merely installed) in a Dockerfile that names torch.
  std::string torch_tests;
  std::string context;                    // the build context directory
  std::vector<std::string> entrypoint;    // the final stage's ENTRYPOINT (argv), if any
  std::vector<std::string> cmd;           // and CMD
  std::vector<std::string> dev_packages;  // the context's package.json devDependencies
  // Dockerfile COPY/ADD: container path (or directory, ending in '/') -> context path.
  std::vector<std::pair<std::string, std::string>> copies;
};

// Reads the service's build (none: found = false) and adds its FROM images,
// ENV names and installed packages to `sig`.
BuildInfo ReadBuild(const Service& s, const ComposeCheckOptions& o, WorkloadSignals* sig);

// Adds the commands of the scripts `argv` names (its program, a shell's
// script argument) to `sig`: from a volume of the service that mounts the
// path, else the build context (through its COPY lines, else by name).
void AddScripts(const Service& s, const BuildInfo& build, const std::vector<std::string>& argv,
                const ComposeCheckOptions& o, WorkloadSignals* sig);

// A service that runs npm/yarn/pnpm/npx: the devDependencies of its
// build's package.json, or of the package.json in its working_dir when a
// volume mounts it, count as packages (a test runner runs them: Playwright,
// Puppeteer, Cypress in `npm run test:e2e`).
void AddTestPackages(const Service& s, const BuildInfo& build, const ComposeCheckOptions& o, WorkloadSignals* sig);

// The argv of a compose command/entrypoint value (a list, or a string split
// as compose splits it); `env` interpolates it.
std::vector<std::string> ArgvOf(const YAML::Node& v, const std::map<std::string, std::string>& env);

}  // namespace shmkeeper::compose
