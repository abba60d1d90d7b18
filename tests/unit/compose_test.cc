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

TEST(Compose, ComposeSizes) {
  for (const char* ok : {"2gb", "10.24gb", "512m", "1024", "64M", "2G", "100b", "1k"})
    EXPECT_TRUE(IsComposeSize(ok)) << ok;
  for (const char* bad : {"", "lots", "2Gi", "2 g", "-1", "1.g", "g", "2tb", "1e3"})
    EXPECT_FALSE(IsComposeSize(bad)) << bad;
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
  EXPECT_EQ(fix->skipped.size(), 2u);
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
      {"p/./Dockerfile", "RUN pip install torch && pytest\n"},
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
  EXPECT_EQ(read, (std::vector<std::string>{"p/.env", "p/compose.yml", "p/base.yml", "p/./Dockerfile"}));

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
