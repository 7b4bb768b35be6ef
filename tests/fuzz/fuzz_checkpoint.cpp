// libFuzzer entry point for the checkpoint target (targets.h). Built with -DDPT_FUZZ=ON; run by
// tools/fuzz.sh.
#include "targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dpt::fuzz::checkpoint(data, size);
  return 0;
}
