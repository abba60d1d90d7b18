#include "base/bytes.h"

#include <unistd.h>

#include <array>
#include <cctype>
#include <cstdio>
#include <limits>

namespace shmkeeper {
namespace {

struct Unit {
  std::string_view suffix;
  int64_t multiplier;
};

constexpr int64_t kKilo = 1000;
constexpr int64_t kPow1024[] = {1, kKiB, kMiB, kGiB, kGiB * 1024, kGiB * 1024 * 1024, kGiB * 1024 * 1024 * 1024};

// Case-sensitive Kubernetes suffixes. Checked before the Docker forms.
constexpr std::array<Unit, 11> kQuantityUnits = {{
    {"Ki", kPow1024[1]},
    {"Mi", kPow1024[2]},
    {"Gi", kPow1024[3]},
    {"Ti", kPow1024[4]},
    {"Pi", kPow1024[5]},
    {"Ei", kPow1024[6]},
    {"M", kKilo* kKilo},
    {"G", kKilo* kKilo* kKilo},
    {"T", kKilo* kKilo* kKilo* kKilo},
    {"P", kKilo* kKilo* kKilo* kKilo* kKilo},
    {"E", kKilo* kKilo* kKilo* kKilo* kKilo* kKilo},
}};

Status Bad(std::string_view text, std::string_view why) {
  std::string msg = "invalid size \"";
  msg += text;
  msg += "\": ";
  msg += why;
  return Status::Invalid(std::move(msg));
}

// Docker's go-units RAMInBytes: one of b k m g t p (any case), then an
// optional "i", then an optional "b"; all 1024-based.
bool DockerUnit(std::string_view s, int64_t* mult) {
  if (s.empty()) return false;
  static constexpr std::string_view kLetters = "bkmgtp";
  size_t idx = kLetters.find(static_cast<char>(std::tolower(static_cast<unsigned char>(s[0]))));
  if (idx == std::string_view::npos) return false;
  std::string_view rest = s.substr(1);
  if (idx == 0) {
    if (!rest.empty()) return false;
  } else {
    if (!rest.empty() && (rest[0] == 'i' || rest[0] == 'I')) rest.remove_prefix(1);
    if (!rest.empty() && (rest[0] == 'b' || rest[0] == 'B')) rest.remove_prefix(1);
    if (!rest.empty()) return false;
  }
  *mult = kPow1024[idx];
  return true;
}

bool UnitMultiplier(std::string_view suffix, int64_t* mult) {
  if (suffix.empty()) {
    *mult = 1;
    return true;
  }
  for (const Unit& u : kQuantityUnits) {
    if (suffix == u.suffix) {
      *mult = u.multiplier;
      return true;
    }
  }
  return DockerUnit(suffix, mult);
}

}  // namespace

Result<int64_t> ParseSize(std::string_view text) {
  if (text.empty()) return Bad(text, "empty");
  size_t i = 0;
  unsigned __int128 whole = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    whole = whole * 10 + static_cast<unsigned>(text[i] - '0');
    if (whole > std::numeric_limits<int64_t>::max()) return Bad(text, "larger than int64 bytes");
  }
  if (i == 0) {
    if (text[0] == '-') return Bad(text, "negative");
    return Bad(text, "must start with a digit");
  }
  unsigned __int128 frac = 0, frac_scale = 1;
  if (i < text.size() && text[i] == '.') {
    size_t start = ++i;
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
      if (i - start >= 18) return Bad(text, "too many fraction digits");
      frac = frac * 10 + static_cast<unsigned>(text[i] - '0');
      frac_scale *= 10;
    }
    if (i == start) return Bad(text, "no digits after '.'");
  }
  std::string_view suffix = text.substr(i);
  int64_t mult = 0;
  if (!UnitMultiplier(suffix, &mult)) {
    return Bad(text, "unknown unit \"" + std::string(suffix) + "\"");
  }
  unsigned __int128 bytes =
      whole * static_cast<unsigned __int128>(mult) + frac * static_cast<unsigned __int128>(mult) / frac_scale;
  if (bytes > std::numeric_limits<int64_t>::max()) return Bad(text, "larger than int64 bytes");
  if (bytes == 0) return Bad(text, "must be greater than zero");
  return static_cast<int64_t>(bytes);
}

int64_t SystemPageSize() {
  static const int64_t page = [] {
    long n = ::sysconf(_SC_PAGESIZE);
    return n > 0 ? static_cast<int64_t>(n) : int64_t{4096};
  }();
  return page;
}

int64_t RoundUpToPage(int64_t bytes, int64_t page) {
  int64_t whole = bytes / page * page;
  if (whole == bytes) return bytes;
  if (whole > std::numeric_limits<int64_t>::max() - page) return whole;
  return whole + page;
}

std::string FormatSize(int64_t bytes) {
  static constexpr std::array<const char*, 7> kNames = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  size_t unit = 0;
  while (unit + 1 < kNames.size() && bytes >= kPow1024[unit + 1]) ++unit;
  char buf[64];
  if (bytes % kPow1024[unit] == 0) {
    std::snprintf(buf, sizeof buf, "%lld%s", static_cast<long long>(bytes / kPow1024[unit]), kNames[unit]);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(bytes) / static_cast<double>(kPow1024[unit]));
    std::string s(buf);
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
    return s + kNames[unit];
  }
  return buf;
}

}  // namespace shmkeeper
