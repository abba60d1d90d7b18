// libFuzzer target: any bytes as a compose file through the reader, the
// checks (workload evidence, host /dev/shm binds) and the fix planner. Errors
// are one line naming the file; a planned fix leaves a document that still
// parses. The same bytes as a process command line through the doctor's
// workload matcher (untrusted /proc/PID/cmdline).
#include <cstdlib>
#include <string>

#include "compose/compose.h"
#include "decide/workloads.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  shmkeeper::WorkloadSignals process;
  shmkeeper::AddCommandWords(text, true, &process);
  process.text = text;
  for (const shmkeeper::ShmWorkload* w : shmkeeper::MatchShmWorkloads(process)) {
    if (w->bytes <= 0) std::abort();
  }
  shmkeeper::Result<shmkeeper::ComposeFix> fix = shmkeeper::FixComposeText("fuzz.yml", text, "");
  if (!fix.ok()) {
    const std::string& m = fix.status().message();
    if (m.rfind("fuzz.yml", 0) != 0 || m.find('\n') != std::string::npos) std::abort();
    return 0;
  }
  if (fix->original != text) std::abort();
  if (fix->fixed != text && !shmkeeper::FixComposeText("fuzz.yml", fix->fixed, "").ok()) std::abort();
  return 0;
}
