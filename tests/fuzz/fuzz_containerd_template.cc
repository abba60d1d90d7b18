// libFuzzer target: any bytes as k3s's containerd config template and the
// config.toml generated from it (split at the first NUL) through the
// template editor. An error is one line; a success keeps the template's
// bytes (or creates the base include), adds no template action, is
// idempotent, and is undone by removing shmkeeper's lines.
#include <cstdlib>
#include <string>

#include "install/containerd_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in(reinterpret_cast<const char*>(data), size);
  if (in.find("shmkeeper") != std::string::npos) return 0;  // our own markers are not user input
  size_t nul = in.find('\0');
  std::string tmpl = nul == std::string::npos ? "" : in.substr(0, nul);
  std::string rendered = nul == std::string::npos ? in : in.substr(nul + 1);
  shmkeeper::ContainerdInstallOptions opts;
  opts.runtime_path = "/opt/shmkeeper/bin/shmkeeper-runtime";
  shmkeeper::Result<std::string> t = shmkeeper::WithContainerdTemplateRuntime(tmpl, rendered, "config.toml", opts);
  if (!t.ok()) {
    if (t.status().message().find('\n') != std::string::npos) std::abort();
    return 0;
  }
  std::string base = tmpl.empty() ? shmkeeper::kContainerdBaseTemplate : tmpl;
  if (!base.empty() && base.back() != '\n') base += '\n';
  if (t->compare(0, base.size(), base) != 0) std::abort();            // the template's bytes first
  if (t->find("{{", base.size()) != std::string::npos) std::abort();  // no action added
  if (shmkeeper::WithoutShmkeeperLines(*t) != base) std::abort();     // undone exactly
  shmkeeper::Result<std::string> again = shmkeeper::WithContainerdTemplateRuntime(*t, rendered, "config.toml", opts);
  if (!again.ok() || *again != *t) std::abort();
  return 0;
}
