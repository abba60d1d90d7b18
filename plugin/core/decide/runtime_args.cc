#include "decide/runtime_args.h"

#include <algorithm>
#include <array>
#include <string_view>

namespace shmkeeper {
namespace {

// Global flags of runc and crun that take a value.
constexpr std::array<std::string_view, 8> kGlobalValueFlags = {"root", "log",      "log-format",     "log-level",
                                                               "criu", "rootless", "cgroup-manager", "config"};
// create/run flags that take a value.
constexpr std::array<std::string_view, 6> kCreateValueFlags = {
    "bundle", "b", "console-socket", "pid-file", "preserve-fds", "pidfd-socket"};

struct Flag {
  std::string name;   // without dashes
  std::string value;  // after '='
  bool has_value = false;
};

bool IsFlag(const std::string& a) { return a.size() > 1 && a[0] == '-'; }

Flag SplitFlag(const std::string& a) {
  Flag f;
  std::string_view s(a);
  s.remove_prefix(s.starts_with("--") ? 2 : 1);
  size_t eq = s.find('=');
  f.name = std::string(s.substr(0, eq));
  if (eq != std::string_view::npos) {
    f.value = std::string(s.substr(eq + 1));
    f.has_value = true;
  }
  return f;
}

template <size_t N>
bool Contains(const std::array<std::string_view, N>& set, const std::string& name) {
  return std::find(set.begin(), set.end(), name) != set.end();
}

// Reads the value of flag `f` at args[*i], advancing *i past a separate value.
Result<std::string> TakeValue(const Flag& f, const std::vector<std::string>& args, size_t* i) {
  if (f.has_value) return f.value;
  if (*i + 1 >= args.size()) return Status::Invalid("flag --" + f.name + " needs a value");
  return args[++*i];
}

}  // namespace

Result<RuntimeArgs> ParseRuntimeArgs(const std::vector<std::string>& args) {
  RuntimeArgs out;
  size_t i = 0;
  for (; i < args.size() && IsFlag(args[i]); ++i) {
    Flag f = SplitFlag(args[i]);
    if (!Contains(kGlobalValueFlags, f.name)) {
      out.passthrough.push_back(args[i]);
      continue;
    }
    size_t first = i;
    SHMK_ASSIGN_OR_RETURN(std::string value, TakeValue(f, args, &i));
    if (f.name == "config") {
      out.config_path = value;
      continue;  // shmkeeper's own: not passed on
    }
    if (f.name == "log") out.log_path = value;
    if (f.name == "log-format") out.log_format = value;
    if (f.name == "root") out.root = value;
    out.passthrough.insert(out.passthrough.end(), args.begin() + first, args.begin() + i + 1);
  }
  if (i == args.size()) return out;
  out.subcommand = args[i];
  out.passthrough.insert(out.passthrough.end(), args.begin() + i, args.end());
  if (!out.Intercepts()) return out;
  for (++i; i < args.size(); ++i) {
    if (!IsFlag(args[i])) {
      if (out.container_id.empty()) out.container_id = args[i];
      continue;
    }
    Flag f = SplitFlag(args[i]);
    if (!Contains(kCreateValueFlags, f.name)) continue;
    SHMK_ASSIGN_OR_RETURN(std::string value, TakeValue(f, args, &i));
    if (f.name == "bundle" || f.name == "b") out.bundle = value;
  }
  return out;
}

}  // namespace shmkeeper
