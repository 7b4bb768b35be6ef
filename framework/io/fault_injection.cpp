#include "io/fault_injection.h"

#include <csignal>
#include <cstdlib>
#include <regex>
#include <sstream>

#include "core/error.h"

namespace dpt::io {

FaultInjection FaultInjection::from_env(int rank) {
  const char* spec = std::getenv("DPT_DEBUG_FAULT");
  return spec ? FaultInjection(spec, rank) : FaultInjection();
}

FaultInjection::FaultInjection(const std::string& spec, int rank) {
  static const std::regex pattern(R"((sigkill|sigterm|nan)@(\d{1,15})(?::(\d{1,9}))?)");
  std::stringstream items(spec);
  for (std::string item; std::getline(items, item, ',');) {
    std::smatch m;
    DPT_CHECK(std::regex_match(item, m, pattern))
        << "DPT_DEBUG_FAULT=" << spec << ": expected KIND@STEP[:RANK] items separated by commas, KIND one of "
        << "sigkill, sigterm, nan (e.g. nan@5:1), got '" << item << "'";
    if (m[3].matched && std::stoi(m[3].str()) != rank) continue;
    Kind kind = m[1] == "sigkill" ? Kind::sigkill : m[1] == "sigterm" ? Kind::sigterm : Kind::nan;
    faults_.push_back({kind, std::stoll(m[2].str())});
  }
}

void FaultInjection::before_step(int64_t step) const {
  for (const Fault& f : faults_) {
    if (f.step != step) continue;
    if (f.kind == Kind::sigkill) std::raise(SIGKILL);
    if (f.kind == Kind::sigterm) std::raise(SIGTERM);
  }
}

bool FaultInjection::nan_at(int64_t step) const {
  for (const Fault& f : faults_)
    if (f.kind == Kind::nan && f.step == step) return true;
  return false;
}

}  // namespace dpt::io
