// One exception type for every failure in dpt. The message says what failed, in which
// context (op, shape, config key, file and offset) and what was expected, so that the
// top level can print it as one line and exit non-zero.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace dpt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

// Collects the streamed message; ErrorThrower turns it into an Error.
class ErrorMessage {
 public:
  ErrorMessage(const char* condition, const char* file, int line)
      : condition_(condition), file_(file), line_(line) {}
  template <class T>
  ErrorMessage& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }
  std::string str() const;

 private:
  const char* condition_;
  const char* file_;
  int line_;
  std::ostringstream stream_;
};

struct ErrorThrower {
  // `&` binds more loosely than `<<`, so the whole message is built before this runs.
  [[noreturn]] void operator&(const ErrorMessage& message) const { throw Error(message.str()); }
};

}  // namespace detail
}  // namespace dpt

// DPT_CHECK(n > 0) << "batch_size must be > 0, got " << n;
#define DPT_CHECK(cond)                \
  if (static_cast<bool>(cond)) {       \
  } else                               \
    ::dpt::detail::ErrorThrower() &    \
        ::dpt::detail::ErrorMessage(#cond, __FILE__, __LINE__)

// DPT_FAIL() << "unknown optimizer '" << name << "'";
#define DPT_FAIL() ::dpt::detail::ErrorThrower() & ::dpt::detail::ErrorMessage(nullptr, __FILE__, __LINE__)
