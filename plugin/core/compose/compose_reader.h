// The compose reader (internal to shmkeeper_compose): compose files read
// through the options' file reader, validated (bounded size, depth and node
// count, no duplicate keys), merged in order with YAML merge keys and
// `extends` folded in, into one model of services.
#pragma once

#include <yaml-cpp/yaml.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "compose/compose.h"

namespace shmkeeper::compose {

inline constexpr size_t kMaxFileBytes = 4 << 20;
inline constexpr int kMaxDepth = 64;

// Where node `n` of `file` starts (line 0 when yaml-cpp has no mark).
SourcePos At(const std::string& file, const YAML::Node& n);

// kInvalidArgument "file:line:col: why".
Status BadAt(const SourcePos& p, const std::string& why);

std::string Lower(std::string s);

// The directory part of `path` ("." when it has none).
std::string DirOf(const std::string& path);

// `rel` under `dir`, unless it is absolute.
std::string Join(const std::string& dir, const std::string& rel);

// One compose file as read: its text and its parsed document.
struct LoadedFile {
  std::string path;
  std::string text;
  YAML::Node root;
};

// One key of a merged service: where it was written last.
struct Entry {
  YAML::Node key, value;
  std::string file;
};

// A service merged over every file that declares it, `extends` folded in.
struct Service {
  std::string name;
  SourcePos pos;  // first definition
  std::map<std::string, Entry> keys;
  std::map<std::string, YAML::Node> nodes;  // file -> the service's mapping there
  // The mappings of the services it extends (file, mapping), nearest first.
  std::vector<std::pair<std::string, YAML::Node>> inherited;
  // Per key, the files whose value a later file dropped with compose v2's
  // `!reset` or `!override` tag (yaml-cpp keeps a node's tag in Tag()).
  std::map<std::string, std::set<std::string>> dropped;
};

// Everything the reader makes of a project's files.
struct ComposeProject {
  std::vector<LoadedFile> files;     // in the order read (compose v2's `include:`d files before their includer)
  std::vector<LoadedFile> extended;  // the other files `extends` read, each once
  std::map<std::string, Service> services;
  std::string name;      // the project name as compose computes it (see ReadComposeProject)
  std::string dir_name;  // the project directory's name, normalised (compose v1's name when name: is set)
  std::map<std::string, std::string> env;  // the options' env, then .env
};

// The services mapping of a file's root: its `services`, or the root itself
// in a compose v1 file (no version:, services at the top level, which
// docker-compose 1.29 still reads). A null node when it has none.
YAML::Node ServicesNode(const YAML::Node& root);

// Everything the reader requires of a file's text: YAML that parses, no
// duplicate keys, bounded, a mapping whose services are mappings.
Result<LoadedFile> ParseComposeText(const std::string& path, std::string text);

// The reader the options name (the disk when none).
ComposeFileReader ReaderOf(const ComposeCheckOptions& options);

// A project name as compose normalises it: lower case, only a-z 0-9 - _,
// no leading - or _ ("" when nothing is left).
std::string NormalizeProjectName(const std::string& name);

// Reads, validates and merges the options' files (the defaults of its dir
// when it names none). kInvalidArgument "file:line:col: why" on bad input.
Result<ComposeProject> ReadComposeProject(const ComposeCheckOptions& options);

}  // namespace shmkeeper::compose
