#include "compose/compose.h"

#include <gtest/gtest.h>

#include <cerrno>

#include "base/bytes.h"
#include "decide/workloads.h"

namespace shmkeeper {
namespace {

TEST(Compose, Interpolate) {
  std::map<std::string, std::string> env = {{"SET", "4gb"}, {"EMPTY", ""}};
  struct Case {
    const char* in;
    const char* out;
  } cases[] = {
      {"${SET}", "4gb"},      {"$SET", "4gb"},       {"${UNSET:-2gb}", "2gb"}, {"${EMPTY:-2gb}", "2gb"},
      {"${EMPTY-2gb}", ""},   {"${UNSET-1g}", "1g"}, {"$$SET", "$SET"},        {"plain", "plain"},
      {"${SET:-x}b", "4gbb"}, {"${UNSET}", ""},
  };
  for (const Case& c : cases) {
    Result<std::string> r = Interpolate(c.in, env);
    ASSERT_TRUE(r.ok()) << c.in;
    EXPECT_EQ(*r, c.out) << c.in;
  }
  EXPECT_FALSE(Interpolate("${UNCLOSED", env).ok());
  EXPECT_FALSE(Interpolate("${}", env).ok());
}

// shm_size strings as each docker-compose reads them: v1 (docker-compose
// 1.29 -> docker-py utils.parse_bytes: Python float() of what precedes one
// unit letter b/k/m/g, a "b" after another letter dropped) and v2 (compose-go
// -> go-units v0.5.0 RAMInBytes: a Go float ending at the last digit, '.' or
// space, then b or k/m/g/t/p with optional "b"/"ib"). -1: refused.
// tests/integration/test_compose.py checks the v1 column against docker-py.
TEST(Compose, SizeGrammarsOfComposeV1AndV2) {
  constexpr int64_t K = 1024, M = K * K, G = M * K, T = G * K;
  struct Case {
    const char* text;
    int64_t v1, v2;
  } cases[] = {
      {"2gb", 2 * G, 2 * G},
      {"2GB", 2 * G, 2 * G},
      {"2 GB", 2 * G, 2 * G},
      {"2 g", 2 * G, 2 * G},
      {"512m", 512 * M, 512 * M},
      {"512M", 512 * M, 512 * M},
      {"64mb", 64 * M, 64 * M},
      {"1024", 1024, 1024},
      {"1k", K, K},
      {"100b", 100, 100},
      {"100 b", 100, 100},
      {"10.24gb", 10995116277, 10995116277},
      {"1.5g", 3 * G / 2, 3 * G / 2},
      {".5g", G / 2, G / 2},
      {"1.g", G, G},
      {"0", 0, 0},
      {"2GiB", -1, 2 * G},
      {"2gib", -1, 2 * G},
      {"1t", -1, T},
      {"2tb", -1, 2 * T},
      {"1p", -1, K * T},
      {"1e3", 1000, 1000},
      {"1e3m", 1000 * M, 1000 * M},
      {"+2g", 2 * G, 2 * G},
      {" 2g", 2 * G, -1},
      {"2  g", 2 * G, -1},
      {"2g ", -1, -1},
      {"2\tg", 2 * G, -1},
      {"1_000m", 1000 * M, -1},
      {"2bb", 2, -1},
      {"2kb", 2 * K, 2 * K},
      {"2kib", -1, 2 * K},
      {"-1g", -1, -1},
      {"", -1, -1},
      {"g", -1, -1},
      {"gb", -1, -1},
      {"lots", -1, -1},
      {"2Gi", -1, -1},
      {"2 gigabytes", -1, -1},
      {"inf", -1, -1},
      {"nan", -1, -1},
      {"1.2.3g", -1, -1},
      {"0x10", -1, -1},
      {"2x", -1, -1},
      {"1e", -1, -1},
      {"2 ", -1, 2},
      {"1e999g", -1, -1},
      {"9999999999999g", -1, -1},
  };
  for (const Case& c : cases) {
    Result<int64_t> v1 = ParseComposeV1Size(c.text), v2 = ParseComposeV2Size(c.text);
    EXPECT_EQ(v1.ok() ? *v1 : -1, c.v1) << "v1 \"" << c.text << "\"";
    EXPECT_EQ(v2.ok() ? *v2 : -1, c.v2) << "v2 \"" << c.text << "\"";
    EXPECT_EQ(IsComposeSize(c.text), c.v1 >= 0 || c.v2 >= 0) << c.text;
  }
}

// A size docker-compose accepts is never flagged or rewritten; an explicit
// size below what the workload needs is, and the fix says so.
TEST(Compose, AcceptedSizesStayExplicitSmallOnesAreJudged) {
  std::string text =
      "services:\n"
      "  db:\n"
      "    image: postgres:16\n"
      "    shm_size: \"2 GB\"\n"
      "  ff:\n"
      "    image: selenium/node-firefox:4.21.0\n"
      "    shm_size: 64m\n"
      "  trainer:\n"
      "    image: pytorch/pytorch\n"
      "    command: python train.py --num-workers 8\n"
      "    shm_size: 512m\n"
      "  small:\n"
      "    image: pytorch/pytorch\n"
      "    command: python train.py --num-workers 2\n"
      "    shm_size: 512m\n";
  Result<ComposeFix> fix = FixComposeText("c.yml", text, "");
  ASSERT_TRUE(fix.ok()) << fix.status().message();
  EXPECT_NE(fix->fixed.find("    shm_size: \"2 GB\"\n"), std::string::npos);
  EXPECT_NE(fix->fixed.find("  ff:\n    image: selenium/node-firefox:4.21.0\n    shm_size: \"2gb\"\n"),
            std::string::npos);
  EXPECT_NE(fix->fixed.find("--num-workers 8\n    shm_size: \"4gb\"\n"), std::string::npos);
  EXPECT_NE(fix->fixed.find("--num-workers 2\n    shm_size: 512m\n"), std::string::npos);
  EXPECT_EQ(fix->changes.size(), 2u);
}

TEST(Compose, FixInMemoryIsSurgical) {
  std::string text =
      "# keep me\n"
      "services:\n"
      "  a:   # the trainer\n"
      "    image: pytorch/pytorch\n"
      "\n"
      "  b:\n"
      "    image: nginx\n";
  Result<ComposeFix> fix = FixComposeText("c.yml", text, "");
  ASSERT_TRUE(fix.ok()) << fix.status().message();
  EXPECT_EQ(fix->fixed,
            "# keep me\n"
            "services:\n"
            "  a:   # the trainer\n"
            "    shm_size: \"2gb\"\n"
            "    image: pytorch/pytorch\n"
            "\n"
            "  b:\n"
            "    image: nginx\n");
  ASSERT_EQ(fix->changes.size(), 1u);
}

TEST(Compose, FlowStyleServiceIsReportedNotRewritten) {
  Result<ComposeFix> fix = FixComposeText("c.yml", "services:\n  a: {image: pytorch/pytorch}\n", "");
  ASSERT_TRUE(fix.ok());
  EXPECT_EQ(fix->fixed, fix->original);
  ASSERT_EQ(fix->skipped.size(), 1u);
  EXPECT_NE(fix->skipped[0].find("add shm_size by hand"), std::string::npos);
}

TEST(Compose, ErrorsNameFileAndLine) {
  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"services:\n  a:\n    image: [x\n", "c.yml:"},
      {"services:\n  a:\n    x: 1\n    x: 2\n", "c.yml:4:5: duplicate key 'x'"},
      {"[1, 2]\n", "c.yml:1:1: a compose file must be a mapping"},
      {"services: 3\n", "'services' must be a mapping"},
  };
  for (const Case& c : cases) {
    Result<ComposeFix> fix = FixComposeText("c.yml", c.text, "");
    ASSERT_FALSE(fix.ok()) << c.text;
    EXPECT_NE(fix.status().message().find(c.expect), std::string::npos) << fix.status().message();
  }
}

// The workload names a container or process with `image` running `command` shows.
std::vector<std::string> Names(const std::string& image, const std::string& command,
                               std::vector<std::string> env_keys = {}) {
  WorkloadSignals s;
  s.image = image;
  AddCommandWords(command, true, &s);
  s.env_keys = std::move(env_keys);
  s.text = image + " " + command;
  std::vector<std::string> out;
  for (const ShmWorkload* w : MatchShmWorkloads(s)) out.push_back(w->name);
  return out;
}

TEST(Workloads, EveryRowHasASizeASymptomAndASource) {
  for (const ShmWorkload& w : ShmWorkloads()) {
    EXPECT_GE(w.bytes, 1 * kGiB) << w.name;
    EXPECT_GT(std::string(w.symptom).size(), 10u) << w.name;
    EXPECT_TRUE(std::string(w.source).starts_with("https://")) << w.name;
    EXPECT_FALSE(w.evidence.empty()) << w.name;
    for (const char* p : w.evidence) EXPECT_NE(std::string(p).find(':'), std::string::npos) << p;
  }
}

TEST(Workloads, ImagesMatchTheRepositoryNotSubstrings) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Names("postgres:16", ""), V{"PostgreSQL"});
  EXPECT_EQ(Names("localhost:5000/library/postgres", ""), V{"PostgreSQL"});
  EXPECT_EQ(Names("postgres@sha256:0123", ""), V{"PostgreSQL"});
  EXPECT_EQ(Names("docker.io/bitnami/postgresql:16", ""), V{"PostgreSQL"});
  EXPECT_EQ(Names("timescale/timescaledb-ha:pg16", ""), V{"PostgreSQL"});
  EXPECT_EQ(Names("selenium/node-chrome:4.21.0", ""), V{"Chrome/Chromium"});
  EXPECT_EQ(Names("mcr.microsoft.com/playwright/python:v1.44.0", ""), V{"Playwright"});
  EXPECT_EQ(Names("container-registry.oracle.com/database/free:latest", ""), V{"Oracle Database"});
  for (const char* none : {"prometheuscommunity/postgres-exporter", "supabase/postgres-meta:v0.80.0",
                           "postgrest/postgrest", "dpage/pgadmin4", "selenium/hub:4.21.0", "nginx:1.27", "redis:7",
                           "node:20", "prodrigestivill/postgres-backup-local:16"}) {
    EXPECT_EQ(Names(none, ""), V{}) << none;
  }
}

TEST(Workloads, CommandsAndProcesses) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Names("", "sh -c 'npx playwright test --project=chromium'"), V{"Playwright"});
  EXPECT_EQ(Names("", "mpirun -np 8 ./solver"), V{"MPI"});
  EXPECT_EQ(Names("", "postgres: checkpointer"), V{"PostgreSQL"});  // a process title
  EXPECT_EQ(Names("", "/opt/google/chrome/chrome --type=renderer"), V{"Chrome/Chromium"});
  EXPECT_EQ(Names("", "chromium --headless --disable-dev-shm-usage"), V{});  // Chrome keeps it in /tmp then
  EXPECT_EQ(Names("", "wait-for-it postgres:5432 -- npm start"), V{});       // an argument, not the program
  EXPECT_EQ(Names("", "ray start --head"), V{"Ray"});
  EXPECT_EQ(Names("", "node export-array.js"), V{});
  EXPECT_EQ(Names("", "python app.py", {"ompi_allow_run_as_root"}), V{"MPI"});
  EXPECT_EQ(Names("", "python app.py", {"pgdata"}), V{"PostgreSQL"});
}

TEST(Compose, HostShmBindIsReplacedByShmSize) {
  std::string text =
      "services:\n"
      "  chrome:\n"
      "    image: selenium/standalone-chrome\n"
      "    volumes:\n"
      "      - ./dl:/home/seluser/Downloads\n"
      "      - /dev/shm:/dev/shm  # crashed otherwise\n"
      "  pg:\n"
      "    image: postgres:16\n"
      "    volumes:\n"
      "      - type: bind\n"
      "        source: /dev/shm\n"
      "        target: /dev/shm\n"
      "    ipc: private\n"
      "  ray:\n"
      "    image: rayproject/ray\n"
      "    ipc: host   # for the object store\n";
  Result<ComposeFix> fix = FixComposeText("c.yml", text, "");
  ASSERT_TRUE(fix.ok()) << fix.status().message();
  EXPECT_EQ(fix->fixed,
            "services:\n"
            "  chrome:\n"
            "    shm_size: \"2gb\"\n"
            "    image: selenium/standalone-chrome\n"
            "    volumes:\n"
            "      - ./dl:/home/seluser/Downloads\n"
            "  pg:\n"
            "    shm_size: \"1gb\"\n"
            "    image: postgres:16\n"
            "    ipc: private\n"
            "  ray:\n"
            "    image: rayproject/ray\n"
            "    shm_size: \"4gb\"   # for the object store\n");
  EXPECT_EQ(fix->changes.size(), 3u);
  EXPECT_TRUE(fix->skipped.empty());
}

TEST(Compose, SharedVolumeListsWithAHostBindAreReportedNotRewritten) {
  // Deleting from an anchored list would change every service that uses it.
  std::string text =
      "x-vols: &vols\n"
      "  - /dev/shm:/dev/shm\n"
      "services:\n"
      "  a:\n"
      "    image: postgres:16\n"
      "    volumes: *vols\n"
      "  b:\n"
      "    image: postgres:16\n"
      "    volumes: *vols\n";
  Result<ComposeFix> fix = FixComposeText("c.yml", text, "");
  ASSERT_TRUE(fix.ok());
  EXPECT_EQ(fix->fixed, fix->original);
  EXPECT_EQ(fix->skipped.size(), 1u);  // one place, said once for both services
}

TEST(Compose, FlowVolumesWithAHostBindAreReportedNotRewritten) {
  Result<ComposeFix> fix =
      FixComposeText("c.yml", "services:\n  a:\n    image: x\n    volumes: [\"/dev/shm:/dev/shm\"]\n", "");
  ASSERT_TRUE(fix.ok());
  EXPECT_EQ(fix->fixed, fix->original);
  ASSERT_EQ(fix->skipped.size(), 1u);
  EXPECT_NE(fix->skipped[0].find("by hand"), std::string::npos);
}

// The injected reader sees every read: compose files, `extends` files, .env
// and Dockerfiles (the latter two only with read_side_files).
TEST(Compose, InjectedReaderServesEveryRead) {
  std::map<std::string, std::string> files = {
      {"p/compose.yml", "services:\n  a:\n    extends: {file: base.yml, service: b}\n    shm_size: ${SZ}\n"},
      {"p/base.yml", "services:\n  b:\n    image: pytorch/pytorch\n    build: .\n"},
      {"p/.env", "SZ=1m\n"},
      {"p/./Dockerfile", "FROM python:3.11\nRUN pip install torch && pytest\n"},
  };
  std::vector<std::string> read;
  ComposeCheckOptions o;
  o.files = {"p/compose.yml"};
  o.read_file = [&](const std::string& path, size_t) -> Result<std::string> {
    read.push_back(path);
    auto it = files.find(path);
    if (it == files.end()) return Status::NotFound(path + ": not found");
    return it->second;
  };
  Result<ComposeReport> r = CheckCompose(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::vector<std::string> codes;
  for (const ComposeFinding& f : r->findings) codes.push_back(FindingCodeName(f.code));
  EXPECT_EQ(codes, (std::vector<std::string>{"build-shm-size", "size-too-small"}));  // by file, then line
  // package.json too (issue 39: a browser package in the build context is a sign); absent here.
  EXPECT_EQ(read,
            (std::vector<std::string>{"p/.env", "p/compose.yml", "p/base.yml", "p/./Dockerfile", "p/./package.json"}));

  o.read_side_files = false;
  read.clear();
  r = CheckCompose(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->findings.size(), 1u);
  EXPECT_EQ(r->findings[0].code, FindingCode::kInvalidSize);  // ${SZ} unset without .env: ""
  EXPECT_EQ(read, (std::vector<std::string>{"p/compose.yml", "p/base.yml"}));
}

// A reader's kInvalidArgument without errno is "too large", told by code, not by text.
TEST(Compose, ReaderTooLargeIsToldByStatusCode) {
  ComposeCheckOptions o;
  o.files = {"c.yml"};
  o.read_file = [](const std::string&, size_t) -> Result<std::string> { return Status::Invalid("no reason given"); };
  Result<ComposeReport> r = CheckCompose(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "c.yml: larger than 4 MiB");
  o.read_file = [](const std::string&, size_t) -> Result<std::string> {
    return Status::FromErrno(EACCES, "open c.yml");
  };
  r = CheckCompose(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "c.yml: open c.yml: Permission denied");
}

}  // namespace
}  // namespace shmkeeper

namespace shmkeeper {
namespace {

// The workload names the argv `argv` run in `image` shows, as compose sees a service.
std::vector<std::string> ArgvNames(const std::string& image, const std::vector<std::string>& argv,
                                   std::vector<std::string> env_keys = {}, std::vector<std::string> ports = {}) {
  WorkloadSignals s;
  s.image = image;
  s.env_keys = std::move(env_keys);
  s.ports = std::move(ports);
  AddArgv(argv, &s);
  std::vector<std::string> out;
  for (const ShmWorkload* w : MatchShmWorkloads(s)) out.push_back(w->name);
  return out;
}

TEST(Workloads, ThroughShellsWrappersAndScripts) {
  using V = std::vector<std::string>;
  V pg = {"PostgreSQL"}, chrome = {"Chrome/Chromium"}, none = {};
  EXPECT_EQ(ArgvNames("debian:12", {"bash", "-c", "initdb -D /d && exec postgres -D /d"}), pg);
  EXPECT_EQ(ArgvNames("debian:12", ShellWords("bash -c \"initdb -D /d && exec postgres -D /d\"", false)), pg);
  EXPECT_EQ(ArgvNames("debian:12", {"sh", "-ec", "pg_ctl -D /d start; tail -f /dev/null"}), pg);
  EXPECT_EQ(ArgvNames("debian:12", {"/usr/lib/postgresql/15/bin/postgres", "-D", "/d"}), pg);
  EXPECT_EQ(ArgvNames("x", {"gosu", "postgres", "postgres", "-c", "max_connections=200"}), pg);
  EXPECT_EQ(ArgvNames("x", {"su", "postgres", "-c", "FOO=1 /usr/lib/postgresql/15/bin/pg_ctl start"}), pg);
  EXPECT_EQ(ArgvNames("x", {"tini", "--", "docker-entrypoint.sh", "postgres"}), pg);
  EXPECT_EQ(ArgvNames("x", {"./wait-for-it.sh", "db:5432", "--", "postgres"}), pg);
  EXPECT_EQ(ArgvNames("node:20", {"sh", "-c", "/usr/lib/chromium/chromium --headless http://x"}), chrome);
  EXPECT_EQ(ArgvNames("node:20", {"sh", "-c", "xvfb-run -a google-chrome --no-sandbox"}), chrome);
  EXPECT_EQ(ArgvNames("x", {"firefox", "--headless"}), V{"Firefox"});
  // Not the program: arguments, URLs, a client of the database in its image.
  EXPECT_EQ(ArgvNames("node:20", {"sh", "-c", "wait-for-it postgres:5432 -- npm start"}), none);
  EXPECT_EQ(ArgvNames("postgres:16", {"sh", "-c", "until pg_isready -h db; do sleep 1; done; psql -h db -f x.sql"}),
            none);
  EXPECT_EQ(ArgvNames("postgres:16", {"docker-entrypoint.sh", "postgres"}), pg);
  EXPECT_EQ(ArgvNames("postgres:16", {"bash", "-c", "postgres & sleep 3; psql -c 'select 1'; wait"}), pg);
  EXPECT_EQ(ArgvNames("tensorflow/tensorflow:2.14.0", {"tensorboard", "--logdir", "/logs"}), none);
}

TEST(Workloads, InHouseImageNames) {
  using V = std::vector<std::string>;
  V pg = {"PostgreSQL"}, none = {};
  // A database's name in an image counts with a sign of the server (its env, port, health check).
  EXPECT_EQ(ArgvNames("registry.example.internal/data/warehouse-pg:15.6", {}, {"postgres_password"}), pg);
  EXPECT_EQ(ArgvNames("ghcr.io/acme/postgres-custom:16", {}, {}, {"5432"}), pg);
  EXPECT_EQ(ArgvNames("acme/timescaledb-ha-ext", {}, {"postgres_db"}), pg);
  EXPECT_EQ(ArgvNames("registry.example.internal/data/warehouse-pg:15.6", {}), none);
  EXPECT_EQ(ArgvNames("pramsey/pg_tileserv", {}, {"database_url"}, {"7800"}), none);
  EXPECT_EQ(ArgvNames("ghcr.io/dbt-labs/dbt-postgres:1.7", {}, {"postgres_password", "postgres_host"}), none);
  EXPECT_EQ(ArgvNames("registry.acme.io/qa/e2e-chrome:1", {}), V{"Chrome/Chromium"});
  EXPECT_EQ(ArgvNames("registry.acme.io/db/oracle-xe-custom:21", {}), V{"Oracle Database"});
  for (const char* n :
       {"acme/postgres-exporter", "acme/pg-backup:1", "acme/pgadmin", "acme/postgres-init", "oracle/graalvm-ce",
        "acme/oracle-instantclient", "acme/apg", "acme/api", "acme/pgbouncer", "acme/chrome-extension-builder"}) {
    EXPECT_EQ(ArgvNames(n, {}), none) << n;
  }
}

TEST(Workloads, ShellWordsSplitAsShlex) {
  using V = std::vector<std::string>;
  EXPECT_EQ(ShellWords("bash -c \"a && exec b 'c d'\"", false), (V{"bash", "-c", "a && exec b 'c d'"}));
  EXPECT_EQ(ShellWords("a&&b;c|d\ne # x", true), (V{"a", "&&", "b", ";", "c", "|", "d", "\n", "e"}));
  EXPECT_EQ(ShellWords("a\\ b 'c\"d' \"e\\\"f\"", false), (V{"a b", "c\"d", "e\"f"}));
}

ComposeCheckOptions InMemory(const std::map<std::string, std::string>& files) {
  ComposeCheckOptions o;
  o.files = {"p/docker-compose.yml"};
  o.read_file = [files](const std::string& path, size_t) -> Result<std::string> {
    auto it = files.find(path);
    if (it == files.end()) return Status::NotFound(path + ": not found");
    return it->second;
  };
  return o;
}

std::map<std::string, std::string> Reasons(const ComposeReport& r) {
  std::map<std::string, std::string> out;
  for (const auto& [svc, s] : r.suggestions) out[svc] = s.second;
  return out;
}

TEST(Compose, RecognisedThroughTheBuildContextAndTheImage) {
  ComposeCheckOptions o = InMemory({
      {"p/docker-compose.yml",
       "services:\n"
       "  warehouse:\n"  // FROM postgres in an in-house Dockerfile
       "    build: ./db\n"
       "    image: registry.example.internal/data/warehouse:15\n"
       "  worker:\n"  // an entrypoint script in the build context
       "    build: {context: ./worker}\n"
       "    image: acme/worker\n"
       "    entrypoint: [/usr/local/bin/start.sh]\n"
       "  pdf:\n"  // puppeteer in package.json, installed by npm ci
       "    build: ./pdf\n"
       "  scraper:\n"  // playwright install in a RUN line
       "    build: ./scraper\n"
       "  api:\n"  // an app image with nothing of that
       "    build: ./api\n"
       "    command: ./run.sh\n"
       "  local:\n"  // an image present on the node, its Cmd and Env
       "    image: acme/db:3\n"
       "  mounted:\n"  // a script mounted by a volume
       "    image: debian:12\n"
       "    command: bash /boot.sh\n"
       "    volumes: [\"./boot.sh:/boot.sh:ro\"]\n"},
      {"p/./db/Dockerfile",
       "ARG PG=15\nFROM postgres:${PG}-bookworm AS base\nCOPY init.sql /docker-entrypoint-initdb.d/\n"},
      {"p/./worker/Dockerfile",
       "FROM debian:12\nCOPY scripts/start.sh /usr/local/bin/\nRUN apt-get install -y "
       "postgresql-15\n"},
      {"p/./worker/scripts/start.sh",
       "#!/bin/sh\nset -e\nexec su postgres -c '/usr/lib/postgresql/15/bin/pg_ctl "
       "-D /d start'\n"},
      {"p/./pdf/Dockerfile",
       "FROM node:20-slim\nCOPY package*.json ./\nRUN npm ci --omit=dev\nCMD [\"node\", \"pdf.js\"]\n"},
      {"p/./pdf/package.json",
       "{\"dependencies\": {\"puppeteer\": \"^22.0.0\", \"express\": \"4\"},"
       " \"devDependencies\": {\"@playwright/test\": \"1\"}}"},
      {"p/./scraper/Dockerfile",
       "FROM python:3.12\nRUN pip install playwright==1.44 \\\n && playwright install "
       "--with-deps chromium\n"},
      {"p/./api/Dockerfile", "FROM node:20\nRUN npm ci\n"},
      {"p/./api/package.json", "{\"dependencies\": {\"pg\": \"8\", \"express\": \"4\"}}"},
      {"p/./api/run.sh", "#!/bin/sh\nnode wait-for-postgres.js && exec node server.js\n"},
      {"p/./boot.sh",
       "#!/bin/bash\n/usr/lib/postgresql/15/bin/initdb -D /d\nexec /usr/lib/postgresql/15/bin/postgres -D /d\n"},
  });
  o.inspect_image = [](const std::string& image) -> std::optional<ComposeImageConfig> {
    if (image != "acme/db:3") return std::nullopt;
    ComposeImageConfig c;
    c.entrypoint = {"docker-entrypoint.sh"};
    c.cmd = {"postgres"};
    c.env = {"PG_MAJOR=16", "PGDATA=/var/lib/postgresql/data"};
    return c;
  };
  Result<ComposeReport> r = CheckCompose(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::map<std::string, std::string> why = Reasons(*r);
  EXPECT_EQ(why.size(), 6u);
  EXPECT_NE(why["warehouse"].find("PostgreSQL"), std::string::npos);
  EXPECT_NE(why["worker"].find("PostgreSQL"), std::string::npos);
  EXPECT_NE(why["pdf"].find("Puppeteer"), std::string::npos);
  EXPECT_NE(why["scraper"].find("Playwright"), std::string::npos);
  EXPECT_NE(why["local"].find("PostgreSQL"), std::string::npos);
  EXPECT_NE(why["mounted"].find("PostgreSQL"), std::string::npos);
  EXPECT_EQ(why.count("api"), 0u);
}

TEST(Compose, ProjectNameAsComposeComputesIt) {
  auto project = [](const std::string& top, const std::map<std::string, std::string>& env, const std::string& p) {
    ComposeCheckOptions o = InMemory({{"p/docker-compose.yml", top + "services:\n  a:\n    image: nginx\n"}});
    o.files = {"/srv/My.Shop_2/docker-compose.yml"};
    o.read_file = [top](const std::string& path, size_t) -> Result<std::string> {
      if (path.ends_with(".env")) return Status::NotFound("no .env");
      return top + "services:\n  a:\n    image: nginx\n";
    };
    o.env = env;
    o.project_name = p;
    Result<ComposeReport> r = CheckCompose(o);
    return r.ok() ? r->project : r.status().message();
  };
  EXPECT_EQ(project("", {}, ""), "myshop_2");  // the directory, normalised
  EXPECT_EQ(project("name: Stack-A\n", {}, ""), "stack-a");
  EXPECT_EQ(project("name: ${N:-from-default}\n", {}, ""), "from-default");
  EXPECT_EQ(project("name: stack-a\n", {{"COMPOSE_PROJECT_NAME", "FromEnv"}}, ""), "fromenv");
  EXPECT_EQ(project("name: stack-a\n", {{"COMPOSE_PROJECT_NAME", "x"}}, "_Given"), "given");
}

TEST(Compose, MeasuredPeakAppliesUnderTheComputedProjectName) {
  ComposeCheckOptions o = InMemory({{"p/docker-compose.yml", "services:\n  db:\n    image: postgres:16\n"}});
  o.files = {"/srv/shop/docker-compose.yml"};
  o.read_file = [](const std::string& path, size_t) -> Result<std::string> {
    if (path.ends_with(".env")) return Status::NotFound("no .env");
    return std::string("services:\n  db:\n    image: postgres:16\n");
  };
  o.measured["shop/db"] = 3 * kGiB;
  Result<ComposeReport> r = CheckCompose(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->suggestions["db"].first, "6gb");
}

TEST(Compose, FixEditsEveryFileAFindingCameFrom) {
  ComposeCheckOptions o = InMemory({
      {"p/docker-compose.yml",
       "services:\n  web:\n    extends: {file: common.yml, service: chrome}\n  db:\n    image: postgres:16\n"},
      {"p/docker-compose.override.yml", "services:\n  db:\n    shm-size: 1g\n"},
      {"p/common.yml", "services:\n  chrome:\n    image: selenium/standalone-chrome\n    shm_size: 64m\n"},
  });
  o.files = {"p/docker-compose.yml", "p/docker-compose.override.yml"};
  Result<std::vector<ComposeFix>> fixes = PlanComposeFixes(o, "");
  ASSERT_TRUE(fixes.ok()) << fixes.status().message();
  ASSERT_EQ(fixes->size(), 3u);
  EXPECT_EQ((*fixes)[0].file, "p/docker-compose.yml");
  EXPECT_EQ((*fixes)[0].fixed, (*fixes)[0].original);  // db is sized by the rename in the override
  EXPECT_EQ((*fixes)[1].fixed, "services:\n  db:\n    shm_size: 1g\n");
  EXPECT_EQ((*fixes)[2].file, "p/common.yml");
  EXPECT_EQ((*fixes)[2].fixed, "services:\n  chrome:\n    image: selenium/standalone-chrome\n    shm_size: \"2gb\"\n");
  for (const ComposeFix& f : *fixes) EXPECT_TRUE(f.skipped.empty()) << f.file;
}

TEST(Compose, AnchorsOthersMergeAreNamedAliasesAreNotEdited) {
  std::string text =
      "x-db: &db\n"
      "  image: postgres:15\n"
      "services:\n"
      "  scheduler: &automatic\n"
      "    image: postgres:16\n"
      "  worker:\n"
      "    <<: *automatic\n"
      "    command: postgres -c work_mem=64MB\n"
      "  sized:\n"
      "    <<: *automatic\n"
      "    shm_size: 2gb\n"
      "  twin: *automatic\n"
      "  other: *db\n";
  Result<ComposeFix> fix = FixComposeText("c.yml", text, "");
  ASSERT_TRUE(fix.ok()) << fix.status().message();
  ASSERT_GE(fix->changes.size(), 1u);
  EXPECT_NE(fix->changes[0].find("its anchor is merged by 'worker', 'twin', which get this shm_size too"),
            std::string::npos)
      << fix->changes[0];
  bool alias_said = false;
  for (const std::string& s : fix->skipped)
    alias_said = alias_said || s.find("'other' is an alias") != std::string::npos;
  EXPECT_TRUE(alias_said);
  EXPECT_NE(fix->fixed.find("  scheduler: &automatic\n    shm_size: \"1gb\"\n"), std::string::npos);
  EXPECT_NE(fix->fixed.find("  twin: *automatic\n  other: *db\n"), std::string::npos);
  EXPECT_EQ(fix->fixed.find("  image: postgres:15\n    shm"), std::string::npos);
}

TEST(Compose, MessagesSayWhatTheNodesDefaultRuntimeGives) {
  auto message = [](const std::string& runtime, const std::string& extra) {
    ComposeCheckOptions o = InMemory({{"p/docker-compose.yml", "services:\n  db:\n    image: postgres:16\n" + extra}});
    o.read_side_files = false;
    o.default_runtime = runtime;
    Result<ComposeReport> r = CheckCompose(o);
    return r.ok() && !r->findings.empty() ? r->findings[0].message : std::string("?");
  };
  EXPECT_NE(message("", "").find("Docker gives it a 64MiB /dev/shm"), std::string::npos);
  EXPECT_NE(message("runc", "").find("default runtime here (runc) gives it a 64MiB"), std::string::npos);
  std::string s = message("shmkeeper", "");
  EXPECT_EQ(s.find("Docker gives it"), std::string::npos) << s;
  EXPECT_NE(s.find("sizes /dev/shm by its policy"), std::string::npos) << s;
  EXPECT_NE(message("shmkeeper", "    runtime: runc\n").find("its runtime runc gives it a 64MiB"), std::string::npos);
}

}  // namespace
}  // namespace shmkeeper

namespace shmkeeper {
namespace {

// A later file's value never shows through an earlier file's tree (yaml-cpp's
// Node::operator= rebinds a held node): each finding names its own file's line.
TEST(Compose, FindingsPointAtTheirOwnFilesLine) {
  ComposeCheckOptions o;
  o.files = {"p/docker-compose.yml", "p/docker-compose.override.yml"};
  std::map<std::string, std::string> files = {
      {"p/docker-compose.yml",
       "services:\n  pg:\n    image: postgres:16\n    environment:\n      A: b\n    volumes:\n"
       "      - /dev/shm:/dev/shm\n"},
      {"p/docker-compose.override.yml", "services:\n  pg:\n    volumes:\n      - /dev/shm:/dev/shm\n"},
  };
  o.read_file = [files](const std::string& path, size_t) -> Result<std::string> {
    auto it = files.find(path);
    if (it == files.end()) return Status::NotFound(path);
    return it->second;
  };
  Result<ComposeReport> r = CheckCompose(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::vector<std::string> where;
  for (const ComposeFinding& f : r->findings) where.push_back(f.pos.ToString() + " " + FindingCodeName(f.code));
  EXPECT_EQ(where, (std::vector<std::string>{"p/docker-compose.override.yml:4:9 host-shm-bind",
                                             "p/docker-compose.yml:7:9 host-shm-bind"}));
}

}  // namespace
}  // namespace shmkeeper
