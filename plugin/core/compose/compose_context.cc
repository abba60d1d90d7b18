#include "compose/compose_context.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>

#include "base/json.h"

namespace shmkeeper::compose {
namespace {

constexpr size_t kMaxSideFile = 1 << 20;
constexpr size_t kMaxScripts = 4;

std::string Scalar(const YAML::Node& n) { return n && n.IsScalar() ? n.Scalar() : std::string(); }

std::string Base(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// One stage of a Dockerfile as far as the image it makes goes.
struct Stage {
  std::string from, name;
  std::vector<std::string> env_keys, entrypoint, cmd;
  std::vector<std::pair<int, std::string>> runs;  // (Dockerfile line, RUN arguments)
  std::vector<std::pair<std::string, std::string>> copies;
  bool has_entrypoint = false, has_cmd = false;
};

// ["a", "b"] (exec form) or a shell string (sh -c).
std::vector<std::string> ExecOrShell(const std::string& args) {
  std::string t = args;
  size_t b = t.find_first_not_of(" \t");
  if (b != std::string::npos && t[b] == '[') {
    Json j = Json::parse(t, nullptr, false);
    if (j.is_array()) {
      std::vector<std::string> out;
      for (const Json& e : j) {
        if (e.is_string()) out.push_back(e.get<std::string>());
      }
      return out;
    }
  }
  return {"/bin/sh", "-c", t};
}

struct Instruction {
  std::string ins;   // upper-cased
  std::string rest;  // its arguments
  int line = 0;      // where it starts (1-based)
};

// Dockerfile lines: continuations joined, comments and blank lines dropped.
std::vector<Instruction> Instructions(const std::string& text) {
  std::vector<Instruction> out;
  std::istringstream in(text);
  std::string line, cur;
  int lineno = 0, start = 1;
  while (std::getline(in, line) && out.size() < 10000) {
    ++lineno;
    if (cur.empty()) start = lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::string trimmed = line.substr(std::min(line.size(), line.find_first_not_of(" \t")));
    if (trimmed.starts_with("#")) continue;
    if (!line.empty() && line.back() == '\\') {
      cur += line.substr(0, line.size() - 1) + "\n";
      continue;
    }
    cur += line;
    size_t b = cur.find_first_not_of(" \t\n");
    if (b != std::string::npos) {
      size_t e = cur.find_first_of(" \t\n", b);
      std::string ins = cur.substr(b, e == std::string::npos ? std::string::npos : e - b);
      for (char& c : ins) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      out.push_back({ins, e == std::string::npos ? "" : cur.substr(e + 1), start});
    }
    cur.clear();
  }
  return out;
}

// A package argument without its version or extras: "puppeteer@21" ->
// "puppeteer", "@playwright/test@1.4" -> "@playwright/test", "torch==2.1" -> "torch".
std::string PackageName(std::string p) {
  size_t at = p.find('@', p.starts_with("@") ? 1 : 0);
  if (at != std::string::npos) p.resize(at);
  size_t cut = p.find_first_of("=<>![~; ");
  if (cut != std::string::npos) p.resize(cut);
  for (char& c : p) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return p;
}

// The packages one RUN command installs (apt-get/apk/dnf/pip/npm ...), and
// `playwright install` as "playwright-browsers".
void AddInstalls(const std::vector<std::string>& cmd, std::vector<std::string>* pkgs, bool* npm_install,
                 std::vector<std::string>* requirement_files) {
  static const std::set<std::string> kManagers = {"apt-get", "apt", "apk",  "dnf",  "yum", "microdnf", "zypper", "pip",
                                                  "pip3",    "npm", "yarn", "pnpm", "bun", "uv",       "poetry"};
  size_t i = 0;
  while (i < cmd.size() && (cmd[i] == "sudo" || cmd[i].find('=') != std::string::npos)) ++i;
  if (i >= cmd.size()) return;
  std::string prog = Base(cmd[i]);
  if (prog.starts_with("python") && i + 2 < cmd.size() && cmd[i + 1] == "-m") prog = cmd[i += 2];
  if (prog == "npx" || prog == "bunx") {
    ++i;
    while (i < cmd.size() && cmd[i].starts_with("-")) ++i;
    if (i < cmd.size()) prog = PackageName(cmd[i]);
  }
  if (prog == "playwright" || prog == "@playwright/test") {
    if (std::find(cmd.begin() + static_cast<long>(i), cmd.end(), "install") != cmd.end())
      pkgs->push_back("playwright-browsers");
    return;
  }
  if ((prog == "puppeteer" || prog == "@puppeteer/browsers") &&
      std::find(cmd.begin() + static_cast<long>(i), cmd.end(), "install") != cmd.end()) {
    pkgs->push_back("puppeteer");
    return;
  }
  if (!kManagers.count(prog)) return;
  bool installing = false;
  for (size_t j = i + 1; j < cmd.size(); ++j) {
    const std::string& a = cmd[j];
    if (!installing) {
      installing = a == "install" || a == "add" || a == "i" || a == "ci";
      if (installing && (prog == "npm" || prog == "yarn" || prog == "pnpm" || prog == "bun")) *npm_install = true;
      continue;
    }
    if ((a == "-r" || a == "--requirement") && j + 1 < cmd.size()) {
      requirement_files->push_back(cmd[++j]);
    } else if (!a.starts_with("-") && !a.starts_with("$") && !a.starts_with(".") && !a.starts_with("/")) {
      pkgs->push_back(PackageName(a));
    }
  }
  if (prog == "yarn" && !installing) *npm_install = true;  // a bare `yarn` installs package.json
}

// Whether one RUN command runs tests: pytest, py.test or python -m pytest|unittest
// (`pip install pytest` only installs them).
bool RunsTests(const std::vector<std::string>& cmd) {
  size_t i = 0;
  while (i < cmd.size() && (cmd[i] == "sudo" || cmd[i] == "env" || cmd[i].find('=') != std::string::npos)) ++i;
  if (i >= cmd.size()) return false;
  std::string prog = Base(cmd[i]);
  if (prog == "pytest" || prog == "py.test") return true;
  return prog.starts_with("python") && i + 2 < cmd.size() && cmd[i + 1] == "-m" &&
         (cmd[i + 2] == "pytest" || cmd[i + 2] == "unittest");
}

std::string Joined(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : " ") + w;
  return out.size() > 80 ? out.substr(0, 77) + "..." : out;
}

// Reads `path` of the build context through the options' reader.
Result<std::string> ReadSide(const ComposeCheckOptions& o, const std::string& path) {
  return ReaderOf(o)(path, kMaxSideFile);
}

// package.json's dependencies (not devDependencies: a production image
// leaves them out, and a test image runs them by a command seen elsewhere).
void AddPackageJson(const std::string& text, std::vector<std::string>* pkgs, const char* key = "dependencies") {
  Json j = Json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains(key) || !j[key].is_object()) return;
  for (const auto& [name, v] : j[key].items()) pkgs->push_back(PackageName(name));
}

void AddRequirements(const std::string& text, std::vector<std::string>* pkgs) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos || line[b] == '#' || line[b] == '-') continue;
    pkgs->push_back(PackageName(line.substr(b)));
  }
}

// The stages of a Dockerfile, FROM and stage names resolved with its ARGs and `args`.
std::vector<Stage> Stages(const std::string& text, std::map<std::string, std::string> args) {
  std::vector<Stage> stages;
  for (const auto& [ins, rest, lineno] : Instructions(text)) {
    if (ins == "ARG") {
      std::string a = rest.substr(0, rest.find_first_of(" \t\n"));
      size_t eq = a.find('=');
      if (eq != std::string::npos) args.try_emplace(a.substr(0, eq), a.substr(eq + 1));
      continue;
    }
    if (ins == "FROM") {
      std::vector<std::string> w = ShellWords(rest, false);
      Stage st;
      for (size_t i = 0; i < w.size(); ++i) {
        if (w[i].starts_with("--")) continue;
        if (st.from.empty()) {
          Result<std::string> img = Interpolate(w[i], args);
          st.from = img.ok() ? *img : w[i];
        } else if ((w[i] == "AS" || w[i] == "as" || w[i] == "As") && i + 1 < w.size()) {
          st.name = w[i + 1];
          break;
        }
      }
      // FROM an earlier stage: it starts as that stage.
      for (const Stage& prev : stages) {
        if (!prev.name.empty() && prev.name == st.from) {
          std::string name = st.name;
          st = prev;
          st.name = name;
        }
      }
      stages.push_back(std::move(st));
      continue;
    }
    if (stages.empty()) continue;
    Stage& st = stages.back();
    if (ins == "ENV") {
      std::vector<std::string> w = ShellWords(rest, false);
      if (!w.empty() && w[0].find('=') == std::string::npos) {
        st.env_keys.push_back(w[0]);  // ENV KEY value
      } else {
        for (const std::string& kv : w) st.env_keys.push_back(kv.substr(0, kv.find('=')));
      }
    } else if (ins == "RUN") {
      st.runs.emplace_back(lineno, rest);
    } else if (ins == "ENTRYPOINT") {
      st.entrypoint = ExecOrShell(rest);
      st.has_entrypoint = true;
      st.cmd.clear();  // Docker: a new ENTRYPOINT resets CMD
      st.has_cmd = false;
    } else if (ins == "CMD") {
      st.cmd = ExecOrShell(rest);
      st.has_cmd = true;
    } else if (ins == "COPY" || ins == "ADD") {
      std::vector<std::string> w;
      if (rest.find_first_not_of(" \t") != std::string::npos && rest[rest.find_first_not_of(" \t")] == '[') {
        w = ExecOrShell(rest);
      } else {
        w = ShellWords(rest, false);
      }
      std::vector<std::string> args_only;
      bool other_stage = false;
      for (const std::string& a : w) {
        if (a.starts_with("--from")) other_stage = true;
        if (!a.starts_with("--")) args_only.push_back(a);
      }
      if (other_stage || args_only.size() < 2) continue;
      const std::string& dest = args_only.back();
      for (size_t i = 0; i + 1 < args_only.size(); ++i) st.copies.emplace_back(dest, args_only[i]);
    }
  }
  return stages;
}

}  // namespace

std::vector<std::string> ArgvOf(const YAML::Node& v, const std::map<std::string, std::string>& env) {
  auto interp = [&](const std::string& t) {
    Result<std::string> r = Interpolate(t, env);
    return r.ok() ? *r : t;
  };
  std::vector<std::string> out;
  if (v.IsScalar()) return ShellWords(interp(v.Scalar()), false);
  if (v.IsSequence()) {
    for (const auto& item : v) {
      if (item.IsScalar()) out.push_back(interp(item.Scalar()));
    }
  }
  return out;
}

BuildInfo ReadBuild(const Service& s, const ComposeCheckOptions& o, WorkloadSignals* sig) {
  BuildInfo info;
  auto b = s.keys.find("build");
  if (b == s.keys.end() || !o.read_side_files) return info;
  const YAML::Node& v = b->second.value;
  std::string context = ".", dockerfile = "Dockerfile", target;
  std::map<std::string, std::string> args;
  if (v.IsScalar()) context = v.Scalar();
  if (v.IsMap()) {
    if (!Scalar(v["context"]).empty()) context = Scalar(v["context"]);
    if (!Scalar(v["dockerfile"]).empty()) dockerfile = Scalar(v["dockerfile"]);
    target = Scalar(v["target"]);
    if (v["args"] && v["args"].IsMap()) {
      for (const auto& kv : v["args"]) {
        if (kv.first.IsScalar() && kv.second.IsScalar()) args[kv.first.Scalar()] = kv.second.Scalar();
      }
    }
  }
  if (context.find("://") != std::string::npos || context.starts_with("git@")) return info;  // a remote context
  info.context = Join(DirOf(b->second.file), context);
  Result<std::string> text = ReadSide(o, Join(info.context, dockerfile));
  if (!text.ok()) return info;
  bool names_torch = Lower(*text).find("torch") != std::string::npos;
  std::vector<Stage> stages = Stages(*text, args);
  if (stages.empty()) return info;
  const Stage* st = &stages.back();
  for (const Stage& x : stages) {
    if (!target.empty() && x.name == target) st = &x;
  }
  info.found = true;
  info.entrypoint = st->entrypoint;
  info.cmd = st->cmd;
  info.copies = st->copies;
  sig->base_images.push_back(Lower(st->from));
  for (const std::string& k : st->env_keys) sig->env_keys.push_back(Lower(k));
  bool npm_install = false;
  std::vector<std::string> requirement_files;
  for (const auto& [lineno, run] : st->runs) {
    std::vector<std::string> words = ShellWords(run, true);
    std::vector<std::string> cmd;
    for (size_t i = 0; i <= words.size(); ++i) {
      bool op = i == words.size() || words[i] == "&&" || words[i] == "||" || words[i] == ";" || words[i] == "|" ||
                words[i] == "&" || words[i] == "\n";
      if (!op) {
        cmd.push_back(words[i]);
        continue;
      }
      size_t before = sig->packages.size();
      AddInstalls(cmd, &sig->packages, &npm_install, &requirement_files);
      for (size_t j = before; j < sig->packages.size(); ++j)
        sig->package_origins.try_emplace(sig->packages[j], Base(dockerfile) + " line " + std::to_string(lineno));
      if (names_torch && info.torch_tests.empty() && RunsTests(cmd)) info.torch_tests = Joined(cmd);
      cmd.clear();
    }
  }
  if (Result<std::string> pj = ReadSide(o, Join(info.context, "package.json")); pj.ok()) {
    if (npm_install) AddPackageJson(*pj, &sig->packages);
    AddPackageJson(*pj, &info.dev_packages, "devDependencies");
  }
  for (size_t i = 0; i < requirement_files.size() && i < kMaxScripts; ++i) {
    Result<std::string> req = ReadSide(o, Join(info.context, requirement_files[i]));
    if (!req.ok()) req = ReadSide(o, Join(info.context, Base(requirement_files[i])));
    if (req.ok()) AddRequirements(*req, &sig->packages);
  }
  return info;
}

namespace {

// The host file a service volume mounts at container path `path` ("" when none).
std::string MountedFrom(const Service& s, const std::string& path) {
  auto vols = s.keys.find("volumes");
  if (vols == s.keys.end() || !vols->second.value.IsSequence()) return "";
  for (const auto& item : vols->second.value) {
    std::string src, dst;
    if (item.IsScalar()) {
      const std::string& t = item.Scalar();
      size_t c1 = t.find(':');
      if (c1 == std::string::npos) continue;
      size_t c2 = t.find(':', c1 + 1);
      src = t.substr(0, c1);
      dst = t.substr(c1 + 1, c2 == std::string::npos ? std::string::npos : c2 - c1 - 1);
    } else if (item.IsMap()) {
      src = Scalar(item["source"]);
      dst = Scalar(item["target"]);
    }
    if (src.empty() || dst.empty() || !(src.starts_with(".") || src.starts_with("/") || src.starts_with("~"))) continue;
    if (dst == path) return Join(DirOf(vols->second.file), src);
    if (path.starts_with(dst + "/")) return Join(DirOf(vols->second.file), src) + path.substr(dst.size());
  }
  return "";
}

// Where the build context holds container path `path`: through COPY lines, else by name.
std::vector<std::string> ContextCandidates(const BuildInfo& b, const std::string& path) {
  std::vector<std::string> out;
  if (!b.found) return out;
  std::string base = Base(path);
  for (const auto& [dest, src] : b.copies) {
    if (dest == path || ((dest.ends_with("/") || dest == ".") && Base(src) == base))
      out.push_back(Join(b.context, src));
    if (dest.ends_with("/") && path.starts_with(dest) && src.ends_with("/"))
      out.push_back(Join(b.context, src + path.substr(dest.size())));
  }
  if (!path.starts_with("/")) out.push_back(Join(b.context, path));
  out.push_back(Join(b.context, base));
  return out;
}

bool LooksLikeScript(const std::string& w) {
  return !w.starts_with("-") && (w.ends_with(".sh") || w.ends_with(".bash") || w.starts_with("./") ||
                                 (w.starts_with("/") && w.find("/bin/") == std::string::npos));
}

}  // namespace

void AddTestPackages(const Service& s, const BuildInfo& build, const ComposeCheckOptions& o, WorkloadSignals* sig) {
  static const std::set<std::string> kRunners = {"npm", "yarn", "pnpm", "npx", "bunx", "bun"};
  if (!o.read_side_files ||
      std::none_of(sig->programs.begin(), sig->programs.end(), [](const std::string& p) { return kRunners.count(p); }))
    return;
  // Tests, not `npm run dev`: a project's devDependencies hold its test tools.
  bool tests = std::any_of(sig->words.begin(), sig->words.end(), [](const std::string& w) {
    return w.find("test") != std::string::npos || w.find("e2e") != std::string::npos ||
           w.find("cypress") != std::string::npos || w.find("playwright") != std::string::npos;
  });
  if (!tests) return;
  std::vector<std::string> dev = build.dev_packages;
  // node:20 with the project mounted as its working directory.
  auto wd = s.keys.find("working_dir");
  if (wd != s.keys.end() && wd->second.value.IsScalar()) {
    std::string host = MountedFrom(s, wd->second.value.Scalar() + "/package.json");
    if (!host.empty()) {
      if (Result<std::string> pj = ReadSide(o, host); pj.ok()) {
        AddPackageJson(*pj, &dev, "devDependencies");
        AddPackageJson(*pj, &dev);
      }
    }
  }
  sig->packages.insert(sig->packages.end(), dev.begin(), dev.end());
}

void AddScripts(const Service& s, const BuildInfo& build, const std::vector<std::string>& argv,
                const ComposeCheckOptions& o, WorkloadSignals* sig) {
  if (!o.read_side_files) return;
  size_t read = 0;
  for (size_t i = 0; i < argv.size() && i < 3 && read < kMaxScripts; ++i) {
    if (!LooksLikeScript(argv[i])) continue;
    std::vector<std::string> candidates;
    if (std::string m = MountedFrom(s, argv[i]); !m.empty()) candidates.push_back(m);
    for (const std::string& c : ContextCandidates(build, argv[i])) candidates.push_back(c);
    for (const std::string& c : candidates) {
      Result<std::string> text = ReadSide(o, c);
      if (!text.ok() || text->find('\0') != std::string::npos) continue;
      AddShellScript(*text, sig);
      ++read;
      break;
    }
  }
}

}  // namespace shmkeeper::compose
