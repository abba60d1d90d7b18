// libFuzzer target: any config.json text through Spec::Parse, the /dev/shm
// planner and the edit; never crashes, and an edited spec still parses. The
// text is also a podman cgroupsPath and bundle path for discovery's parsers.
#include <cstdlib>
#include <string_view>

#include "../unit/fake_os.h"
#include "decide/plan.h"
#include "node/discovery.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string pod = shmkeeper::PodmanPodId(std::string(text));
  if (!pod.empty() && pod.size() != 64) std::abort();
  (void)shmkeeper::PodmanStorageFile(std::string(text), "id");
  shmkeeper::Result<shmkeeper::Spec> spec = shmkeeper::Spec::Parse(text, "/b/config.json");
  if (!spec.ok()) return 0;
  shmkeeper::FakeOs os;
  os.fs["/var/lib/docker/containers/id/mounts/shm"] = shmkeeper::FsInfo{true, true, 64 << 20, 0, 0};
  shmkeeper::Config config;
  shmkeeper::Result<shmkeeper::ShmPlan> plan = shmkeeper::PlanShm(*spec, config, "id", os);
  if (!plan.ok()) return 0;
  if (!shmkeeper::ApplyShm(*plan, &*spec, os).ok()) return 0;
  if (!shmkeeper::Spec::Parse(spec->Dump(), "again").ok()) std::abort();
  return 0;
}
