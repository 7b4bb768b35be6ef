#!/usr/bin/env bash
# The test suite: installs what is missing, builds, and runs every test with CTest.
#   tools/test.sh [extra ctest arguments]
# Builds in build/ with the CUDA backend when CUDA is found; DPT_BUILD_DIR and DPT_CMAKE_ARGS
# choose another build (tools/setup.sh), e.g. the CPU-only one that a machine without CUDA gets:
#   DPT_BUILD_DIR=build-cpu DPT_CMAKE_ARGS=-DDPT_CUDA=OFF tools/test.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The tests run train and the tools from DPT_BUILD_DIR: the absolute path, not the one the
# caller gave (the GoogleTest cases run inside the build folder and inherit it from here).
export DPT_BUILD_DIR="$DPT_BUILD"
ctest --test-dir "$DPT_BUILD" --output-on-failure -j "$(nproc)" "$@"
