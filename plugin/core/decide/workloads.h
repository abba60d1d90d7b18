// The workloads known to outgrow a 64 MiB /dev/shm, and how a container
// shows them: one table (workloads.cc) that `compose check` matches against
// a service's image, command, entrypoint and environment and `doctor`
// against the processes it sees. No YAML here: the doctor is a static binary.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace shmkeeper {

// One row of the table.
//
// `evidence` and `unless` are patterns, lower case, each "kind:value":
//   image:NAME  the image's repository (registry, tag and digest dropped) is
//               NAME or ends with "/NAME" (NAME may hold '/': "selenium/node-chrome")
//   prog:NAME   the program run: the first word of command or entrypoint, or a
//               process's argv[0], as a basename with a trailing ':' dropped
//               ("postgres: checkpointer"); NAME ending in '*' is a prefix
//   cmd:WORD    any word of command, entrypoint or a process's command line
//               (paths as basenames; words split at spaces, quotes, = ; & | ( ) ,)
//   env:KEY     an environment variable named KEY; KEY ending in '*' is a prefix
//   text:SUB    SUB anywhere in the service's scalars (image, command,
//               entrypoint, environment, build, working_dir, labels) or the
//               process's command line
//   word:SUB    as text:, where SUB starts a word ("ray", not "array")
//   tag:WORD    WORD is a word of the image's tag (split at - _ . and where
//               digits meet letters: "postgres-17.9-postgis" shows "postgres"):
//               a tag names a version, never a program, so only as "?tag:"
//   token:T[+U] every T (and U) is a word of the image's repository path
//               (registry host dropped; split at / - _ .): in-house names such
//               as "registry.example.internal/data/warehouse-pg" show "pg"
//   pkg:NAME    a package the image installs (its build's Dockerfile RUN
//               apt-get/apk/dnf/pip/npm lines, package.json dependencies,
//               requirements.txt; "playwright-browsers" for `playwright install`)
//   mount:PATH  a volume mounted at PATH (or below it) in the container
//   port:N      container port N published or exposed
//   health:WORD a word of the healthcheck's test (basename, lower case)
// An evidence pattern may be prefixed: "?P" is weak evidence, which counts
// only with a "+P" pattern (support, never evidence alone; another pattern
// than the weak one) matching and no "-P" pattern (a sign of a client) matching.
// and, in `unless` only:
//   client:NAME NAME is one of the programs and none of the row's prog:
//               patterns matches: a client of the workload run in its image
//               (`psql` in the postgres image waiting for the database)
// A row matches when any evidence pattern does and no unless pattern does.
struct ShmWorkload {
  const char* name;     // what the user runs: "PostgreSQL"
  int64_t bytes;        // the /dev/shm size to suggest
  const char* symptom;  // what the user sees with 64 MiB: the error message
  const char* source;   // the project's page that recommends the size
  std::vector<const char*> evidence;
  std::vector<const char*> unless;
};

// What one container or process shows. All lower case.
struct WorkloadSignals {
  std::string image;                  // "mcr.microsoft.com/playwright:v1.44.0-jammy"
  std::vector<std::string> programs;  // first words of command and entrypoint, or argv[0]
  std::vector<std::string> words;     // every word of command and entrypoint, or argv
  std::vector<std::string> env_keys;
  std::string text;                                    // see text:
  std::vector<std::string> base_images;                // more images to match image: and token: (a build's FROM)
  std::vector<std::string> packages;                   // see pkg:
  std::map<std::string, std::string> package_origins;  // package -> where it is installed ("Dockerfile line 12")
  std::vector<std::string> mounts;                     // container paths of volumes, see mount:
  std::vector<std::string> ports;                      // container ports published or exposed ("5432"), see port:
  std::vector<std::string> health_words;               // the words of the healthcheck's test, see health:
};

// The table, in the order findings name the workloads.
const std::vector<ShmWorkload>& ShmWorkloads();

// "registry:5000/ns/name:tag@sha256:..." -> "registry:5000/ns/name".
std::string ImageRepository(std::string image);

// The rows `signals` match.
std::vector<const ShmWorkload*> MatchShmWorkloads(const WorkloadSignals& signals);

// One row whose evidence the signals show, and why.
struct ShmWorkloadMatch {
  const ShmWorkload* row = nullptr;
  // The evidence pattern that fired ("image:postgres"; weak + support:
  // "?token:pg +port:5432"), a prefix pattern as the value it matched
  // ("env:puppeteer_skip_download" for "env:puppeteer_*").
  std::string sign;
  std::string stopped_by;  // the unless pattern that excludes the row ("" : the row matches)
};

// Every row whose evidence the signals show, in table order, the excluded
// ones included (stopped_by set): MatchShmWorkloads is those with none.
std::vector<ShmWorkloadMatch> ExplainShmWorkloads(const WorkloadSignals& signals);

// A sign ("image:postgres", "?token:pg +env:postgres_password") in words for
// a finding's "because:": "image postgres", "image name has pg, with
// environment POSTGRES_PASSWORD".
std::string DescribeSign(const std::string& sign);

// Adds the words of `text` (a command line, a shell string) to `signals`:
// split at spaces, quotes and shell punctuation, paths as basenames,
// lower-cased. With `program`, its first word is also a program.
void AddCommandWords(const std::string& text, bool program, WorkloadSignals* signals);

// `text` split into words as a POSIX shell (and Python's shlex, which compose
// uses for a string `command`) splits them: quotes and backslashes removed.
// With `operators`, the control operators && || ; | & and newlines (outside
// quotes) are words of their own. Bounded (4096 words).
std::vector<std::string> ShellWords(const std::string& text, bool operators);

// Adds what the argv `argv` runs (entrypoint + command, as a container starts
// it): every word as AddCommandWords does, and as programs its first word,
// seen through wrappers (exec, env, gosu/su-exec USER, tini/dumb-init, nice,
// `--`, an entrypoint script's first argument) and shells: a `sh|bash -c
// SCRIPT` adds the first word of every command of SCRIPT (split at && || ; |
// & and newlines, also inside `su -c`).
void AddArgv(const std::vector<std::string>& argv, WorkloadSignals* signals);

// Adds every command of the shell script `text` (a Dockerfile RUN line, an
// entrypoint script), as AddArgv does for `sh -c text`.
void AddShellScript(const std::string& text, WorkloadSignals* signals);

}  // namespace shmkeeper
