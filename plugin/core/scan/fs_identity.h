// The identity of a mounted filesystem that the kernel never reuses.
//
// A device number (st_dev) names a superblock only while it lives: a new
// tmpfs gets the lowest free anonymous device number, so under pod churn a
// new pod's /dev/shm often has the number of one that just went, and its
// files the same inode numbers (tmpfs numbers each superblock's inodes from
// the start). Every fact the agent keeps about a file or a filesystem is
// therefore tied to the superblock it was learnt on, by this identity: the
// fsid statfs(2) reports, which tmpfs draws at random for every superblock
// (s_uuid, since Linux 5.13; the same fsid fanotify reports in events). A
// fact whose fsid is not the filesystem's now is another filesystem's and is
// dropped, never inherited.
//
// Thread-safety: plain functions.
#pragma once

#include <cstdint>

#include "base/status.h"

namespace shmkeeper {

// The fsid of the filesystem of `fd` as one number (the two 32-bit words of
// statfs's f_fsid, first word high: the encoding fanotify events are decoded
// with, see FsidFromWords). An error when fstatfs fails or the filesystem
// reports no fsid (0), which then has no identity the agent can trust.
Result<uint64_t> FilesystemId(int fd);

// The number for fsid words `first`, `second` (f_fsid.__val / fsid.val).
inline uint64_t FsidFromWords(int32_t first, int32_t second) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(first)) << 32) | static_cast<uint32_t>(second);
}

}  // namespace shmkeeper
