#include "decide/workloads.h"

#include <algorithm>
#include <cctype>

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
        "env:chrome_path"},
       // Chrome then keeps its shared memory in /tmp.
       {"cmd:--disable-dev-shm-usage"}},
      {"Firefox",
       2 * kGiB,
       "tabs crash: \"Failed to decode response from marionette\", \"Tab crashed\"",
       "https://github.com/SeleniumHQ/docker-selenium#--shm-size2g",
       {"image:selenium/node-firefox", "image:selenium/standalone-firefox", "image:selenium/node-firefox-debug",
        "image:selenium/standalone-firefox-debug", "image:seleniarm/node-firefox", "image:seleniarm/standalone-firefox",
        "image:jlesage/firefox", "prog:firefox", "prog:firefox-esr", "cmd:geckodriver"},
       {}},
      // Playwright's page asks for --ipc=host ("Chrome can run out of memory
      // without this flag"); shm_size gives the browsers the same room
      // without the host's IPC namespace. 2gb as for Selenium.
      {"Playwright",
       2 * kGiB,
       "browsers crash mid-test: \"Target crashed\", \"Page crashed\"",
       "https://playwright.dev/docs/docker",
       {"image:playwright", "image:playwright/python", "image:playwright/java", "image:playwright/dotnet",
        "cmd:playwright", "env:playwright_browsers_path"},
       {}},
      // "run the container with docker run --shm-size=1gb to increase the size of /dev/shm"
      {"Puppeteer",
       1 * kGiB,
       "Chrome dies: \"Page crashed!\", \"Protocol error: Target closed\"",
       "https://pptr.dev/troubleshooting#running-puppeteer-in-docker",
       {"image:puppeteer", "image:alekzonder/puppeteer", "image:buildkite/puppeteer", "env:puppeteer_executable_path"},
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
        "image:cloudnative-pg/postgresql", "prog:postgres", "prog:postmaster", "env:pgdata"},
       {}},
      // runOracle.sh: "A database XE container needs at least 1 GB of shared
      // memory (/dev/shm)"; Free/XE may use up to 2 GB of SGA+PGA.
      {"Oracle Database",
       2 * kGiB,
       "the instance does not start: \"ORA-00845: MEMORY_TARGET not supported on this system\"",
       "https://github.com/oracle/docker-images/tree/main/OracleDatabase/SingleInstance",
       {"image:database/free", "image:database/express", "image:database/enterprise", "image:database/standard",
        "image:oracle/database", "image:oracle-free", "image:oracle-xe", "image:oracle-xe-11g",
        "image:oracle-xe-11g-r2", "prog:ora_pmon_*"},
       {}},
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
       {}},
      {"TensorFlow",
       2 * kGiB,
       "input pipeline workers die with \"Bus error\"",
       "https://docs.nvidia.com/deeplearning/frameworks/user-guide/index.html#setincshmem",
       {"text:tensorflow"},
       {}},
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

bool Matches(const std::string& pattern, const WorkloadSignals& s) {
  size_t colon = pattern.find(':');
  std::string kind = pattern.substr(0, colon), value = pattern.substr(colon + 1);
  if (kind == "image") {
    std::string repo = Repository(s.image);
    return !repo.empty() && (repo == value || repo.ends_with("/" + value));
  }
  if (kind == "prog") return AnyOf(s.programs, value);
  if (kind == "cmd") return AnyOf(s.words, value);
  if (kind == "env") return AnyOf(s.env_keys, value);
  if (kind == "text") return s.text.find(value) != std::string::npos;
  if (kind == "word") {
    for (size_t at = s.text.find(value); at != std::string::npos; at = s.text.find(value, at + 1)) {
      if (at == 0 || !std::isalpha(static_cast<unsigned char>(s.text[at - 1]))) return true;
    }
  }
  return false;
}

}  // namespace

std::vector<const ShmWorkload*> MatchShmWorkloads(const WorkloadSignals& s) {
  std::vector<const ShmWorkload*> out;
  for (const ShmWorkload& w : ShmWorkloads()) {
    auto hit = [&](const char* p) { return Matches(p, s); };
    if (std::any_of(w.evidence.begin(), w.evidence.end(), hit) && std::none_of(w.unless.begin(), w.unless.end(), hit))
      out.push_back(&w);
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

}  // namespace shmkeeper
