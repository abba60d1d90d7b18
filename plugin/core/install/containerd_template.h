// Registering shmkeeper-runtime where containerd's config.toml is generated:
// k3s and RKE2 render <dir>/config.toml at every start from a Go template,
// <dir>/config-v3.toml.tmpl (containerd 2.x, config version 3) or
// <dir>/config.toml.tmpl (version 2), in that order, with their own default
// defined as the template "base"; an in-place edit of config.toml is lost at
// the next start (docs: k3s "Configuring containerd", "Base template").
//
// install puts shmkeeper's marked handler block at the end of the template
// the distribution reads, creating it as `{{ template "base" . }}` plus the
// block when there is none. The block holds no template action, so the
// rendered file is the template's output followed by the block: the block is
// computed (and checked, see containerd_config.h) against the config.toml the
// distribution last generated, which must exist. uninstall removes the block
// and a template that install created. default_runtime_name lives in the
// base template and cannot be pointed at shmkeeper from here: set-as-default
// is refused (k3s/RKE2 have `--default-runtime` for that).
#pragma once

#include <string>

#include "base/status.h"
#include "install/containerd_config.h"

namespace shmkeeper {

inline constexpr const char* kContainerdBaseTemplate = "{{ template \"base\" . }}\n";

// The template the distribution reads in `dir`: an existing
// config-v3.toml.tmpl, else an existing config.toml.tmpl, else the one for
// `config_version` (3: config-v3.toml.tmpl, else config.toml.tmpl).
std::string ContainerdTemplatePath(const std::string& dir, int64_t config_version);

// Pure: the template text with shmkeeper's block for `rendered` (the
// generated config.toml, named `rendered_name` in errors). `tmpl` is the
// current template ("" when absent: the base template is included).
Result<std::string> WithContainerdTemplateRuntime(const std::string& tmpl, const std::string& rendered,
                                                  const std::string& rendered_name,
                                                  const ContainerdInstallOptions& opts);

// opts.config is the generated config.toml (read, never written); the
// template in `dir` is written (backup once, atomic) or, at uninstall,
// stripped or removed. ConfigChange is the template's.
Result<ConfigChange> InstallContainerdTemplate(const ContainerdInstallOptions& opts, const std::string& dir);
Result<ConfigChange> UninstallContainerdTemplate(const ContainerdInstallOptions& opts, const std::string& dir);

}  // namespace shmkeeper
