// Errors as values for the node agent, the webhook and the CLI (not the shim: it allocates).
// A Status is ok or carries a code and a message that names what failed; Result<T> is a value
// or a failed Status. Both are [[nodiscard]]: a dropped error is a compile error under -Werror.
// Converted to grpc::Status, a per-claim error or an exit code only at the program's edge.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace tessera {

// The few distinctions a caller acts on. The names follow grpc/absl codes so the edge can map
// them one to one.
enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad input: a flag, a claim's parameters, a request
  kNotFound,            // the thing named does not exist (claim, device, file)
  kAlreadyExists,       // a conflicting object or claim holds it
  kFailedPrecondition,  // the system is not in a state to do it (lock held, claim replaced)
  kUnavailable,         // transient: the API server, a daemon, NVML; retrying may help
  kInternal,            // everything else: a syscall failed, a file is corrupt
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {
    assert(code != StatusCode::kOk || message_.empty());
  }

  static Status ok() { return {}; }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "<context>: <message>", same code; ok stays ok.
  Status with_context(std::string_view context) const {
    if (is_ok()) return {};
    std::string joined(context);
    joined += ": ";
    joined += message_;
    return {code_, std::move(joined)};
  }

  // Marks a status as looked at where dropping it is the intent (best-effort cleanup).
  void ignore() const {}

  friend bool operator==(const Status&, const Status&) = default;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string message) {
  return {StatusCode::kInvalidArgument, std::move(message)};
}
inline Status not_found(std::string message) {
  return {StatusCode::kNotFound, std::move(message)};
}
inline Status already_exists(std::string message) {
  return {StatusCode::kAlreadyExists, std::move(message)};
}
inline Status failed_precondition(std::string message) {
  return {StatusCode::kFailedPrecondition, std::move(message)};
}
inline Status unavailable(std::string message) {
  return {StatusCode::kUnavailable, std::move(message)};
}
inline Status internal_error(std::string message) {
  return {StatusCode::kInternal, std::move(message)};
}

// A value, or the Status that says why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit, as absl::StatusOr
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    assert(!status_.is_ok() && "a Result made from a Status must carry an error");
  }

  bool is_ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  T& value() & {
    assert(is_ok());
    return *value_;
  }
  const T& value() const& {
    assert(is_ok());
    return *value_;
  }
  T&& value() && {
    assert(is_ok());
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::optional<T> value_;
  Status status_;
};

// An error handler for TESSERA_ASSIGN_OR_RETURN: the failed Status with "<context>: " before its
// message, same code. `with_context("reading " + path)`.
class StatusContext {
 public:
  explicit StatusContext(std::string context) : context_(std::move(context)) {}
  Status operator()(const Status& status) const { return status.with_context(context_); }

 private:
  std::string context_;
};
inline StatusContext with_context(std::string context) {
  return StatusContext(std::move(context));
}

inline std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kNotFound:
      return "NOT_FOUND";
    case StatusCode::kAlreadyExists:
      return "ALREADY_EXISTS";
    case StatusCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case StatusCode::kInternal:
      return "INTERNAL";
  }
  return "UNKNOWN";
}

}  // namespace tessera

// Returns from the enclosing function when `expr` (a Status) is not ok.
#define TESSERA_RETURN_IF_ERROR(expr)                     \
  do {                                                    \
    ::tessera::Status tessera_status_ = (expr);           \
    if (!tessera_status_.is_ok()) return tessera_status_; \
  } while (false)

// `TESSERA_ASSIGN_OR_RETURN(T name, expr);` where `expr` is a Result<T>: declares `name` holding
// the value, or returns the Status from the enclosing function. The lhs may also be an existing
// variable. A third argument handles the error before it is returned: any callable taking the
// Status, e.g. `with_context("reading " + path)` or a function mapping it to the caller's return
// type; it is evaluated only on error. The lhs must not contain an unparenthesized comma.
#define TESSERA_ASSIGN_OR_RETURN(...)                                      \
  TESSERA_ASSIGN_OR_RETURN_PICK_(__VA_ARGS__, TESSERA_ASSIGN_OR_RETURN_3_, \
                                 TESSERA_ASSIGN_OR_RETURN_2_, unused_)     \
  (__VA_ARGS__)
#define TESSERA_ASSIGN_OR_RETURN_PICK_(lhs, expr, on_error, name, ...) name
#define TESSERA_ASSIGN_OR_RETURN_2_(lhs, expr)                                                 \
  TESSERA_ASSIGN_OR_RETURN_IMPL_(TESSERA_STATUS_CONCAT_(tessera_result_, __LINE__), lhs, expr, \
                                 [](const ::tessera::Status& s) { return s; })
#define TESSERA_ASSIGN_OR_RETURN_3_(lhs, expr, on_error)                                       \
  TESSERA_ASSIGN_OR_RETURN_IMPL_(TESSERA_STATUS_CONCAT_(tessera_result_, __LINE__), lhs, expr, \
                                 on_error)
#define TESSERA_ASSIGN_OR_RETURN_IMPL_(result, lhs, expr, on_error) \
  auto result = (expr);                                             \
  if (!result.is_ok()) return (on_error)(result.status());          \
  lhs = std::move(result).value()
#define TESSERA_STATUS_CONCAT_INNER_(a, b) a##b
#define TESSERA_STATUS_CONCAT_(a, b) TESSERA_STATUS_CONCAT_INNER_(a, b)
