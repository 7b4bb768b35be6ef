#include "core/device.h"

#include "core/error.h"

namespace dpt {

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5 &&
      text.find_first_not_of("0123456789", 5) == std::string::npos)
    return cuda(std::stoi(text.substr(5)));
  DPT_FAIL() << "device: expected 'cpu', 'cuda' or 'cuda:N', got '" << text << "'";
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

}  // namespace dpt
