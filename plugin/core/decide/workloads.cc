#include "decide/workloads.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <string_view>

#include "base/bytes.h"

namespace shmkeeper {

// To add a workload: one row, with the page that recommends its size. The
// size is what the page asks for (or, where it only says "--ipc=host", the
// figure of the nearest project that names one); sizes are limits, and a
// tmpfs costs nothing until it is written.
const std::vector<ShmWorkload>& ShmWorkloads() {
  static const std::vector<ShmWorkload> kTable = {
      // ---- browsers --------------------------------------------------------
      {"Chrome/Chromium",
       2 * kGiB,
       "tabs crash: \"session deleted because of page crash\", \"Page crashed!\"",
       // "--shm-size=2g ... When executing docker run for an image that contains a browser"
       "https://github.com/SeleniumHQ/docker-selenium#--shm-size2g",
       {"image:selenium/node-chrome",
        "image:selenium/node-chromium",
        "image:selenium/standalone-chrome",
        "image:selenium/standalone-chromium",
        "image:selenium/node-chrome-debug",
        "image:selenium/standalone-chrome-debug",
        "image:selenium/node-edge",
        "image:selenium/standalone-edge",
        "image:seleniarm/node-chromium",
        "image:seleniarm/standalone-chromium",
        "image:browserless/chrome",
        "image:browserless/chromium",
        "image:chromedp/headless-shell",
        "image:zenika/alpine-chrome",
        "image:justinribeiro/chrome-headless",
        "image:cypress/included",
        "image:cypress/browsers",
        "prog:google-chrome",
        "prog:google-chrome-stable",
        "prog:chrome",
        "prog:chromium",
        "prog:chromium-browser",
        "prog:headless_shell",
        "prog:microsoft-edge",
        "cmd:chromedriver",
        "env:chrome_bin",
        "env:chrome_path",
        "token:chrome",
        "token:chromium",
        "token:headless+chrome",
        "token:browserless",
        "pkg:chromium",
        "pkg:chromium-browser",
        "pkg:chromium-headless-shell",
        "pkg:chromium-driver",
        "pkg:chromium-chromedriver",
        "pkg:google-chrome-stable",
        "pkg:google-chrome-beta",
        "pkg:google-chrome-unstable",
        "pkg:chrome-aws-lambda",
        "pkg:@sparticuz/chromium",
        "pkg:cypress"},
       // Chrome then keeps its shared memory in /tmp.
       {"cmd:--disable-dev-shm-usage", "token:exporter", "token:extension", "token:driver"}},
      {"Firefox",
       2 * kGiB,
       "tabs crash: \"Failed to decode response from marionette\", \"Tab crashed\"",
       "https://github.com/SeleniumHQ/docker-selenium#--shm-size2g",
       {"image:selenium/node-firefox", "image:selenium/standalone-firefox", "image:selenium/node-firefox-debug",
        "image:selenium/standalone-firefox-debug", "image:seleniarm/node-firefox", "image:seleniarm/standalone-firefox",
        "image:jlesage/firefox", "prog:firefox", "prog:firefox-esr", "cmd:geckodriver", "token:firefox", "pkg:firefox",
        "pkg:firefox-esr"},
       {"token:exporter"}},
      // Playwright's page asks for --ipc=host ("Chrome can run out of memory
      // without this flag"); shm_size gives the browsers the same room
      // without the host's IPC namespace. 2gb as for Selenium.
      {"Playwright",
       2 * kGiB,
       "browsers crash mid-test: \"Target crashed\", \"Page crashed\"",
       "https://playwright.dev/docs/docker",
       {"image:playwright", "image:playwright/python", "image:playwright/java", "image:playwright/dotnet",
        "cmd:playwright", "env:playwright_browsers_path", "token:playwright", "pkg:playwright",
        "pkg:playwright-browsers", "pkg:@playwright/test", "pkg:playwright-chromium", "pkg:playwright-firefox"},
       {}},
      // "run the container with docker run --shm-size=1gb to increase the size of /dev/shm"
      {"Puppeteer",
       1 * kGiB,
       "Chrome dies: \"Page crashed!\", \"Protocol error: Target closed\"",
       "https://pptr.dev/troubleshooting#running-puppeteer-in-docker",
       {"image:puppeteer", "image:alekzonder/puppeteer", "image:buildkite/puppeteer", "env:puppeteer_executable_path",
        "token:puppeteer", "pkg:puppeteer", "pkg:pyppeteer"},
       {"cmd:--disable-dev-shm-usage"}},
      // ---- databases -------------------------------------------------------
      // docker-library's example sets shm_size (128mb) "when using
      // docker-compose"; parallel hash joins want work_mem x workers, and
      // 1gb is where Harbor (goharbor/harbor#15034) and Concourse
      // (concourse/concourse#5348) ended up after this error.
      {"PostgreSQL",
       1 * kGiB,
       "parallel queries fail: could not resize shared memory segment \"/PostgreSQL.…\" to N bytes: No space left on "
       "device",
       "https://hub.docker.com/_/postgres",
       {"image:postgres", "image:postgresql", "image:postgresql-repmgr", "image:timescaledb", "image:timescaledb-ha",
        "image:timescaledb-postgis", "image:postgis", "image:pgvector", "image:crunchy-postgres",
        "image:crunchy-postgres-gis", "image:citusdata/citus", "image:apache/age", "image:paradedb/paradedb",
        "image:cloudnative-pg/postgresql", "prog:postgres", "prog:postmaster", "prog:pg_ctl", "prog:pg_ctlcluster",
        "prog:initdb", "env:pgdata", "env:postgres_initdb_args", "env:postgres_initdb_waldir",
        "env:postgres_host_auth_method", "mount:/var/lib/postgresql/data", "mount:/var/lib/pgsql/data",
        // An in-house name ("warehouse-pg") is also the name of tools
        // ("pg_tileserv", "dbt-postgres"): it counts with a sign of a server.
        "?token:postgres", "?token:postgresql", "?token:pg", "?token:pgsql", "?token:postgis", "?token:timescaledb",
        "?token:pgvector", "?token:citus", "?token:spilo", "+env:postgres_password", "+env:postgres_user",
        "+env:postgres_db", "+port:5432", "+health:pg_isready", "-env:postgres_host", "-env:pghost",
        "-env:database_url", "-env:db_host"},
       // Clients and tools named after it, and clients run in its image.
       {"token:exporter",   "token:backup",      "token:backups",   "token:pgadmin",     "token:admin",
        "token:meta",       "token:bouncer",     "token:pgbouncer", "token:proxy",       "token:client",
        "token:cli",        "token:operator",    "token:migrate",   "token:migrations",  "token:migration",
        "token:init",       "token:seed",        "token:dump",      "token:restore",     "token:tools",
        "token:ui",         "token:web",         "token:rest",      "token:metrics",     "token:monitor",
        "token:pgbackrest", "token:backrest",    "token:barman",    "token:walg",        "token:sync",
        "client:psql",      "client:pg_isready", "client:pg_dump",  "client:pg_dumpall", "client:pg_restore",
        "client:pgbench",   "client:vacuumdb",   "client:createdb"}},
      // runOracle.sh: "A database XE container needs at least 1 GB of shared
      // memory (/dev/shm)"; Free/XE may use up to 2 GB of SGA+PGA.
      {"Oracle Database",
       2 * kGiB,
       "the instance does not start: \"ORA-00845: MEMORY_TARGET not supported on this system\"",
       "https://github.com/oracle/docker-images/tree/main/OracleDatabase/SingleInstance",
       {"image:database/free",
        "image:database/express",
        "image:database/enterprise",
        "image:database/standard",
        "image:oracle/database",
        "image:oracle-free",
        "image:oracle-xe",
        "image:oracle-xe-11g",
        "image:oracle-xe-11g-r2",
        "prog:ora_pmon_*",
        "token:oracle+db",
        "token:oracle+database",
        "token:oracle+xe",
        "token:oracle+free",
        "token:oracle+ee",
        "token:oracle+19c",
        "token:oracle+21c",
        "token:oracle+23ai",
        "token:oracle+11g",
        "token:oracle+12c",
        "token:oracle+18c",
        "token:oracle19c",
        "token:oracle21c",
        "token:oracle12c",
        "token:oracle18c",
        "token:oracle11g",
        "token:oracledb",
        "token:oracle-db",
        "token:oradb",
        "env:oracle_pwd",
        "env:oracle_sid",
        "mount:/opt/oracle/oradata",
        "mount:/u01/app/oracle/oradata"},
       {"token:exporter", "token:client", "token:instantclient", "client:sqlplus"}},
      // ---- MPI -------------------------------------------------------------
      // The sm (vader) transport backs every local rank pair with files in
      // /dev/shm.
      {"MPI",
       1 * kGiB,
       "ranks abort: \"not enough space for /dev/shm/vader_segment…\" (Open MPI), or die with \"Bus error\"",
       "https://docs.open-mpi.org/en/v5.0.x/tuning-apps/networking/shared-memory.html",
       {"prog:mpirun", "prog:mpiexec", "prog:mpiexec.hydra", "prog:orterun", "prog:prterun", "prog:horovodrun",
        "cmd:mpirun", "cmd:mpiexec", "cmd:horovodrun", "image:horovod/horovod", "image:horovod/horovod-cpu",
        "image:mpioperator/openmpi", "image:mpioperator/intel", "image:intel/oneapi-hpckit", "image:openmpi",
        "image:mpich", "env:ompi_*", "env:i_mpi_*", "env:horovod_*"},
       {}},
      // ---- ML --------------------------------------------------------------
      // "--ipc=host or --shm-size": tensor parallel workers talk through /dev/shm.
      {"vLLM",
       8 * kGiB,
       "workers die with \"Bus error\" or NCCL's \"Error while creating shared memory segment\"",
       "https://docs.vllm.ai/en/latest/deployment/docker.html",
       {"text:vllm"},
       {}},
      {"SGLang",
       8 * kGiB,
       "workers die with \"Bus error\" or NCCL's \"Error while creating shared memory segment\"",
       "https://docs.sglang.ai/start/install.html",
       {"text:sglang"},
       {}},
      // "--shm-size 1g": sharded models talk through NCCL.
      {"Text Generation Inference",
       1 * kGiB,
       "sharded models fail: \"Error while creating shared memory segment /dev/shm/nccl-…\"",
       "https://huggingface.co/docs/text-generation-inference/quicktour",
       {"image:text-generation-inference", "prog:text-generation-launcher"},
       {}},
      {"NCCL",
       8 * kGiB,
       "\"NCCL WARN Error while creating shared memory segment /dev/shm/nccl-… (size N)\"",
       "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#docker",
       {"text:nccl"},
       {}},
      {"Triton",
       4 * kGiB,
       "the Python backend fails: \"Failed to increase the shared memory pool size\"",
       "https://github.com/triton-inference-server/python_backend#running-multiple-instances-of-triton-server",
       {"text:triton"},
       {}},
      {"Ray",
       4 * kGiB,
       "\"The object store is using /tmp instead of /dev/shm because /dev/shm has only 67108864 bytes available\"",
       "https://docs.ray.io/en/latest/ray-overview/installation.html#launch-ray-in-docker",
       {"word:ray"},
       {}},
      // "--ipc=host or --shm-size command line options to nvidia-docker run"
      {"PyTorch",
       2 * kGiB,
       "DataLoader workers die: \"unexpected bus error encountered in worker. This might be caused by insufficient "
       "shared memory (shm)\"",
       "https://github.com/pytorch/pytorch#docker-image",
       {"text:torch"},
       {"prog:tensorboard"}},
      {"TensorFlow",
       2 * kGiB,
       "input pipeline workers die with \"Bus error\"",
       "https://docs.nvidia.com/deeplearning/frameworks/user-guide/index.html#setincshmem",
       {"text:tensorflow"},
       {"prog:tensorboard"}},
      {"DALI",
       2 * kGiB,
       "parallel external sources fail to allocate their shared memory",
       "https://docs.nvidia.com/deeplearning/frameworks/user-guide/index.html#setincshmem",
       {"text:dali"},
       {}},
      // Notebooks run the DataLoaders; the hub that spawns them does not.
      {"Jupyter",
       1 * kGiB,
       "DataLoader workers in notebooks die with \"Bus error\"",
       "https://github.com/pytorch/pytorch#docker-image",
       {"text:jupyter"},
       {"image:jupyterhub/jupyterhub", "image:jupyterhub/configurable-http-proxy", "image:jupyterhub/k8s-hub"}},
  };
  return kTable;
}

namespace {

// "registry:5000/ns/name:tag@sha256:..." -> "registry:5000/ns/name".
std::string Repository(std::string image) {
  if (size_t at = image.find('@'); at != std::string::npos) image.resize(at);
  size_t slash = image.rfind('/');
  size_t colon = image.rfind(':');
  if (colon != std::string::npos && (slash == std::string::npos || colon > slash)) image.resize(colon);
  return image;
}

bool PrefixOrEqual(const std::string& pattern, const std::string& value) {
  if (pattern.ends_with('*')) return value.starts_with(pattern.substr(0, pattern.size() - 1));
  return value == pattern;
}

bool AnyOf(const std::vector<std::string>& values, const std::string& pattern) {
  return std::any_of(values.begin(), values.end(), [&](const std::string& v) { return PrefixOrEqual(pattern, v); });
}

// The words of an image's repository path, registry host dropped, split at / - _ .
std::vector<std::string> ImageTokens(const std::string& image) {
  std::string repo = Repository(image);
  size_t slash = repo.find('/');
  if (slash != std::string::npos) {
    std::string host = repo.substr(0, slash);
    if (host.find('.') != std::string::npos || host.find(':') != std::string::npos || host == "localhost")
      repo = repo.substr(slash + 1);
  }
  std::vector<std::string> out;
  std::string cur;
  for (char c : repo + "/") {
    if (c == '/' || c == '-' || c == '_' || c == '.') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  return out;
}

bool ImageIs(const std::string& image, const std::string& value) {
  std::string repo = Repository(image);
  return !repo.empty() && (repo == value || repo.ends_with("/" + value));
}

// Every T of "T+U+..." is a word of one of the images.
bool HasTokens(const std::string& image, const std::string& value) {
  if (image.empty()) return false;
  std::vector<std::string> tokens = ImageTokens(image);
  size_t start = 0;
  while (start <= value.size()) {
    size_t plus = value.find('+', start);
    std::string t = value.substr(start, plus == std::string::npos ? std::string::npos : plus - start);
    if (std::find(tokens.begin(), tokens.end(), t) == tokens.end()) return false;
    if (plus == std::string::npos) break;
    start = plus + 1;
  }
  return true;
}

bool UnderPath(const std::string& path, const std::string& dir) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p == dir || p.starts_with(dir + "/");
}

bool Matches(const std::string& pattern, const WorkloadSignals& s) {
  size_t colon = pattern.find(':');
  std::string kind = pattern.substr(0, colon), value = pattern.substr(colon + 1);
  if (kind == "image" || kind == "token") {
    auto one = [&](const std::string& image) {
      return kind == "image" ? ImageIs(image, value) : HasTokens(image, value);
    };
    return one(s.image) || std::any_of(s.base_images.begin(), s.base_images.end(), one);
  }
  if (kind == "prog") return AnyOf(s.programs, value);
  if (kind == "cmd") return AnyOf(s.words, value);
  if (kind == "env") return AnyOf(s.env_keys, value);
  if (kind == "pkg") return AnyOf(s.packages, value);
  if (kind == "port") return AnyOf(s.ports, value);
  if (kind == "health") return AnyOf(s.health_words, value);
  if (kind == "mount") {
    return std::any_of(s.mounts.begin(), s.mounts.end(), [&](const std::string& m) { return UnderPath(m, value); });
  }
  if (kind == "text") return s.text.find(value) != std::string::npos;
  if (kind == "word") {
    for (size_t at = s.text.find(value); at != std::string::npos; at = s.text.find(value, at + 1)) {
      if (at == 0 || !std::isalpha(static_cast<unsigned char>(s.text[at - 1]))) return true;
    }
  }
  return false;
}

// client:NAME of row `w`: NAME runs, and none of the row's programs does.
bool IsClientOnly(const ShmWorkload& w, const std::string& name, const WorkloadSignals& s) {
  if (!AnyOf(s.programs, name)) return false;
  return std::none_of(w.evidence.begin(), w.evidence.end(),
                      [&](const char* p) { return std::string(p).starts_with("prog:") && Matches(p, s); });
}

}  // namespace

std::vector<const ShmWorkload*> MatchShmWorkloads(const WorkloadSignals& s) {
  std::vector<const ShmWorkload*> out;
  for (const ShmWorkload& w : ShmWorkloads()) {
    // Plain patterns suffice; "?" ones need a "+" one and no "-" one.
    bool strong = false, weak = false, support = false, against = false;
    for (const char* p : w.evidence) {
      char c = p[0];
      bool prefixed = c == '?' || c == '+' || c == '-';
      if (!Matches(prefixed ? p + 1 : p, s)) continue;
      strong = strong || !prefixed;
      weak = weak || c == '?';
      support = support || c == '+';
      against = against || c == '-';
    }
    if (!strong && !(weak && support && !against)) continue;
    auto stops = [&](const char* p) {
      std::string pattern = p;
      return pattern.starts_with("client:") ? IsClientOnly(w, pattern.substr(7), s) : Matches(pattern, s);
    };
    if (std::none_of(w.unless.begin(), w.unless.end(), stops)) out.push_back(&w);
  }
  return out;
}

void AddCommandWords(const std::string& text, bool program, WorkloadSignals* s) {
  static constexpr std::string_view kSeparators = " \t\r\n'\"`;&|()<>=,";
  size_t i = 0;
  bool first = true;
  while (i < text.size() && s->words.size() < 4096) {
    i = text.find_first_not_of(kSeparators, i);
    if (i == std::string::npos) break;
    size_t end = text.find_first_of(kSeparators, i);
    std::string word = text.substr(i, end == std::string::npos ? std::string::npos : end - i);
    i = end == std::string::npos ? text.size() : end;
    if (!word.starts_with("-") && word.find('/') != std::string::npos) word = word.substr(word.rfind('/') + 1);
    for (char& c : word) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (word.empty()) continue;
    if (program && first) {
      std::string prog = word;
      while (!prog.empty() && prog.back() == ':') prog.pop_back();
      s->programs.push_back(prog);
    }
    first = false;
    s->words.push_back(std::move(word));
  }
}

namespace {

constexpr size_t kMaxWords = 4096;
constexpr int kMaxShellDepth = 4;

std::string LowerBase(std::string word) {
  if (!word.starts_with("-") && word.find('/') != std::string::npos) word = word.substr(word.rfind('/') + 1);
  for (char& c : word) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  while (!word.empty() && word.back() == ':') word.pop_back();
  return word;
}

bool IsShell(const std::string& prog) {
  static const std::set<std::string> kShells = {"sh", "bash", "dash", "ash", "zsh", "ksh", "busybox"};
  return kShells.count(prog) > 0;
}

bool IsOperator(const std::string& w) {
  return w == "&&" || w == "||" || w == ";" || w == "|" || w == "&" || w == "\n" || w == ";;";
}

// Shell words that start a command's place again: keywords and grouping.
bool IsKeyword(const std::string& w) {
  static const std::set<std::string> kKeywords = {"if",    "then",  "else", "elif", "fi", "do", "done",
                                                  "while", "until", "!",    "{",    "}",  "(",  ")",
                                                  "time",  "case",  "esac", "for",  "in"};
  return kKeywords.count(w) > 0;
}

void AddScript(const std::string& text, WorkloadSignals* s, int depth);

// The program argv runs, through wrappers; shells' -c scripts recursively.
void AddProgramOf(const std::vector<std::string>& argv, WorkloadSignals* s, int depth) {
  size_t i = 0;
  while (i < argv.size() && s->programs.size() < kMaxWords) {
    const std::string& raw = argv[i];
    if (raw.find('=') != std::string::npos && raw.find('/') == std::string::npos && !raw.starts_with("-")) {
      ++i;  // VAR=value before the program
      continue;
    }
    std::string prog = LowerBase(raw);
    if (prog.empty() || IsKeyword(prog)) {
      ++i;
      continue;
    }
    if (prog == "exec" || prog == "nohup" || prog == "time" || prog == "command" || prog == "sudo" || prog == "tini" ||
        prog == "dumb-init" || prog == "catatonit" || prog == "env" || prog == "nice" || prog == "ionice" ||
        prog == "stdbuf" || prog == "setsid" || prog == "xvfb-run" || prog == "--") {
      ++i;  // the wrapper's own -flags follow, then the program
      while (i < argv.size() && argv[i].starts_with("-") && argv[i] != "--") ++i;
      if (i < argv.size() && argv[i] == "--") ++i;
      continue;
    }
    if (prog == "gosu" || prog == "su-exec" || prog == "chpst" || prog == "runuser" || prog == "s6-setuidgid") {
      i += 2;  // the user, then the program
      while (i < argv.size() && argv[i].starts_with("-")) ++i;
      continue;
    }
    s->programs.push_back(prog);
    if (IsShell(prog) || prog == "su") {
      // sh -c SCRIPT, bash -ec SCRIPT, su postgres -c SCRIPT, busybox sh -c
      for (size_t j = i + 1; j < argv.size(); ++j) {
        const std::string& a = argv[j];
        if (a.starts_with("-") && !a.starts_with("--") && a.find('c') != std::string::npos && j + 1 < argv.size()) {
          if (depth < kMaxShellDepth) AddScript(argv[j + 1], s, depth + 1);
          break;
        }
        if (prog == "busybox" && j == i + 1 && IsShell(LowerBase(a))) continue;
        if (!a.starts_with("-") && prog != "su") break;  // sh script.sh: the script is the program
      }
      if (i + 1 < argv.size() && !argv[i + 1].starts_with("-") && IsShell(prog) && prog != "busybox")
        s->programs.push_back(LowerBase(argv[i + 1]));  // sh /start.sh
    } else if (prog.find("entrypoint") != std::string::npos && i + 1 < argv.size() && !argv[i + 1].starts_with("-") &&
               depth < kMaxShellDepth) {
      // docker-entrypoint.sh postgres -c ...: the script execs its arguments.
      AddProgramOf(std::vector<std::string>(argv.begin() + static_cast<long>(i) + 1, argv.end()), s, depth + 1);
    }
    // wait-for-it.sh db:5432 -- postgres: the program after "--" runs too.
    for (size_t j = i + 1; j < argv.size(); ++j) {
      if (argv[j] == "--" && j + 1 < argv.size() && depth < kMaxShellDepth && !IsShell(prog)) {
        AddProgramOf(std::vector<std::string>(argv.begin() + static_cast<long>(j) + 1, argv.end()), s, depth + 1);
        break;
      }
    }
    return;
  }
}

void AddWords(const std::vector<std::string>& words, WorkloadSignals* s) {
  for (const std::string& w : words) {
    if (s->words.size() >= kMaxWords) return;
    AddCommandWords(w, false, s);
  }
}

void AddScript(const std::string& text, WorkloadSignals* s, int depth) {
  std::vector<std::string> words = ShellWords(text, true);
  std::vector<std::string> cmd;
  auto flush = [&] {
    if (!cmd.empty()) AddProgramOf(cmd, s, depth);
    cmd.clear();
  };
  for (const std::string& w : words) {
    if (IsOperator(w)) {
      flush();
    } else if (cmd.empty() && IsKeyword(w)) {
      continue;
    } else {
      cmd.push_back(w);
    }
  }
  flush();
  AddWords(words, s);
}

}  // namespace

std::vector<std::string> ShellWords(const std::string& text, bool operators) {
  std::vector<std::string> out;
  std::string cur;
  bool in_word = false;
  auto end_word = [&] {
    if (in_word) out.push_back(cur);
    cur.clear();
    in_word = false;
  };
  for (size_t i = 0; i < text.size() && out.size() < kMaxWords; ++i) {
    char c = text[i];
    if (c == '\\' && i + 1 < text.size()) {
      if (text[i + 1] != '\n') cur += text[i + 1];
      in_word = in_word || text[i + 1] != '\n';
      ++i;
    } else if (c == '\'') {
      size_t close = text.find('\'', i + 1);
      if (close == std::string::npos) close = text.size();
      cur += text.substr(i + 1, close - i - 1);
      in_word = true;
      i = close;
    } else if (c == '"') {
      ++i;
      while (i < text.size() && text[i] != '"') {
        if (text[i] == '\\' && i + 1 < text.size() &&
            std::string_view("\"\\$`\n").find(text[i + 1]) != std::string::npos)
          ++i;
        cur += text[i++];
      }
      in_word = true;
    } else if (c == '#' && !in_word && operators) {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;  // a comment
    } else if (operators && (c == '&' || c == '|' || c == ';' || c == '\n' || c == '(' || c == ')')) {
      end_word();
      std::string op(1, c);
      if ((c == '&' || c == '|' || c == ';') && i + 1 < text.size() && text[i + 1] == c) op += text[++i];
      if (c == '(' || c == ')') op = ";";  // a subshell or $( ... ): its commands are commands too
      out.push_back(op);
    } else if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      end_word();
    } else {
      cur += c;
      in_word = true;
    }
  }
  end_word();
  return out;
}

void AddArgv(const std::vector<std::string>& argv, WorkloadSignals* s) {
  AddProgramOf(argv, s, 0);
  AddWords(argv, s);
}

void AddShellScript(const std::string& text, WorkloadSignals* s) { AddScript(text, s, 0); }

}  // namespace shmkeeper
