#!/usr/bin/env bash
# The test suite: installs what is missing, builds, and runs every test with CTest.
#   tools/test.sh [extra ctest arguments]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$DPT_ROOT/build"
ctest --output-on-failure -j "$(nproc)" "$@"
