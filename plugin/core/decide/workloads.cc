#include "decide/workloads.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <string_view>

namespace shmkeeper {

std::string ImageRepository(std::string image) {
  if (size_t at = image.find('@'); at != std::string::npos) image.resize(at);
  size_t slash = image.rfind('/');
  size_t colon = image.rfind(':');
  if (colon != std::string::npos && (slash == std::string::npos || colon > slash)) image.resize(colon);
  return image;
}

namespace {

// The words of an image's tag, split at - _ . and where letters and digits meet.
std::vector<std::string> TagWords(const std::string& image) {
  std::string name = image.substr(0, image.find('@'));
  std::string repo = ImageRepository(name);
  std::vector<std::string> out;
  if (repo.size() >= name.size()) return out;
  std::string cur;
  auto end = [&] {
    if (!cur.empty()) out.push_back(cur);
    cur.clear();
  };
  for (char c : name.substr(repo.size() + 1)) {
    bool alpha = std::isalpha(static_cast<unsigned char>(c)) != 0;
    if (c == '-' || c == '_' || c == '.') {
      end();
    } else {
      if (!cur.empty() && alpha != (std::isalpha(static_cast<unsigned char>(cur.back())) != 0)) end();
      cur += c;
    }
  }
  end();
  return out;
}

bool PrefixOrEqual(const std::string& pattern, const std::string& value) {
  if (pattern.ends_with('*')) return value.starts_with(pattern.substr(0, pattern.size() - 1));
  return value == pattern;
}

bool AnyOf(const std::vector<std::string>& values, const std::string& pattern) {
  return std::any_of(values.begin(), values.end(), [&](const std::string& v) { return PrefixOrEqual(pattern, v); });
}

// The words of an image's repository path, registry host dropped, split at / - _ .
std::vector<std::string> ImageTokens(const std::string& image) {
  std::string repo = ImageRepository(image);
  size_t slash = repo.find('/');
  if (slash != std::string::npos) {
    std::string host = repo.substr(0, slash);
    if (host.find('.') != std::string::npos || host.find(':') != std::string::npos || host == "localhost")
      repo = repo.substr(slash + 1);
  }
  std::vector<std::string> out;
  std::string cur;
  for (char c : repo + "/") {
    if (c == '/' || c == '-' || c == '_' || c == '.') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  return out;
}

bool ImageIs(const std::string& image, const std::string& value) {
  std::string repo = ImageRepository(image);
  return !repo.empty() && (repo == value || repo.ends_with("/" + value));
}

// Every T of "T+U+..." is a word of one of the images.
bool HasTokens(const std::string& image, const std::string& value) {
  if (image.empty()) return false;
  std::vector<std::string> tokens = ImageTokens(image);
  size_t start = 0;
  while (start <= value.size()) {
    size_t plus = value.find('+', start);
    std::string t = value.substr(start, plus == std::string::npos ? std::string::npos : plus - start);
    if (std::find(tokens.begin(), tokens.end(), t) == tokens.end()) return false;
    if (plus == std::string::npos) break;
    start = plus + 1;
  }
  return true;
}

bool UnderPath(const std::string& path, const std::string& dir) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p == dir || p.starts_with(dir + "/");
}

bool Matches(const std::string& pattern, const WorkloadSignals& s) {
  size_t colon = pattern.find(':');
  std::string kind = pattern.substr(0, colon), value = pattern.substr(colon + 1);
  if (kind == "image" || kind == "token") {
    auto one = [&](const std::string& image) {
      return kind == "image" ? ImageIs(image, value) : HasTokens(image, value);
    };
    return one(s.image) || std::any_of(s.base_images.begin(), s.base_images.end(), one);
  }
  if (kind == "tag") {
    std::vector<std::string> words = TagWords(s.image);
    return std::find(words.begin(), words.end(), value) != words.end();
  }
  if (kind == "prog") return AnyOf(s.programs, value);
  if (kind == "cmd") return AnyOf(s.words, value);
  if (kind == "env") return AnyOf(s.env_keys, value);
  if (kind == "pkg") return AnyOf(s.packages, value);
  if (kind == "port") return AnyOf(s.ports, value);
  if (kind == "health") return AnyOf(s.health_words, value);
  if (kind == "mount") {
    return std::any_of(s.mounts.begin(), s.mounts.end(), [&](const std::string& m) { return UnderPath(m, value); });
  }
  if (kind == "text") return s.text.find(value) != std::string::npos;
  if (kind == "word") {
    for (size_t at = s.text.find(value); at != std::string::npos; at = s.text.find(value, at + 1)) {
      if (at == 0 || !std::isalpha(static_cast<unsigned char>(s.text[at - 1]))) return true;
    }
  }
  return false;
}

// client:NAME of row `w`: NAME runs, and none of the row's programs does.
bool IsClientOnly(const ShmWorkload& w, const std::string& name, const WorkloadSignals& s) {
  if (!AnyOf(s.programs, name)) return false;
  return std::none_of(w.evidence.begin(), w.evidence.end(),
                      [&](const char* p) { return std::string(p).starts_with("prog:") && Matches(p, s); });
}

// A prefix pattern ("?env:puppeteer_*") as the value that matched it
// ("?env:puppeteer_skip_download"), so that a finding names what is there.
std::string Concrete(const char* p, const WorkloadSignals& s) {
  std::string pattern = p;
  size_t colon = pattern.find(':');
  if (colon == std::string::npos || !pattern.ends_with('*')) return pattern;
  std::string kind = pattern.substr(0, colon), value = pattern.substr(colon + 1);
  if (kind.starts_with("?") || kind.starts_with("+") || kind.starts_with("-")) kind = kind.substr(1);
  const std::vector<std::string>* values = kind == "env" ? &s.env_keys : kind == "prog" ? &s.programs : nullptr;
  if (values == nullptr) return pattern;
  for (const std::string& v : *values) {
    if (PrefixOrEqual(value, v)) return pattern.substr(0, colon + 1) + v;
  }
  return pattern;
}

}  // namespace

std::vector<ShmWorkloadMatch> ExplainShmWorkloads(const WorkloadSignals& s) {
  std::vector<ShmWorkloadMatch> out;
  for (const ShmWorkload& w : ShmWorkloads()) {
    // Plain patterns suffice; "?" ones need a "+" one and no "-" one.
    std::string strong;
    std::vector<std::string> weak, support;
    bool against = false;
    for (const char* p : w.evidence) {
      char c = p[0];
      bool prefixed = c == '?' || c == '+' || c == '-';
      if (!Matches(prefixed ? p + 1 : p, s)) continue;
      if (!prefixed && strong.empty()) strong = Concrete(p, s);
      if (c == '?') weak.push_back(Concrete(p, s));
      if (c == '+') support.push_back(Concrete(p, s));
      against = against || c == '-';
    }
    ShmWorkloadMatch m{&w, strong, ""};
    // A weak sign with support from another pattern ("?mount:X" is not supported by "+mount:X").
    for (size_t i = 0; m.sign.empty() && !against && i < weak.size(); ++i) {
      for (const std::string& sup : support) {
        if (sup.substr(1) != weak[i].substr(1)) {
          m.sign = weak[i] + " " + sup;
          break;
        }
      }
    }
    if (m.sign.empty()) continue;
    auto stops = [&](const char* p) {
      std::string pattern = p;
      return pattern.starts_with("client:") ? IsClientOnly(w, pattern.substr(7), s) : Matches(pattern, s);
    };
    if (auto stop = std::find_if(w.unless.begin(), w.unless.end(), stops); stop != w.unless.end()) m.stopped_by = *stop;
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<const ShmWorkload*> MatchShmWorkloads(const WorkloadSignals& s) {
  std::vector<const ShmWorkload*> out;
  for (const ShmWorkloadMatch& m : ExplainShmWorkloads(s)) {
    if (m.stopped_by.empty()) out.push_back(m.row);
  }
  return out;
}

namespace {

std::string DescribeOne(const std::string& pattern) {
  size_t colon = pattern.find(':');
  std::string kind = pattern.substr(0, colon), value = pattern.substr(colon + 1);
  static const std::vector<std::pair<std::string, std::string>> kWords = {{"image", "image "},
                                                                          {"prog", "runs "},
                                                                          {"cmd", "its command has "},
                                                                          {"env", "environment "},
                                                                          {"text", "its settings name "},
                                                                          {"word", "its settings name "},
                                                                          {"token", "image name has "},
                                                                          {"tag", "image tag has "},
                                                                          {"pkg", "the image installs "},
                                                                          {"mount", "a volume at "},
                                                                          {"port", "port "},
                                                                          {"health", "its healthcheck runs "},
                                                                          {"client", "the client "}};
  for (const auto& [k, words] : kWords) {
    if (k != kind) continue;
    if (kind == "env") {
      for (char& c : value) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
    return words + value;
  }
  return pattern;
}

}  // namespace

std::string DescribeSign(const std::string& sign) {
  size_t space = sign.find(' ');
  auto strip = [](std::string p) { return !p.empty() && (p[0] == '?' || p[0] == '+') ? p.substr(1) : p; };
  if (space == std::string::npos) return DescribeOne(strip(sign));
  return DescribeOne(strip(sign.substr(0, space))) + ", with " + DescribeOne(strip(sign.substr(space + 1)));
}

void AddCommandWords(const std::string& text, bool program, WorkloadSignals* s) {
  static constexpr std::string_view kSeparators = " \t\r\n'\"`;&|()<>=,";
  size_t i = 0;
  bool first = true;
  while (i < text.size() && s->words.size() < 4096) {
    i = text.find_first_not_of(kSeparators, i);
    if (i == std::string::npos) break;
    size_t end = text.find_first_of(kSeparators, i);
    std::string word = text.substr(i, end == std::string::npos ? std::string::npos : end - i);
    i = end == std::string::npos ? text.size() : end;
    if (!word.starts_with("-") && word.find('/') != std::string::npos) word = word.substr(word.rfind('/') + 1);
    for (char& c : word) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (word.empty()) continue;
    if (program && first) {
      std::string prog = word;
      while (!prog.empty() && prog.back() == ':') prog.pop_back();
      s->programs.push_back(prog);
    }
    first = false;
    s->words.push_back(std::move(word));
  }
}

namespace {

constexpr size_t kMaxWords = 4096;
constexpr int kMaxShellDepth = 4;

std::string LowerBase(std::string word) {
  if (!word.starts_with("-") && word.find('/') != std::string::npos) word = word.substr(word.rfind('/') + 1);
  for (char& c : word) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  while (!word.empty() && word.back() == ':') word.pop_back();
  return word;
}

bool IsShell(const std::string& prog) {
  static const std::set<std::string> kShells = {"sh", "bash", "dash", "ash", "zsh", "ksh", "busybox"};
  return kShells.count(prog) > 0;
}

bool IsOperator(const std::string& w) {
  return w == "&&" || w == "||" || w == ";" || w == "|" || w == "&" || w == "\n" || w == ";;";
}

// Shell words that start a command's place again: keywords and grouping.
bool IsKeyword(const std::string& w) {
  static const std::set<std::string> kKeywords = {"if",    "then",  "else", "elif", "fi", "do", "done",
                                                  "while", "until", "!",    "{",    "}",  "(",  ")",
                                                  "time",  "case",  "esac", "for",  "in"};
  return kKeywords.count(w) > 0;
}

void AddScript(const std::string& text, WorkloadSignals* s, int depth);

// Wrappers that run the program after their own -flags (and an optional "--").
bool IsExecWrapper(const std::string& prog) {
  static const std::set<std::string> kWrappers = {"exec",   "nohup",     "time",      "command",  "sudo",
                                                  "tini",   "dumb-init", "catatonit", "env",      "nice",
                                                  "ionice", "stdbuf",    "setsid",    "xvfb-run", "--"};
  return kWrappers.count(prog) > 0;
}

// Wrappers that take a user, then the program.
bool IsUserWrapper(const std::string& prog) {
  static const std::set<std::string> kWrappers = {"gosu", "su-exec", "chpst", "runuser", "s6-setuidgid"};
  return kWrappers.count(prog) > 0;
}

// VAR=value before the program.
bool IsAssignment(const std::string& raw) {
  return raw.find('=') != std::string::npos && raw.find('/') == std::string::npos && !raw.starts_with("-");
}

std::vector<std::string> Tail(const std::vector<std::string>& argv, size_t from) {
  return std::vector<std::string>(argv.begin() + static_cast<long>(from), argv.end());
}

void AddProgramOf(const std::vector<std::string>& argv, WorkloadSignals* s, int depth);

// `prog` at argv[i] is a shell (or su): sh -c SCRIPT, bash -ec SCRIPT,
// su postgres -c SCRIPT, busybox sh -c; sh /start.sh names its script.
void AddShellCommand(const std::vector<std::string>& argv, size_t i, const std::string& prog, WorkloadSignals* s,
                     int depth) {
  for (size_t j = i + 1; j < argv.size(); ++j) {
    const std::string& a = argv[j];
    if (a.starts_with("-") && !a.starts_with("--") && a.find('c') != std::string::npos && j + 1 < argv.size()) {
      if (depth < kMaxShellDepth) AddScript(argv[j + 1], s, depth + 1);
      break;
    }
    if (prog == "busybox" && j == i + 1 && IsShell(LowerBase(a))) continue;
    if (!a.starts_with("-") && prog != "su") break;  // sh script.sh: the script is the program
  }
  if (i + 1 < argv.size() && !argv[i + 1].starts_with("-") && IsShell(prog) && prog != "busybox")
    s->programs.push_back(LowerBase(argv[i + 1]));  // sh /start.sh
}

// What `prog` at argv[i] runs in turn: a shell's script, an entrypoint
// script's arguments (docker-entrypoint.sh postgres -c ...), the program
// after "--" (wait-for-it.sh db:5432 -- postgres).
void AddProgramsRunBy(const std::vector<std::string>& argv, size_t i, const std::string& prog, WorkloadSignals* s,
                      int depth) {
  if (IsShell(prog) || prog == "su") {
    AddShellCommand(argv, i, prog, s, depth);
  } else if (prog.find("entrypoint") != std::string::npos && i + 1 < argv.size() && !argv[i + 1].starts_with("-") &&
             depth < kMaxShellDepth) {
    AddProgramOf(Tail(argv, i + 1), s, depth + 1);
  }
  if (IsShell(prog) || depth >= kMaxShellDepth) return;
  for (size_t j = i + 1; j + 1 < argv.size(); ++j) {
    if (argv[j] == "--") {
      AddProgramOf(Tail(argv, j + 1), s, depth + 1);
      return;
    }
  }
}

// The program argv runs, through wrappers; shells' -c scripts recursively.
void AddProgramOf(const std::vector<std::string>& argv, WorkloadSignals* s, int depth) {
  size_t i = 0;
  while (i < argv.size() && s->programs.size() < kMaxWords) {
    std::string prog = IsAssignment(argv[i]) ? "" : LowerBase(argv[i]);
    if (prog.empty() || IsKeyword(prog)) {
      ++i;
      continue;
    }
    if (IsExecWrapper(prog)) {
      ++i;  // the wrapper's own -flags follow, then the program
      while (i < argv.size() && argv[i].starts_with("-") && argv[i] != "--") ++i;
      if (i < argv.size() && argv[i] == "--") ++i;
      continue;
    }
    if (IsUserWrapper(prog)) {
      i += 2;  // the user, then the program
      while (i < argv.size() && argv[i].starts_with("-")) ++i;
      continue;
    }
    s->programs.push_back(prog);
    AddProgramsRunBy(argv, i, prog, s, depth);
    return;
  }
}

void AddWords(const std::vector<std::string>& words, WorkloadSignals* s) {
  for (const std::string& w : words) {
    if (s->words.size() >= kMaxWords) return;
    AddCommandWords(w, false, s);
  }
}

void AddScript(const std::string& text, WorkloadSignals* s, int depth) {
  std::vector<std::string> words = ShellWords(text, true);
  std::vector<std::string> cmd;
  auto flush = [&] {
    if (!cmd.empty()) AddProgramOf(cmd, s, depth);
    cmd.clear();
  };
  for (const std::string& w : words) {
    if (IsOperator(w)) {
      flush();
    } else if (cmd.empty() && IsKeyword(w)) {
      continue;
    } else {
      cmd.push_back(w);
    }
  }
  flush();
  AddWords(words, s);
}

}  // namespace

void AddArgv(const std::vector<std::string>& argv, WorkloadSignals* s) {
  AddProgramOf(argv, s, 0);
  AddWords(argv, s);
}

void AddShellScript(const std::string& text, WorkloadSignals* s) { AddScript(text, s, 0); }

}  // namespace shmkeeper
