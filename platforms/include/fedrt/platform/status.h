// Status and Result<T>: how every fedrt library call reports failure.
//
// The library never throws across its API (the embeddable core builds with
// -fno-exceptions). A call returns Status, or Result<T> when it also produces
// a value. The numeric codes are pinned: they are the C API's fedrt_status
// values (fedrt/fedrt.h; the C API's sources static_assert each one) and part
// of the wire protocol's error messages, so new codes are only ever appended.
//
// Thread-safety: values, safe to copy and move between threads.
#ifndef FEDRT_PLATFORM_STATUS_H_
#define FEDRT_PLATFORM_STATUS_H_

#include <new>
#include <string>
#include <utility>

namespace fedrt {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,   // the caller passed something wrong (a flag, a spec)
  kOutOfRange = 2,        // a size or index outside what is allowed
  kCorrupt = 3,           // untrusted bytes failed validation (CRC, header, counts)
  kUnsupported = 4,       // valid request this build or CPU cannot serve
  kNotFound = 5,          // a file or named entity does not exist
  kIoError = 6,           // the operating system reported an error
  kDeadlineExceeded = 7,  // an operation ran out of time
  kUnavailable = 8,       // a peer or server is gone; retrying may help
  kUnauthenticated = 9,   // a key or signature did not match
  kResourceExhausted = 10,// a limit (memory, frame size, file descriptors) was hit
  kFailedPrecondition = 11,// state does not allow this now (wrong round, table version)
  kInternal = 12,         // a bug in fedrt
  kCancelled = 13,        // the caller asked to stop
};

// Returns a stable lower-case name such as "invalid_argument".
const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid_argument: unknown codec 'dqgs'" (or "ok").
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status Corrupt(std::string m) { return {StatusCode::kCorrupt, std::move(m)}; }
inline Status Unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// A value or the Status explaining why there is none. Accessing the value of
// an error Result is a bug; it aborts in every build (no exceptions to throw).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : has_value_(true) { new (&storage_.value) T(std::move(value)); }  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {                        // NOLINT
    if (status_.ok()) status_ = Internal("Result constructed from an OK status without a value");
  }
  Result(const Result& other) : status_(other.status_), has_value_(other.has_value_) {
    if (has_value_) new (&storage_.value) T(other.value_ref());
  }
  Result(Result&& other) noexcept : status_(std::move(other.status_)), has_value_(other.has_value_) {
    if (has_value_) new (&storage_.value) T(std::move(other.value_ref()));
  }
  Result& operator=(Result other) noexcept {
    Reset();
    status_ = std::move(other.status_);
    has_value_ = other.has_value_;
    if (has_value_) new (&storage_.value) T(std::move(other.value_ref()));
    return *this;
  }
  ~Result() { Reset(); }

  bool ok() const { return has_value_; }
  const Status& status() const { return status_; }

  T& value() & { CheckValue(); return value_ref(); }
  const T& value() const& { CheckValue(); return value_ref(); }
  T&& value() && { CheckValue(); return std::move(value_ref()); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  T& value_ref() { return storage_.value; }
  const T& value_ref() const { return storage_.value; }
  void Reset() {
    if (has_value_) value_ref().~T();
    has_value_ = false;
  }
  void CheckValue() const;

  Status status_;
  bool has_value_ = false;
  // The value lives in a union so it is constructed only when present.
  union Storage {
    Storage() {}
    ~Storage() {}
    T value;
  } storage_;
};

namespace internal {
[[noreturn]] void DieOnBadResultAccess(const Status& status);
}  // namespace internal

template <typename T>
void Result<T>::CheckValue() const {
  if (!has_value_) internal::DieOnBadResultAccess(status_);
}

}  // namespace fedrt

// Returns early from the enclosing function when `expr` yields an error Status.
#define FEDRT_RETURN_IF_ERROR(expr)                 \
  do {                                              \
    ::fedrt::Status fedrt_status_ = (expr);         \
    if (!fedrt_status_.ok()) return fedrt_status_;  \
  } while (0)

#endif  // FEDRT_PLATFORM_STATUS_H_
