// Status and Result<T>: the error type of every fallible call in shmkeeper.
//
// An error carries a code, the errno that caused it (0 when none) and a message
// built from context, outermost first ("load spec: read /b/config.json: No such
// file or directory"). Exactly one place per binary turns a Status into an exit.
//
// Thread-safety: values; safe to copy and pass between threads.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace shmkeeper {

enum class Code {
  kOk = 0,
  kInvalidArgument,     // bad user input: sizes, annotations, config values
  kNotFound,            // a named thing does not exist
  kFailedPrecondition,  // the system is not in a state the call can act on
  kIo,                  // an OS call failed
  kInternal,            // a bug or an unexpected state
};

// [[nodiscard]]: a Status is handled or explicitly discarded with a reason
// (`(void)` with a comment saying why the caller may ignore it).
class [[nodiscard]] Status {
 public:
  Status() = default;  // OK

  static Status Ok() { return Status(); }
  static Status Invalid(std::string msg) { return Status(Code::kInvalidArgument, 0, std::move(msg)); }
  static Status NotFound(std::string msg) { return Status(Code::kNotFound, 0, std::move(msg)); }
  static Status Precondition(std::string msg) { return Status(Code::kFailedPrecondition, 0, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(Code::kInternal, 0, std::move(msg)); }
  // Maps errno to a Status: "context: strerror(err)". ENOENT maps to kNotFound,
  // EINVAL to kInvalidArgument, the rest to kIo.
  static Status FromErrno(int err, std::string_view context);

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  int err() const { return errno_; }
  const std::string& message() const { return message_; }
  bool IsUserError() const { return code_ == Code::kInvalidArgument; }

  // Returns a copy whose message is "outer: <this message>". OK stays OK.
  Status WithContext(std::string_view outer) const;

 private:
  Status(Code code, int err, std::string msg) : code_(code), errno_(err), message_(std::move(msg)) {}
  Code code_ = Code::kOk;
  int errno_ = 0;
  std::string message_;
};

// Result<T> holds either a T or a non-OK Status. Constructed from an OK
// Status (a bug in the caller), it holds a kInternal error instead, in every
// build type: an OK status can never pass for a value or for an error.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}                          // NOLINT: implicit by design
  Result(Status status) : v_(ErrorOrInternal(std::move(status))) {}  // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  // REQUIRES: ok().
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  static Status ErrorOrInternal(Status status) {
    return status.ok() ? Status::Internal("internal error: an OK status was returned as an error") : status;
  }
  std::variant<T, Status> v_;
};

#define SHMK_CONCAT_INNER(a, b) a##b
#define SHMK_CONCAT(a, b) SHMK_CONCAT_INNER(a, b)

// Returns the Status of `expr` from the enclosing function when it is an error.
#define SHMK_RETURN_IF_ERROR(expr)         \
  do {                                     \
    ::shmkeeper::Status _shmk_st = (expr); \
    if (!_shmk_st.ok()) return _shmk_st;   \
  } while (0)

// Evaluates a Result<T> expression; on error returns its Status, else moves the
// value into `lhs` (which may be a declaration: `auto x`).
#define SHMK_ASSIGN_OR_RETURN(lhs, expr) SHMK_ASSIGN_OR_RETURN_IMPL(SHMK_CONCAT(_shmk_res_, __COUNTER__), lhs, expr)
#define SHMK_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

// `text` with newlines and other control bytes escaped (\n, \r, \xNN), for
// quoting untrusted input inside a one-line error message.
std::string EscapeControl(std::string_view text);

// `text` unchanged when it is valid UTF-8; else each byte that is not part of
// a valid UTF-8 sequence becomes \xNN. For names from the kernel (file names,
// command lines) on their way into protobuf strings, which must be UTF-8.
std::string EscapeInvalidUtf8(std::string_view text);

}  // namespace shmkeeper
