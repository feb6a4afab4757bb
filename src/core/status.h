// Errors as values. A Status carries a message a user can act on ("model.safetensors: tensor
// 'lm_head.weight' has shape [10, 4], expected [320, 64]"); Result<T> is a value or a Status.
// Exceptions are only caught at the edges (CLI, HTTP) and turned into exit codes / JSON errors.
#pragma once

#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace astrai {

enum class ErrorCode : int {
  ok = 0,
  invalid_argument,    // bad input from a user (bad JSON, wrong field, bad flag)
  not_found,           // missing file / tensor / model
  io,                  // read / write failure
  corrupt,             // malformed file contents
  unsupported,         // valid but not implemented (architecture, rope type, tokenizer component)
  resource_exhausted,  // queue full, out of KV pages
  cancelled,
  internal,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return {}; }
  bool ok() const { return code_ == ErrorCode::ok; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  ErrorCode code_ = ErrorCode::ok;
  std::string message_;
};

inline Status invalid_argument(std::string m) {
  return {ErrorCode::invalid_argument, std::move(m)};
}
inline Status not_found(std::string m) {
  return {ErrorCode::not_found, std::move(m)};
}
inline Status io_error(std::string m) {
  return {ErrorCode::io, std::move(m)};
}
inline Status corrupt(std::string m) {
  return {ErrorCode::corrupt, std::move(m)};
}
inline Status unsupported(std::string m) {
  return {ErrorCode::unsupported, std::move(m)};
}
inline Status resource_exhausted(std::string m) {
  return {ErrorCode::resource_exhausted, std::move(m)};
}
inline Status internal_error(std::string m) {
  return {ErrorCode::internal, std::move(m)};
}

// Thrown only by value() on an error Result, and by code that converts a Status at an edge.
class Error : public std::runtime_error {
 public:
  explicit Error(Status s) : std::runtime_error(s.message()), status_(std::move(s)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) v_ = Status(ErrorCode::internal, "Result constructed from ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  const Status& status() const {
    static const Status ok_s;
    return ok() ? ok_s : std::get<Status>(v_);
  }
  T& value() & {
    if (!ok()) throw Error(std::get<Status>(v_));
    return std::get<T>(v_);
  }
  const T& value() const& {
    if (!ok()) throw Error(std::get<Status>(v_));
    return std::get<T>(v_);
  }
  T&& value() && {
    if (!ok()) throw Error(std::get<Status>(v_));
    return std::get<T>(std::move(v_));
  }
  T& operator*() & { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

// Throws Error when s is not ok: for edges and tests that want exceptions.
inline void check(const Status& s) {
  if (!s.ok()) throw Error(s);
}

}  // namespace astrai

#define ASTRAI_CONCAT_INNER(a, b) a##b
#define ASTRAI_CONCAT(a, b) ASTRAI_CONCAT_INNER(a, b)

// Return the Status of an expression if it failed.
#define ASTRAI_RETURN_IF_ERROR(expr) \
  do {                               \
    ::astrai::Status _st = (expr);   \
    if (!_st.ok()) return _st;       \
  } while (0)

// ASTRAI_ASSIGN_OR_RETURN(auto x, make_x());  declares x or returns the error.
#define ASTRAI_ASSIGN_OR_RETURN(decl, expr) \
  ASTRAI_ASSIGN_OR_RETURN_IMPL(ASTRAI_CONCAT(_res_, __LINE__), decl, expr)
#define ASTRAI_ASSIGN_OR_RETURN_IMPL(tmp, decl, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  decl = std::move(tmp).value()
