/* libshmkeeper-preload.so: async-signal-safe formatting (no stdio, no malloc)
 * for the ENOSPC message and the creator records. */
#include <string.h>

#include "preload_internal.h"

/* ---- async-signal-safe formatting ---------------------------------------- */

/* Appends `s` to [*p, end), always leaving room for the terminating NUL. */
void put(char** p, char* end, const char* s) {
  while (*s && *p + 1 < end) *(*p)++ = *s++;
  **p = 0;
}

void put_u64(char** p, char* end, unsigned long long v) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (n && *p + 1 < end) *(*p)++ = digits[--n];
  **p = 0;
}

/* "512 B", "64.0 MiB": one decimal above bytes. */
void put_size(char** p, char* end, unsigned long long bytes) {
  static const char* const units[] = {" B", " KiB", " MiB", " GiB", " TiB"};
  unsigned long long div = 1, whole, tenths;
  int u = 0;
  while (u < 4 && bytes / div >= 1024) {
    div *= 1024;
    u++;
  }
  whole = bytes / div;
  tenths = (bytes % div * 10 + div / 2) / div;
  if (u && tenths >= 10) {
    whole++;
    tenths -= 10;
  }
  put_u64(p, end, whole);
  if (u) {
    put(p, end, ".");
    put_u64(p, end, tenths);
  }
  put(p, end, units[u]);
}

/* JSON string contents. */
void put_escaped(char** p, char* end, const char* s) {
  static const char hex[] = "0123456789abcdef";
  char esc[7] = "\\u00";
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      esc[0] = '\\';
      esc[1] = (char)c;
      esc[2] = 0;
    } else if (c < 0x20) {
      memcpy(esc, "\\u00", 4);
      esc[4] = hex[c >> 4];
      esc[5] = hex[c & 15];
      esc[6] = 0;
    } else {
      esc[0] = (char)c;
      esc[1] = 0;
    }
    put(p, end, esc);
  }
}
