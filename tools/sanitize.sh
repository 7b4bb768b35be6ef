#!/usr/bin/env bash
# The test suite under AddressSanitizer and UndefinedBehaviorSanitizer: builds build-asan/
# with -DDPT_SANITIZE=ON (RelWithDebInfo) and runs every test with CTest. The sanitizers'
# settings and suppressions are compiled into the programs (tools/sanitizers/); any report
# fails the test that caused it.
#   tools/sanitize.sh [extra ctest arguments]      e.g. tools/sanitize.sh -R Idx
set -euo pipefail
DPT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DPT_INSTALL_ONLY=1 source "$DPT_ROOT/tools/setup.sh"  # the packages (gcc brings libasan and libubsan)
cmake -S "$DPT_ROOT" -B "$DPT_ROOT/build-asan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDPT_SANITIZE=ON >/dev/null
cmake --build "$DPT_ROOT/build-asan" -j "$(nproc)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Sanitized programs run several times slower: a longer limit than CTEST's default per test.
ctest --test-dir "$DPT_ROOT/build-asan" --output-on-failure --timeout 900 -j "$(nproc)" "$@"
