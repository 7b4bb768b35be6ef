// The fuzz targets' bodies: each feeds one input to a reader of untrusted bytes the way a
// user's file would reach it, and reports whether it was accepted. The contract under test:
// any input is either accepted or rejected with a dpt::Error; anything else (another
// exception, a crash, a sanitizer report, an allocation beyond libFuzzer's limit) is a bug.
// Built into the libFuzzer executables (tests/fuzz/fuzz_*.cpp, -DDPT_FUZZ=ON) and into
// test_fuzz_regressions, which replays the checked-in corpus and every input that once
// failed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dpt::fuzz {

struct Outcome {
  bool accepted = false;
  std::string error;  // the dpt::Error's message when not accepted
};

// The bytes as an IDX file, read as images and as labels (10 classes); accepted when
// either reads.
Outcome idx(const uint8_t* data, size_t size);
// The bytes as one CIFAR-10 binary file with any number of records.
Outcome cifar10(const uint8_t* data, size_t size);
// The bytes up to the first NUL as a config file; each NUL-separated piece after it as a
// --set override. Accepted configs must survive config_to_yaml -> load_config unchanged
// (io/config.h promises it); a difference aborts.
Outcome config(const uint8_t* data, size_t size);

// The bytes as a safetensors file (the checkpoint and model-weights format). Accepted
// files must keep the parser's promises: every tensor's bytes inside the data section and
// as many as its shape and dtype need; F32 and I64 tensors are then copied out.
Outcome safetensors(const uint8_t* data, size_t size);

// The bytes as a checkpoint's JSON (checkpoint_parse_json, the first thing --resume reads).
// Accepted records must name their tensor files as bare names beside the JSON: never a
// path that leads elsewhere.
Outcome checkpoint(const uint8_t* data, size_t size);

// The targets by name ("idx", "cifar10", "config", "safetensors", "checkpoint"), for the
// regression test; nullptr for an unknown name.
using Target = Outcome (*)(const uint8_t*, size_t);
Target target_named(const std::string& name);

}  // namespace dpt::fuzz
