#include "compose/compose_evidence.h"

#include <algorithm>
#include <cctype>

#include "base/bytes.h"
#include "compose/compose_context.h"
#include "decide/workloads.h"

namespace shmkeeper::compose {
namespace {

// Every scalar under `n`, lower-cased, joined (bounded). URLs are left out,
// and the keys that hold them: "http://vllm:8000" names a service the
// container talks to, not one it runs.
void Flatten(const YAML::Node& n, std::string* out, int depth = 0) {
  if (depth > 16 || out->size() > 65536) return;
  if (n.IsScalar() && n.Scalar().find("://") != std::string::npos) return;
  if (n.IsScalar()) {
    *out += Lower(n.Scalar());
    *out += ' ';
  } else if (n.IsMap()) {
    for (const auto& kv : n) {
      // Nor the key that holds one: RAY_ADDRESS: ray://head:10001 is a client of Ray.
      if (kv.second.IsScalar() && kv.second.Scalar().find("://") != std::string::npos) continue;
      Flatten(kv.first, out, depth + 1);
      Flatten(kv.second, out, depth + 1);
    }
  } else if (n.IsSequence()) {
    for (const auto& item : n) Flatten(item, out, depth + 1);
  }
}
bool HasGpu(const Service& s) {
  auto rt = s.keys.find("runtime");
  if (rt != s.keys.end() && rt->second.value.IsScalar() && rt->second.value.Scalar() == "nvidia") return true;
  auto dep = s.keys.find("deploy");
  if (dep == s.keys.end()) return false;
  std::string blob;
  Flatten(dep->second.value, &blob);
  return blob.find("gpu") != std::string::npos || blob.find("nvidia") != std::string::npos;
}

int NumWorkers(const std::string& blob) {
  for (const char* key : {"num_workers", "num-workers", "numworkers"}) {
    size_t at = blob.find(key);
    if (at == std::string::npos) continue;
    size_t p = at + std::string(key).size();
    while (p < blob.size() && (blob[p] == '=' || blob[p] == ' ' || blob[p] == ':' || blob[p] == '"')) ++p;
    int n = 0;
    while (p < blob.size() && std::isdigit(static_cast<unsigned char>(blob[p])) && n < 100000)
      n = n * 10 + (blob[p++] - '0');
    if (n > 0) return n;
  }
  return 0;
}

// The container paths of the service's volumes.
std::vector<std::string> MountTargets(const Service& s) {
  std::vector<std::string> out;
  auto vols = s.keys.find("volumes");
  if (vols == s.keys.end() || !vols->second.value.IsSequence()) return out;
  for (const auto& item : vols->second.value) {
    if (item.IsScalar()) {
      const std::string& t = item.Scalar();
      size_t c1 = t.find(':');
      if (c1 == std::string::npos) {
        out.push_back(t);
        continue;
      }
      size_t c2 = t.find(':', c1 + 1);
      out.push_back(t.substr(c1 + 1, c2 == std::string::npos ? std::string::npos : c2 - c1 - 1));
    } else if (item.IsMap() && item["target"] && item["target"].IsScalar()) {
      out.push_back(item["target"].Scalar());
    }
  }
  return out;
}

// The container side of the service's ports and expose ("8080:5432/tcp" -> "5432").
std::vector<std::string> ContainerPorts(const Service& s) {
  std::vector<std::string> out;
  for (const char* key : {"ports", "expose"}) {
    auto it = s.keys.find(key);
    if (it == s.keys.end() || !it->second.value.IsSequence()) continue;
    for (const auto& item : it->second.value) {
      std::string p;
      if (item.IsScalar()) {
        p = item.Scalar();
        p = p.substr(p.rfind(':') == std::string::npos ? 0 : p.rfind(':') + 1);
      } else if (item.IsMap() && item["target"] && item["target"].IsScalar()) {
        p = item["target"].Scalar();
      }
      out.push_back(p.substr(0, p.find('/')));
    }
  }
  return out;
}

void AddEnvKeys(const YAML::Node& env, WorkloadSignals* sig) {
  for (const auto& item : env) {
    if (env.IsMap() && item.first.IsScalar()) sig->env_keys.push_back(Lower(item.first.Scalar()));
    if (env.IsSequence() && item.IsScalar()) {
      sig->env_keys.push_back(Lower(item.Scalar().substr(0, item.Scalar().find('='))));
    }
  }
}

// What a service shows of itself to the workload table (workloads.h), layer
// by layer: its image (interpolated) and every scalar of image, command,
// entrypoint, environment, build, working_dir and labels; the argv it runs
// (entrypoint + command, else the image's or its build's), seen through
// shells and wrappers; the scripts that argv names (from a volume or the
// build context); its build (FROM, ENV, installed packages); the image's
// config when the engine has it (Entrypoint, Cmd, Env, labels); its mounts.
WorkloadSignals Signals(const Service& s, const ComposeCheckOptions& o, std::string* torch_tests) {
  WorkloadSignals sig;
  // The image by its repository: a tag names a version, not a program ("postgres:14-vectorchord0.4.3").
  for (const char* k : {"command", "entrypoint", "environment", "build", "working_dir", "labels"}) {
    auto it = s.keys.find(k);
    if (it != s.keys.end()) Flatten(it->second.value, &sig.text);
  }
  std::string image;
  if (auto it = s.keys.find("image"); it != s.keys.end() && it->second.value.IsScalar()) {
    Result<std::string> v = Interpolate(it->second.value.Scalar(), o.env);
    image = v.ok() ? *v : it->second.value.Scalar();
    sig.image = Lower(image);
    sig.text += ImageRepository(sig.image) + ' ';
  }
  BuildInfo build = ReadBuild(s, o, &sig);
  *torch_tests = build.torch_tests;
  std::optional<ComposeImageConfig> config;
  if (o.inspect_image && !image.empty()) config = o.inspect_image(image);
  auto entry_it = s.keys.find("entrypoint"), cmd_it = s.keys.find("command");
  std::vector<std::string> entry, cmd;
  if (entry_it != s.keys.end()) {
    entry = ArgvOf(entry_it->second.value, o.env);
  } else if (config) {
    entry = config->entrypoint;
  } else {
    entry = build.entrypoint;
  }
  if (cmd_it != s.keys.end()) {
    cmd = ArgvOf(cmd_it->second.value, o.env);
  } else if (entry_it == s.keys.end()) {  // compose: an entrypoint of the service drops the image's CMD
    cmd = config ? config->cmd : build.cmd;
  }
  std::vector<std::string> argv = entry;
  argv.insert(argv.end(), cmd.begin(), cmd.end());
  AddArgv(argv, &sig);
  AddScripts(s, build, argv, o, &sig);
  AddTestPackages(s, build, o, &sig);
  if (!entry.empty() && !cmd.empty()) AddScripts(s, build, cmd, o, &sig);
  if (auto env = s.keys.find("environment"); env != s.keys.end()) AddEnvKeys(env->second.value, &sig);
  if (config) {
    for (const std::string& kv : config->env) sig.env_keys.push_back(Lower(kv.substr(0, kv.find('='))));
    for (const auto& [k, v] : config->labels) {
      if (k == "org.opencontainers.image.base.name") sig.base_images.push_back(Lower(v));
    }
  }
  sig.mounts = MountTargets(s);
  sig.ports = ContainerPorts(s);
  if (auto hc = s.keys.find("healthcheck"); hc != s.keys.end() && hc->second.value.IsMap()) {
    if (YAML::Node test = hc->second.value["test"]; test) {
      WorkloadSignals h;
      AddArgv(ArgvOf(test, o.env), &h);
      sig.health_words = h.words;
    }
  }
  return sig;
}

// The least /dev/shm a workload of the table runs with (below it, an explicit
// shm_size is flagged): where its page says it fails, else a conservative
// fraction of what the page asks for, so a size people run with is not flagged.
int64_t FloorOf(const ShmWorkload& w) {
  std::string name = w.name;
  if (name == "PostgreSQL") return 128 * kMiB;     // the official image's compose example
  if (name == "Oracle Database") return 1 * kGiB;  // runOracle.sh refuses less
  if (name == "Chrome/Chromium" || name == "Firefox" || name == "Playwright" || name == "Puppeteer" || name == "Ray")
    return 512 * kMiB;
  if (name == "vLLM" || name == "SGLang" || name == "NCCL" || name == "Text Generation Inference") return 1 * kGiB;
  return 256 * kMiB;  // MPI, Triton, PyTorch, TensorFlow, DALI, Jupyter
}

// Which workloads of the table a service shows, and the size that serves them.
Need Evidence(const Service& s, const ComposeCheckOptions& o) {
  Need need;
  WorkloadSignals sig = Signals(s, o, &need.build_torch_tests);
  auto add = [&](const std::string& why, int64_t bytes, int64_t floor, const std::string& because) {
    need.needs = true;
    need.bytes = std::max(need.bytes, bytes);
    need.floor = std::max(need.floor, floor);
    need.reason += (need.reason.empty() ? "" : ", ") + why;
    need.because += (need.because.empty() ? "" : "; ") + because;
  };
  std::string excluded;  // a documented exclusion that fired ("prog:tensorboard")
  for (const ShmWorkloadMatch& m : ExplainShmWorkloads(sig)) {
    if (!m.stopped_by.empty() && excluded.empty()) excluded = m.stopped_by;
    if (!m.stopped_by.empty()) continue;
    const ShmWorkload& w = *m.row;
    std::string name = w.name;
    need.gpu_ipc = need.gpu_ipc || name == "NCCL" || name == "vLLM" || name == "SGLang";
    std::string because = DescribeSign(m.sign);
    if (m.sign.starts_with("pkg:")) {
      if (auto origin = sig.package_origins.find(m.sign.substr(4)); origin != sig.package_origins.end())
        because = origin->second + " installs " + origin->first;
    }
    add("uses " + std::string(w.name) + " (at 64MiB: " + w.symptom + ")", w.bytes, FloorOf(w), because);
  }
  if (int n = NumWorkers(sig.text)) {
    add("num_workers=" + std::to_string(n), std::max<int64_t>(2 * kGiB, n * 512 * kMiB), n * 128 * kMiB,
        "its settings name num_workers=" + std::to_string(n));
  }
  // A GPU reservation is a sign of a workload only where no exclusion of the
  // table says the service is not one (tensorboard in a tensorflow image).
  need.gpu_ipc = need.gpu_ipc || HasGpu(s);
  if (HasGpu(s) && (need.needs || excluded.empty()))
    add("reserves GPUs", 8 * kGiB, 0, "it reserves GPUs (runtime: nvidia or a deploy device)");
  return need;
}

}  // namespace

Need NeedOf(const Service& s, const ComposeCheckOptions& o, const ComposeProject& project) {
  Need need = Evidence(s, o);
  auto measured = o.measured.find(project.name + "/" + s.name);
  // compose v1 ignores a top-level name: and names the project after its directory.
  if (measured == o.measured.end()) measured = o.measured.find(project.dir_name + "/" + s.name);
  if (measured != o.measured.end() && measured->second > 0) {
    int64_t want = (2 * measured->second + kGiB - 1) / kGiB * kGiB;
    if (want > need.bytes) {
      need.bytes = want;
      need.reason += (need.reason.empty() ? "" : ", ") + std::string("measured peak ") + FormatSize(measured->second);
      need.because += (need.because.empty() ? "" : "; ") + std::string("the agent measured its /dev/shm peak");
      need.needs = true;
    }
    need.floor = std::max(need.floor, measured->second);
  }
  return need;
}

}  // namespace shmkeeper::compose
