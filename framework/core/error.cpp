#include "core/error.h"

namespace dpt::detail {

std::string ErrorMessage::str() const {
  std::string message = stream_.str();
  if (!message.empty()) return message;
  // A bare check with no message is an internal invariant: say where it is.
  std::ostringstream out;
  out << "internal check failed: " << (condition_ ? condition_ : "DPT_FAIL") << " at " << file_ << ":"
      << line_;
  return out.str();
}

}  // namespace dpt::detail
