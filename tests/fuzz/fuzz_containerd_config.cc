// libFuzzer target: any bytes as containerd's config.toml through the
// install/uninstall editor. An error is one line naming the file; a
// successful install is undone exactly by uninstall, and is idempotent.
#include <cstdlib>
#include <string>

#include "install/containerd_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  if (text.empty() || text.find("shmkeeper") != std::string::npos) return 0;  // our own markers are not user input
  shmkeeper::ContainerdInstallOptions opts;
  opts.runtime_path = "/usr/local/bin/shmkeeper-runtime";
  opts.set_as_default = size % 2 == 0;
  shmkeeper::Result<std::string> installed = shmkeeper::WithContainerdRuntime(text, "config.toml", opts);
  if (!installed.ok()) {
    const std::string& m = installed.status().message();
    if (m.rfind("config.toml", 0) != 0 || m.find('\n') != std::string::npos) std::abort();
    return 0;
  }
  shmkeeper::Result<std::string> again = shmkeeper::WithContainerdRuntime(*installed, "config.toml", opts);
  if (!again.ok() || *again != *installed) std::abort();
  shmkeeper::Result<std::string> removed = shmkeeper::WithoutContainerdRuntime(*installed, "config.toml");
  if (!removed.ok()) std::abort();
  // Uninstall gives the original back, up to the final newline install adds.
  if (*removed != text && *removed != text + "\n" && *removed != text + "\r\n") std::abort();
  return 0;
}
