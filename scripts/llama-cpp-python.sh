#!/usr/bin/env bash
# Builds llama-cpp-python's OpenAI-compatible server (PyPI `llama-cpp-python[server]`) from source
# into a virtualenv cached outside the checkout, keyed by version:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/llmspeed/llama-cpp-python-<version>/venv
# Prints one line, `python=PATH`: the virtualenv's interpreter, which serves with
# `PATH -m llama_cpp.server --model MODEL --host 127.0.0.1 --port N`. The model is the tiny GGUF
# that scripts/llama-server.sh writes. Idempotent: a finished virtualenv is reused.
# Cost: about 2 minutes on 2 idle cores the first time (the wheel compiles llama.cpp's library;
# 1.6 minutes wall and 2.8 CPU-minutes measured quiet on 2026-12-08, where the step took 4.0 with
# llama.cpp's common library still built), instant when cached. Needs only PyPI and a C++
# compiler.
set -euo pipefail
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
# The folder is keyed by version and by the build's settings (`-nocommon`: built without llama.cpp's
# common library, below), so a change of settings builds afresh.
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/llmspeed/llama-cpp-python-$VERSION-nocommon"
VENV="$CACHE/venv"
STAMP="$CACHE/venv.done"
here="$(cd "$(dirname "$0")" && pwd)"
log() { printf '[llama-cpp-python.sh] %s\n' "$*" >&2; }

build_venv() {
  [ -f "$STAMP" ] && [ -x "$VENV/bin/python" ] && return 0
  command -v c++ >/dev/null 2>&1 || { log "installing a C++ compiler (apt)"; apt-get update -qq && apt-get install -y -qq g++ >/dev/null; }
  rm -rf "$VENV"; mkdir -p "$CACHE"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  local wheels="$CACHE/wheels"
  if ! ls "$wheels"/llama_cpp_python-"$VERSION"-*.whl >/dev/null 2>&1; then
    log "building llama-cpp-python $VERSION from source (about 2 minutes on 2 idle cores)"
    # GGML_NATIVE=OFF: native builds crashed on load on these CPUs (as for llama-server).
    # LLAVA_BUILD=OFF: no multimodal library (mtmd); the package imports it only for image
    # chat formats, which the tests never use.
    # llama-cpp-python-no-common.cmake: no llama.cpp common library, which the package forces
    # on and never uses (its file says why it takes an include). Measured 2026-12-08 on 2 cores
    # (nice 19 beside other builds): the wheel 2.9 CPU-minutes (158 s user + 13 s system) where
    # it took 6.1 with the common library; the wheel holds libllama and ggml as before.
    # The wheel is kept in the cache: a rebuilt virtualenv does not compile again.
    # --no-cache-dir: pip keeps wheels it built from an sdist in its own cache and reuses them
    # whatever CMAKE_ARGS says; on 2026-12-08 a machine that had built the wheel with llama.cpp's
    # common library got that wheel back here, unbuilt. The wheel is ours to cache, above.
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF -DCMAKE_PROJECT_llama.cpp_INCLUDE=$here/llama-cpp-python-no-common.cmake" \
      CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
      "$VENV/bin/pip" wheel -q --no-cache-dir --no-deps --no-binary llama-cpp-python -w "$wheels.tmp" \
      "llama-cpp-python==$VERSION" >&2
    mkdir -p "$wheels" && mv "$wheels.tmp"/llama_cpp_python-*.whl "$wheels/" && rm -rf "$wheels.tmp"
  fi
  local wheel
  wheel="$(ls "$wheels"/llama_cpp_python-"$VERSION"-*.whl | head -1)"
  "$VENV/bin/pip" install -q "$wheel[server]" >&2
  "$VENV/bin/python" -c "import llama_cpp.server" >&2
  touch "$STAMP"
}

build_venv
echo "python=$VENV/bin/python"
