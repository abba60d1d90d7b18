// ShellWords (declared in decide/workloads.h): a POSIX shell line split into
// words as shlex does, with operators as words when asked.
#include <string>
#include <string_view>
#include <vector>

#include "decide/workloads.h"

namespace shmkeeper {
namespace {

constexpr size_t kMaxWords = 4096;

// ShellWords' lexer: one method a kind of token; `i` is on the token's first
// character when a method is called and on its last when it returns.
class ShellLexer {
 public:
  ShellLexer(const std::string& text, bool operators) : text_(text), operators_(operators) {}

  std::vector<std::string> Words() {
    for (i_ = 0; i_ < text_.size() && out_.size() < kMaxWords; ++i_) Step(text_[i_]);
    EndWord();
    return std::move(out_);
  }

 private:
  void Step(char c) {
    if (c == '\\' && i_ + 1 < text_.size()) {
      Escape();
    } else if (c == '\'') {
      SingleQuoted();
    } else if (c == '"') {
      DoubleQuoted();
    } else if (c == '#' && !in_word_ && operators_) {
      while (i_ + 1 < text_.size() && text_[i_ + 1] != '\n') ++i_;  // a comment
    } else if (operators_ && std::string_view("&|;\n()").find(c) != std::string_view::npos) {
      Operator(c);
    } else if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      EndWord();
    } else {
      cur_ += c;
      in_word_ = true;
    }
  }

  void Escape() {
    char next = text_[++i_];
    if (next != '\n') {  // a backslash-newline joins lines
      cur_ += next;
      in_word_ = true;
    }
  }

  void SingleQuoted() {
    size_t close = text_.find('\'', i_ + 1);
    if (close == std::string::npos) close = text_.size();
    cur_ += text_.substr(i_ + 1, close - i_ - 1);
    in_word_ = true;
    i_ = close;
  }

  void DoubleQuoted() {
    ++i_;
    while (i_ < text_.size() && text_[i_] != '"') {
      if (text_[i_] == '\\' && i_ + 1 < text_.size() &&
          std::string_view("\"\\$`\n").find(text_[i_ + 1]) != std::string_view::npos)
        ++i_;
      cur_ += text_[i_++];
    }
    in_word_ = true;
  }

  void Operator(char c) {
    EndWord();
    std::string op(1, c);
    if ((c == '&' || c == '|' || c == ';') && i_ + 1 < text_.size() && text_[i_ + 1] == c) op += text_[++i_];
    if (c == '(' || c == ')') op = ";";  // a subshell or $( ... ): its commands are commands too
    out_.push_back(op);
  }

  void EndWord() {
    if (in_word_) out_.push_back(cur_);
    cur_.clear();
    in_word_ = false;
  }

  const std::string& text_;
  const bool operators_;
  size_t i_ = 0;
  std::string cur_;
  bool in_word_ = false;
  std::vector<std::string> out_;
};

}  // namespace

std::vector<std::string> ShellWords(const std::string& text, bool operators) {
  return ShellLexer(text, operators).Words();
}

}  // namespace shmkeeper
