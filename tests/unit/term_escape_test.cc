#include "base/term_escape.h"

#include <gtest/gtest.h>

namespace shmkeeper {
namespace {

TEST(TermEscapeTest, PlainTextAndUtf8AreKept) {
  EXPECT_EQ(TermEscape("torch_1234_0"), "torch_1234_0");
  EXPECT_EQ(TermEscape("ns/pod-\xc3\xa9t\xc3\xa9 \xe2\x9c\x93"), "ns/pod-\xc3\xa9t\xc3\xa9 \xe2\x9c\x93");
  EXPECT_EQ(TermEscape("a\\xff"), "a\\xff");  // the agent's escaping of non-UTF-8 bytes passes through
  EXPECT_EQ(TermEscape(""), "");
}

TEST(TermEscapeTest, ControlCharactersAreEscaped) {
  EXPECT_EQ(TermEscape("a\nb"), "a\\nb");
  EXPECT_EQ(TermEscape("\a\b\t\n\v\f\r"), "\\a\\b\\t\\n\\v\\f\\r");
  EXPECT_EQ(TermEscape(std::string("x\0y", 3)), "x\\x00y");
  EXPECT_EQ(TermEscape("\x1b[2K"), "\\x1b[2K");
  EXPECT_EQ(TermEscape("\x7f"), "\\x7f");
}

TEST(TermEscapeTest, TheIssuesForgedRowBecomesOneLine) {
  std::string name = "/dev/shm/torch_99995_0\ncoredns  dev-shm-forged-row  1GiB  held\x1b]0;PWNED\a\x1b[2K";
  std::string out = TermEscape(name);
  EXPECT_EQ(out, "/dev/shm/torch_99995_0\\ncoredns  dev-shm-forged-row  1GiB  held\\x1b]0;PWNED\\a\\x1b[2K");
  EXPECT_EQ(out.find('\n'), std::string::npos);
  EXPECT_EQ(out.find('\x1b'), std::string::npos);
}

TEST(TermEscapeTest, InvalidUtf8IsEscapedPerByte) {
  EXPECT_EQ(TermEscape("a\xff"
                       "b"),
            "a\\xffb");
  EXPECT_EQ(TermEscape("\xc3"), "\\xc3");                             // truncated sequence
  EXPECT_EQ(TermEscape("\xc0\xaf"), "\\xc0\\xaf");                    // overlong '/'
  EXPECT_EQ(TermEscape("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a surrogate
  EXPECT_EQ(TermEscape("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
}

TEST(TermEscapeTest, C1ControlsAndBidiOverridesAreEscaped) {
  EXPECT_EQ(TermEscape("\xc2\x9b"
                       "2J"),
            "\\u009b2J");  // 8-bit CSI
  EXPECT_EQ(TermEscape("a\xe2\x80\xae"
                       "b"),
            "a\\u202eb");                            // RIGHT-TO-LEFT OVERRIDE
  EXPECT_EQ(TermEscape("\xe2\x81\xa6"), "\\u2066");  // LEFT-TO-RIGHT ISOLATE
  EXPECT_EQ(TermEscape("\xe2\x80\xa8"), "\\u2028");  // LINE SEPARATOR
}

}  // namespace
}  // namespace shmkeeper
