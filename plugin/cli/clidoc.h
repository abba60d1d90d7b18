// Man pages and shell completion generated from CLI11 definitions: the
// option and subcommand lists are walked from the CLI::App, never written by
// hand, so they cannot drift from what the binaries parse.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <utility>
#include <vector>

namespace shmkeeper::cli {

// What a man page has besides the CLI definition.
struct ManInfo {
  std::string version;                                     // "0.1.0"
  std::string description;                                 // DESCRIPTION paragraphs (blank line = new paragraph)
  std::vector<std::pair<std::string, std::string>> files;  // FILES: path, what it is
  std::vector<std::string> see_also;                       // "shmkeeperd(1)"
};

// A man(7) page, section 1, for `app` and every subcommand under it
// (recursively). Hidden options (empty group) are left out. Pure function.
std::string ManPage(const CLI::App& app, const ManInfo& info);

// One bash script completing every app in `apps` (subcommands, options, the
// choices of CLI::IsMember options, files for other option values): one
// function per binary and `complete -F` for each. Pure function.
std::string BashCompletion(const std::vector<const CLI::App*>& apps);

// The same for zsh: a `#compdef` file for $fpath (site-functions/_shmkeeper).
std::string ZshCompletion(const std::vector<const CLI::App*>& apps);

}  // namespace shmkeeper::cli
