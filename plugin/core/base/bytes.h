// Byte sizes as users write them: Kubernetes quantities and Docker/compose sizes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace shmkeeper {

inline constexpr int64_t kKiB = 1024;
inline constexpr int64_t kMiB = 1024 * kKiB;
inline constexpr int64_t kGiB = 1024 * kMiB;
// The /dev/shm size Docker, containerd and CRI-O give every container.
inline constexpr int64_t kEngineDefaultShmBytes = 64 * kMiB;

// Parses a positive size in bytes. Accepted forms (no whitespace anywhere):
//   67108864                       plain bytes
//   2Ki 512Mi 2Gi 1Ti 1Pi 1Ei      Kubernetes binary suffixes (1024-based)
//   500M 1.5G 2T 1P 1E             Kubernetes decimal suffixes (1000-based)
//   1024k 64m 2g 1t 1p, with an optional "b" or "ib" (any case: 10.24gb, 2GB,
//   512MiB, 100b, 2K)              Docker/compose sizes (always 1024-based)
// Lower-case "k" and "m" follow Docker (KiB, MiB), never Kubernetes' decimal
// kilo or milli. Fractions are truncated to whole bytes.
// Errors (kInvalidArgument) quote the input: empty, sign, zero, NaN/inf, more
// than int64 bytes, unknown unit, trailing junk, whitespace.
Result<int64_t> ParseSize(std::string_view text);

// The memory page size of this machine (sysconf(_SC_PAGESIZE)).
int64_t SystemPageSize();

// The size a tmpfs really gets for size=`bytes`: the kernel stores whole pages
// (DIV_ROUND_UP(size, PAGE_SIZE) blocks), so every planned or compared tmpfs
// size goes through this. Where rounding up would pass INT64_MAX, the largest
// whole number of pages below it. REQUIRES: bytes >= 0, page > 0.
int64_t RoundUpToPage(int64_t bytes, int64_t page = SystemPageSize());

// Formats bytes in IEC units for humans: "64MiB", "1.5GiB", "512B".
std::string FormatSize(int64_t bytes);

}  // namespace shmkeeper
