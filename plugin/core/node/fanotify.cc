#include "node/fanotify.h"

#include <fcntl.h>
#include <sys/fanotify.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "scan/fs_identity.h"

namespace shmkeeper {
namespace {

// The filesystem mark: creates and renames (directory events: they name the
// directory, so they merge). Not removals: each costs the remover an event
// (about 6 % of a create/unlink cycle on the test VM), and the only removals
// that matter are of files a listing showed, which have an inode mark: the
// unlink of a marked inode is its FAN_ATTRIB (vfs_unlink's
// fsnotify_link_count), reported at once, held or not. The inode marks: opens,
// closes and attribute changes. The fallback widens the filesystem mark to
// opens, closes and removals (files probed after it have no inode mark).
constexpr uint64_t kDirMask = FAN_CREATE | FAN_MOVED_FROM | FAN_MOVED_TO | FAN_ONDIR;
constexpr uint64_t kInodeMask = FAN_OPEN | FAN_CLOSE_WRITE | FAN_CLOSE_NOWRITE | FAN_ATTRIB;
constexpr uint64_t kAllUsesMask = FAN_OPEN | FAN_CLOSE_WRITE | FAN_CLOSE_NOWRITE | FAN_DELETE;

// The same number FilesystemId gives for statfs's f_fsid.
uint64_t FsidOf(const __kernel_fsid_t& f) { return FsidFromWords(f.val[0], f.val[1]); }

}  // namespace

Result<std::unique_ptr<Fanotify>> Fanotify::Open() {
  int fd = ::fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK | FAN_REPORT_FID, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "fanotify_init(FAN_REPORT_FID)");
  return std::make_unique<Fanotify>(UniqueFd(fd));
}

Status Fanotify::Mark(int dir_fd, dev_t dev) {
  SHMK_ASSIGN_OR_RETURN(uint64_t fsid, FilesystemId(dir_fd));
  if (::fanotify_mark(fd_.get(), FAN_MARK_ADD | FAN_MARK_FILESYSTEM, kDirMask, dir_fd, nullptr) != 0) {
    return Status::FromErrno(errno, "fanotify_mark(FAN_MARK_FILESYSTEM)");
  }
  MutexLock l(&mu_);
  // A superblock that had this device number before is gone: its events
  // (queued still) name no device.
  std::erase_if(fsids_, [dev](const auto& kv) { return kv.second == dev; });
  fsids_[fsid] = dev;
  return Status::Ok();
}

Status Fanotify::MarkInode(int fd) {
  if (::fanotify_mark(fd_.get(), FAN_MARK_ADD | FAN_MARK_INODE, kInodeMask, fd, nullptr) != 0) {
    return Status::FromErrno(errno, "fanotify_mark(FAN_MARK_INODE)");
  }
  return Status::Ok();
}

Status Fanotify::AllUses(int fd) {
  if (::fanotify_mark(fd_.get(), FAN_MARK_ADD | FAN_MARK_FILESYSTEM, kAllUsesMask, fd, nullptr) != 0) {
    return Status::FromErrno(errno, "fanotify_mark(FAN_MARK_FILESYSTEM, FAN_OPEN | FAN_CLOSE | FAN_DELETE)");
  }
  return Status::Ok();
}

Status Fanotify::Creates(int fd, bool on) {
  unsigned flags = (on ? FAN_MARK_ADD : FAN_MARK_REMOVE) | FAN_MARK_FILESYSTEM;
  if (::fanotify_mark(fd_.get(), flags, FAN_CREATE, fd, nullptr) != 0) {
    return Status::FromErrno(
        errno, on ? "fanotify_mark(FAN_MARK_ADD, FAN_CREATE)" : "fanotify_mark(FAN_MARK_REMOVE, FAN_CREATE)");
  }
  return Status::Ok();
}

void Fanotify::Forget(dev_t dev) {
  MutexLock l(&mu_);
  std::erase_if(fsids_, [dev](const auto& kv) { return kv.second == dev; });
}

bool Fanotify::Read(const std::function<void(const FanEvent&)>& fn) {
  alignas(fanotify_event_metadata) char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd_.get(), buf, sizeof buf);
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    if (n == 0) return true;
    // Decoded under the lock, handed to `fn` after it: no callback runs
    // while this object holds its lock.
    std::vector<FanEvent> events;
    bool broken = false;
    {
      MutexLock l(&mu_);
      // Records are only 4-byte aligned (FID info records are padded to 4), so
      // every structure is copied out of the buffer, never accessed in place.
      size_t total = static_cast<size_t>(n);
      for (size_t at = 0; at + sizeof(fanotify_event_metadata) <= total;) {
        fanotify_event_metadata m;
        std::memcpy(&m, buf + at, sizeof m);
        if (m.vers != FANOTIFY_METADATA_VERSION) {
          broken = true;
          break;
        }
        if (m.event_len < sizeof m || at + m.event_len > total) break;
        FanEvent e;
        e.pid = m.pid;
        e.mask = m.mask;
        if (m.mask & FAN_Q_OVERFLOW) {
          e.overflow = true;
        } else {
          // Info records follow the metadata: the first FID record names the object.
          for (size_t off = m.metadata_len; off + sizeof(fanotify_event_info_header) <= m.event_len;) {
            fanotify_event_info_header hdr;
            std::memcpy(&hdr, buf + at + off, sizeof hdr);
            if (hdr.len == 0 || off + hdr.len > m.event_len) break;
            constexpr size_t kFid = sizeof(fanotify_event_info_fid);
            if (hdr.info_type == FAN_EVENT_INFO_TYPE_FID && hdr.len >= kFid + sizeof(file_handle)) {
              fanotify_event_info_fid fid;
              std::memcpy(&fid, buf + at + off, kFid);
              file_handle fh;
              std::memcpy(&fh, buf + at + off + kFid, sizeof fh);
              auto it = fsids_.find(FsidOf(fid.fsid));
              e.dev = it == fsids_.end() ? 0 : it->second;
              if (fh.handle_type == 1 && fh.handle_bytes == 12 && hdr.len >= kFid + sizeof fh + 12) {
                uint32_t w[3];  // tmpfs: {generation, ino low, ino high} (shmem_encode_fh)
                std::memcpy(w, buf + at + off + kFid + sizeof fh, sizeof w);
                e.ino = static_cast<ino_t>(w[1]) | (static_cast<ino_t>(w[2]) << 32);
              }
              break;
            }
            off += hdr.len;
          }
        }
        events.push_back(e);
        at += m.event_len;
      }
    }
    for (const FanEvent& e : events) fn(e);
    if (broken) return false;
  }
}

}  // namespace shmkeeper
