#include "nri_rootfs.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <sched.h>
#include <sys/mount.h>

#include <cerrno>

#include "base/json.h"
#include "containerd/snapshots.grpc.pb.h"
#include "decide/size_container.h"

namespace shmkeeper::agent {
namespace api = ::nri::pkg::api::v1alpha1;
namespace snapshots = ::containerd::services::snapshots::v1;
namespace {

// The value of `key=` among a mount's options, "" when absent.
std::string Option(const SnapshotMount& m, const std::string& key) {
  for (const std::string& o : m.options) {
    if (o.starts_with(key + "=")) return o.substr(key.size() + 1);
  }
  return "";
}

// A read-only overlay of `lowerdir` (top first, ':'-separated), unattached.
Result<UniqueFd> MountOverlay(const std::string& lowerdir) {
  UniqueFd fs(::fsopen("overlay", FSOPEN_CLOEXEC));
  if (!fs.valid()) return Status::FromErrno(errno, "fsopen overlay");
  if (::fsconfig(fs.get(), FSCONFIG_SET_STRING, "lowerdir", lowerdir.c_str(), 0) != 0) {
    return Status::FromErrno(errno, "overlay lowerdir=" + lowerdir);
  }
  if (::fsconfig(fs.get(), FSCONFIG_SET_FLAG, "ro", nullptr, 0) != 0) return Status::FromErrno(errno, "overlay ro");
  if (::fsconfig(fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
    return Status::FromErrno(errno, "mount the image's overlay (lowerdir=" + lowerdir + ")");
  }
  UniqueFd mnt(::fsmount(fs.get(), FSMOUNT_CLOEXEC,
                         MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC));
  if (!mnt.valid()) return Status::FromErrno(errno, "fsmount the image's overlay");
  return mnt;
}

// What the child answers: the decision and the spec it edited (JSON; the
// child makes no protobuf call: a lock another thread of the agent held at
// the fork would never be released in it).
std::string EncodeInjection(const NriInjection& inj, const Spec& spec) {
  Json doc = {{"preload", inj.preload}, {"cuda", inj.cuda}, {"notes", inj.notes}, {"spec", spec.doc()}};
  return DumpJson(doc);
}

NriInjection DecodeInjection(const std::string& text, const Spec& before) {
  NriInjection inj;
  Json doc = Json::parse(text, nullptr, false);
  auto spec = doc.is_object() ? doc.find("spec") : doc.end();
  Result<Spec> after =
      spec != doc.end() ? Spec::Parse(DumpJson(*spec), "the injected spec") : Result<Spec>(Status::Internal("no spec"));
  if (!after.ok()) {
    inj.preload = "skip: " + std::string(kNoImage) + ": an unreadable answer from the runtime's mount namespace";
    return inj;
  }
  inj.preload = StringField(doc, "preload");
  inj.cuda = StringField(doc, "cuda");
  if (auto n = doc.find("notes"); n != doc.end() && n->is_array()) {
    for (const Json& s : *n) {
      if (s.is_string()) inj.notes.push_back(s.get<std::string>());
    }
  }
  inj.adjust = AdjustmentOf(before, *after);
  return inj;
}

// In the child joined to the runtime's mount namespace: a private copy of it
// with a /proc of the agent's pid namespace, so that /proc/self (which the
// rootfs checks read fds through) is the child's; the runtime's /proc may be
// another pid namespace's (a runtime in a pid namespace of its own), where
// the child has no pid. Nothing of it is seen outside the child.
Status OwnProc() {
  if (::unshare(CLONE_NEWNS) != 0) return Status::FromErrno(errno, "unshare the mount namespace");
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return Status::FromErrno(errno, "rprivate /");
  if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
    return Status::FromErrno(errno, "mount /proc");
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<SnapshotMount>> SnapshotMounts(const std::string& endpoint, const std::string& key,
                                                  std::chrono::milliseconds timeout) {
  std::string target = endpoint.starts_with("/") ? "unix://" + endpoint : endpoint;
  auto stub = snapshots::Snapshots::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  ctx.AddMetadata("containerd-namespace", kContainerdCriNamespace);
  snapshots::MountsRequest req;
  req.set_snapshotter(kContainerdSnapshotter);
  req.set_key(key);
  snapshots::MountsResponse resp;
  grpc::Status s = stub->Mounts(&ctx, req, &resp);
  if (!s.ok()) {
    return Status::NotFound("containerd " + target + ": the " + kContainerdSnapshotter + " snapshot " + key + ": " +
                            s.error_message());
  }
  std::vector<SnapshotMount> out;
  for (const snapshots::Mount& m : resp.mounts()) {
    out.push_back({m.type(), m.source(), {m.options().begin(), m.options().end()}});
  }
  return out;
}

Result<UniqueFd> OpenSnapshotReadOnly(const std::vector<SnapshotMount>& mounts) {
  if (mounts.size() != 1) return Status::Invalid("the snapshot has " + std::to_string(mounts.size()) + " mounts");
  const SnapshotMount& m = mounts[0];
  if (m.type == "bind") {  // a snapshot of no parent: its directory is the image
    UniqueFd fd(::open(m.source.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd.valid()) return Status::FromErrno(errno, "open the snapshot " + m.source);
    return fd;
  }
  if (m.type != "overlay") return Status::Invalid("a snapshot mount of type " + m.type);
  std::string lower = Option(m, "lowerdir"), upper = Option(m, "upperdir");
  if (lower.empty() && upper.empty()) return Status::Invalid("an overlay snapshot without layers");
  return MountOverlay(upper.empty() ? lower : lower.empty() ? upper : upper + ":" + lower);
}

NriInjection InjectThroughRuntime(RuntimeMountNsOs& ns, const api::PodSandbox& pod, const api::Container& container,
                                  const Config& config) {
  std::string no_rootfs;
  std::vector<SnapshotMount> mounts;
  if (config.agent.cri_socket.empty()) {
    no_rootfs = std::string(kNoImage) + " (agent.criSocket is none) to tell a glibc image";
  } else if (Result<std::vector<SnapshotMount>> m =
                 SnapshotMounts(config.agent.cri_socket, container.id(), std::chrono::seconds(2));
             m.ok()) {
    mounts = std::move(*m);
  } else {
    no_rootfs = std::string(kNoImage) + ": " + m.status().message();
  }
  const std::string runtime_dir = ExecutableDir();
  const bool joined = ns.joined();
  Result<std::string> out = ns.RunInChild([&] {
    std::string why = no_rootfs;
    UniqueFd root;
    if (why.empty() && joined) {
      if (Status s = OwnProc(); !s.ok()) why = std::string(kNoImage) + ": " + s.message();
    }
    if (why.empty()) {
      Result<UniqueFd> r = OpenSnapshotReadOnly(mounts);
      if (r.ok()) root = std::move(*r);
      if (!r.ok()) why = std::string(kNoImage) + ": " + r.status().message();
    }
    Result<Spec> spec =
        NriContainerSpec(pod, container, root.valid() ? "/proc/self/fd/" + std::to_string(root.get()) : "");
    if (!spec.ok()) return std::string("E") + spec.status().message();
    NriInjection inj = InjectIntoSpec(&*spec, config, root.valid() ? "" : why, runtime_dir);
    return EncodeInjection(inj, *spec);
  });
  Result<Spec> before = NriContainerSpec(pod, container, "");
  if (!out.ok() || !before.ok() || out->starts_with("E")) {
    NriInjection inj;
    std::string why = !out.ok() ? out.status().message() : !before.ok() ? before.status().message() : out->substr(1);
    inj.preload = "skip: " + std::string(kNoImage) + ": " + why;
    return inj;
  }
  return DecodeInjection(*out, *before);
}

}  // namespace shmkeeper::agent
