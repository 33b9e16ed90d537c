#!/usr/bin/env bash
# Builds flame and runs every test, on a fresh Debian 12 machine: the README's test command, and
# what CI runs (.ci/run). Installs the pinned dependencies first (deploy/install-deps.sh).
#
# Usage: deploy/build-and-test.sh [PRESET]    (default preset: dev; asan also works)
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-dev}

deploy/install-deps.sh
cmake --preset "$preset"
cmake --build --preset "$preset"
ctest --preset "$preset"
