// The table of workloads.h: the workloads known to outgrow a 64 MiB
// /dev/shm, each with the page that recommends its size and the signs a
// container shows of it (matched in workloads.cc).
#include "base/bytes.h"
#include "decide/workloads.h"

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
        "cmd:playwright", "env:playwright_browsers_path", "token:playwright", "env:playwright_*", "pkg:playwright",
        "pkg:playwright-browsers", "pkg:@playwright/test", "pkg:playwright-chromium", "pkg:playwright-firefox"},
       {"env:pw_test_connect_ws_endpoint", "env:playwright_ws_endpoint", "env:browser_ws_endpoint",
        "env:browserless_*"}},
      // "run the container with docker run --shm-size=1gb to increase the size of /dev/shm"
      {"Puppeteer",
       1 * kGiB,
       "Chrome dies: \"Page crashed!\", \"Protocol error: Target closed\"",
       "https://pptr.dev/troubleshooting#running-puppeteer-in-docker",
       {"image:puppeteer", "image:alekzonder/puppeteer", "image:buildkite/puppeteer", "env:puppeteer_*",
        "token:puppeteer", "pkg:puppeteer", "pkg:pyppeteer"},
       // A client of a remote browser (browserless, a Chrome's DevTools endpoint) runs none.
       {"cmd:--disable-dev-shm-usage", "env:browser_ws_endpoint", "env:puppeteer_browser_ws_endpoint",
        "env:browser_url", "env:browserless_*"}},
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
        "env:postgres_host_auth_method",
        // A data path is a sign only with a server's (a data-only busybox mounts it too).
        "?mount:/var/lib/postgresql", "?mount:/var/lib/pgsql",
        // An in-house name ("warehouse-pg") is also the name of tools
        // ("pg_tileserv", "dbt-postgres"): it counts with a sign of a server.
        "?token:postgres", "?token:postgresql", "?token:pg", "?token:pgsql", "?token:postgis", "?token:timescaledb",
        "?token:pgvector", "?token:citus", "?token:spilo",
        // The tag names the server where the repository does not ("docker:postgres-17.9-postgis-3.6.2").
        "?tag:postgres", "?tag:postgresql", "?tag:postgis",
        // The data path supports an in-house server's name ("sameersbn-postgresql" at /var/lib/postgresql).
        "+mount:/var/lib/postgresql", "+mount:/var/lib/pgsql", "+env:postgres_password", "+env:postgres_user",
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
        "?mount:/opt/oracle/oradata",
        "?mount:/u01/app/oracle/oradata",
        "+port:1521"},
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
        "image:mpich", "env:ompi_*", "env:i_mpi_*", "env:horovod_*",
        // An image that installs an MPI runtime runs ranks.
        "pkg:openmpi-bin", "pkg:libopenmpi-dev", "pkg:openmpi", "pkg:openmpi-devel", "pkg:mpich", "pkg:libmpich-dev",
        "pkg:mpich-devel", "pkg:mpi4py"},
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
       // Words, not substrings, and never the image's tag ("vectorchord0.4.3").
       {"word:torch", "word:pytorch", "word:libtorch", "pkg:torch"},
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

}  // namespace shmkeeper
