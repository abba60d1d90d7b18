// libFuzzer target: any bytes as a compose file through the reader, the
// checks (workload evidence, host /dev/shm binds) and the fix planner; as a
// compose command and a shell script (words, programs through wrappers and
// nested sh -c), and as a shm_size for both compose size grammars. Errors
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
  // The same bytes as a compose command (shlex-split), a shell script and a size.
  shmkeeper::WorkloadSignals service;
  shmkeeper::AddArgv(shmkeeper::ShellWords(text, false), &service);
  shmkeeper::AddShellScript(text, &service);
  if (service.words.size() > 3 * 4096 || service.programs.size() > 3 * 4096) std::abort();
  (void)shmkeeper::MatchShmWorkloads(service);
  for (auto parse : {shmkeeper::ParseComposeV1Size, shmkeeper::ParseComposeV2Size}) {
    shmkeeper::Result<int64_t> size = parse(text);
    if (size.ok() && *size < 0) std::abort();
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
