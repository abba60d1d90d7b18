#include "config_file.h"

#include <google/protobuf/util/time_util.h>

#include "base/fileutil.h"

namespace shmkeeper::agent {

void ConfigFileToProto(const ConfigFileState& state, v1::ConfigFile* out) {
  using google::protobuf::util::TimeUtil;
  out->set_path(state.path);
  *out->mutable_loaded_time() = TimeUtil::NanosecondsToTimestamp(
      std::chrono::duration_cast<std::chrono::nanoseconds>(state.loaded.time_since_epoch()).count());
  out->set_reload_failed(!state.valid);
  out->set_reloads(state.reloads);
  if (state.path.empty()) {
    out->set_on_disk("same");
    return;
  }
  Result<std::string> text = ReadFile(state.path, 1 << 20);
  if (!text.ok()) {
    bool missing = text.status().code() == Code::kNotFound;
    out->set_on_disk(missing ? (state.loaded_text.empty() ? "same" : "missing") : "invalid");
    if (!missing) out->set_on_disk_error(text.status().message());
    return;
  }
  if (*text == state.loaded_text) {
    out->set_on_disk("same");
    return;
  }
  Result<Config> parsed = ParseConfig(*text, state.path);
  out->set_on_disk(parsed.ok() ? "changed" : "invalid");
  if (!parsed.ok()) out->set_on_disk_error(parsed.status().message());
}

}  // namespace shmkeeper::agent
