#!/usr/bin/env bash
# Build (or reuse) the cached llama-server + SmolLM2 GGUF used by tests/realmodel.
# Niced, two jobs: the machine is shared. Prints the cache directory.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
py="${PYTHON:-python3}"
export LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-2}"
exec nice -n 10 "$py" "$here/build_server.py" "$@"
