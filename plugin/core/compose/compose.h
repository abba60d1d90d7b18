// docker-compose files: reading them (merged in order, with `extends` and
// ${VAR:-default} interpolation), finding /dev/shm problems per service, and
// fixing them with surgical line edits that leave every other byte alone.
//
// Compose files are untrusted input: every read is bounded (size, depth,
// node count) and every error names the file and, where known, the line.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/json.h"
#include "base/status.h"

namespace shmkeeper {

struct SourcePos {
  std::string file;
  int line = 0;    // 1-based; 0 = unknown
  int column = 0;  // 1-based
  std::string ToString() const;
};

enum class Severity { kInfo, kWarning, kError };

// What a finding is about. Output (text and JSON) prints it as the string of
// FindingCodeName, which users and scripts read: those strings never change.
enum class FindingCode {
  kMisspelledKey,     // "misspelled-key"
  kInvalidSize,       // "invalid-size"
  kMisplacedShmSize,  // "misplaced-shm-size"
  kSizeTooSmall,      // "size-too-small"
  kHostShmBind,       // "host-shm-bind"
  kIpcHostForShm,     // "ipc-host-for-shm"
  kMissingShmSize,    // "missing-shm-size"
  kBuildShmSize,      // "build-shm-size"
};

// The code as output prints it, e.g. "misspelled-key".
const char* FindingCodeName(FindingCode code);

struct ComposeFinding {
  FindingCode code = FindingCode::kMissingShmSize;
  Severity severity = Severity::kWarning;
  std::string service;  // "" for file-level findings
  SourcePos pos;
  std::string message;
  std::string suggestion;  // the fix, in compose syntax
  std::string because;     // the sign that fired, in words ("image postgres"; "" for a syntax finding)
};

// Reads one file of at most `max_bytes` for the compose reader. A file over
// the limit is kInvalidArgument with no errno (what ReadFile returns then);
// every other failure has another code or an errno.
using ComposeFileReader = std::function<Result<std::string>(const std::string& path, size_t max_bytes)>;

// The reader of the disk (ReadFile).
Result<std::string> ReadComposeFileFromDisk(const std::string& path, size_t max_bytes);

// What `docker image inspect` shows of an image's config (all untrusted).
struct ComposeImageConfig {
  std::vector<std::string> entrypoint, cmd;
  std::vector<std::string> env;  // KEY=value
  std::map<std::string, std::string> labels;
};

// The config of an image present on the node, or nothing (absent, no engine).
using ComposeImageInspector = std::function<std::optional<ComposeImageConfig>(const std::string& image)>;

struct ComposeCheckOptions {
  std::vector<std::string> files;  // empty: the defaults in `dir`
  std::string dir = ".";
  std::map<std::string, std::string> env;  // interpolation; .env in the project dir is added
  // Measured /dev/shm use per compose service ("project/service" -> bytes),
  // e.g. from the agent; used to suggest sizes.
  std::map<std::string, int64_t> measured;
  int64_t min_bytes = 64LL << 20;  // smaller is "too small"
  // Every read of the check: the compose files, `extends` files, .env and
  // build Dockerfiles. Empty: ReadComposeFileFromDisk.
  ComposeFileReader read_file;
  // Whether the project's .env and the services' build Dockerfiles are read
  // at all (FixComposeText: no; it sees only the text it is given).
  bool read_side_files = true;
  // The project name given with -p ("" : COMPOSE_PROJECT_NAME of env or .env,
  // then the top-level name:, then the project directory's name, as compose).
  std::string project_name;
  // Images present on the node (empty: none is looked at).
  ComposeImageInspector inspect_image;
  // The node's default container runtime as the engine reports it ("" when
  // unknown): messages say what a service without shm_size gets there.
  std::string default_runtime;
};

struct ComposeReport {
  std::vector<std::string> files;     // what was read, in order
  std::vector<std::string> services;  // the services checked (none: the text output says so, never "ok")
  std::string project;
  std::vector<ComposeFinding> findings;
  // Per service: the suggested shm_size and why (services that show a
  // workload of workloads.h, with the error it gives at 64 MiB, or that bind
  // the host's /dev/shm).
  std::map<std::string, std::pair<std::string, std::string>> suggestions;
};

// The compose files docker-compose would read in `dir`: the first of
// compose.yaml, compose.yml, docker-compose.yaml, docker-compose.yml, and its
// docker-compose.override.* next to it. kNotFound when there is none.
Result<std::vector<std::string>> DefaultComposeFiles(const std::string& dir);

// Reads and checks. kInvalidArgument (one line, file:line where known) for
// unreadable, oversized or malformed files; findings otherwise.
Result<ComposeReport> CheckCompose(const ComposeCheckOptions& options);

Json ComposeReportToJson(const ComposeReport& report);

// The report for humans: one line per finding ("file:line:col: severity:
// service 'x': message (because: sign) (fix: suggestion) [code]"), or one "ok" line.
std::string ComposeReportToText(const ComposeReport& report);

struct ComposeFix {
  std::string file;
  std::string original;
  std::string fixed;
  std::vector<std::string> changes;  // one line per edit, for humans
  std::vector<std::string> skipped;  // findings it could not fix surgically
};

// Plans the fixes for one file (the first of the check's files when `file`
// is empty): rename misspelled keys, move shm_size out of deploy, replace
// invalid or too small sizes, add shm_size where a service needs one, drop a
// host /dev/shm bind written in the service's own block list (and its
// volumes key when it was the only entry) for shm_size, turn `ipc: host` into
// shm_size on its line (not where the finding is info: ipc: host that GPU
// services share is kept, a choice). Info findings are never fixed. `size` overrides the suggested sizes. Nothing is
// written here.
Result<ComposeFix> PlanComposeFix(const ComposeCheckOptions& options, const std::string& file, const std::string& size);

// The fixes of every file the check read and a finding came from: the
// compose files (override files included) and the files `extends` read, one
// ComposeFix per file read, in that order (unchanged ones included). A fix
// that would land in an anchor other services merge says so in `changes`;
// one that cannot be made is in `skipped`.
Result<std::vector<ComposeFix>> PlanComposeFixes(const ComposeCheckOptions& options, const std::string& size);

// Check and fix of one in-memory file named `name`, with no filesystem access:
// `extends` of another file fails ("not found"), no .env and no Dockerfile is
// read. For fuzzing and tests.
Result<ComposeFix> FixComposeText(const std::string& name, const std::string& text, const std::string& size);

// shm_size as compose v1 reads a string (docker-compose 1.29 -> docker-py's
// parse_bytes): Python float() text (surrounding whitespace, '_' between
// digits, fraction, exponent) then one unit b/k/m/g of any case, a trailing
// "b" after a unit letter dropped ("2 GB", "1.5gB", "1e3m", "1024"). Binary
// units, truncated to whole bytes. Negative, inf, nan, non-ASCII: refused.
Result<int64_t> ParseComposeV1Size(const std::string& text);

// shm_size as compose v2 reads a string (compose-go -> go-units v0.5.0
// RAMInBytes): a Go float (no spaces, no '_') ending at the last digit, '.'
// or single space, then "", b, or k/m/g/t/p optionally followed by "b" or
// "ib", any case ("2 GB", "2GiB", "1.5t"). Binary units, truncated.
Result<int64_t> ParseComposeV2Size(const std::string& text);

// The bytes of a size either grammar accepts (v1's reading first; where both
// accept they agree); kInvalidArgument otherwise.
Result<int64_t> ParseComposeSize(const std::string& text);

// Whether `text` is a size docker-compose (v1 or v2) accepts for shm_size.
bool IsComposeSize(const std::string& text);

// ${VAR}, ${VAR:-default}, ${VAR-default}, $VAR and $$ in `text`.
Result<std::string> Interpolate(const std::string& text, const std::map<std::string, std::string>& env);

}  // namespace shmkeeper
