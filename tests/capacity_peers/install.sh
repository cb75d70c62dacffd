#!/usr/bin/env bash
# Installs the two peer tools that docs/capacity.md's "Beside GuideLLM and AIPerf" measures
# `llmspeed capacity` against, each in its own virtualenv, cached by version under
#   ${XDG_CACHE_HOME:-$HOME/.cache}/llmspeed/peers/guidellm-<version>/venv
#   ${XDG_CACHE_HOME:-$HOME/.cache}/llmspeed/peers/aiperf-<version>/venv
# and prints `guidellm=PATH` and `aiperf=PATH` (their console scripts).
#
# Both come from PyPI by name, with pip's own resolver (their requirements are many and not
# ours to pin: the folder's .complete stamp records `pip freeze` as installed). The virtualenvs
# use the Python the project's other reference installs use: `python3 -m venv`, as
# scripts/vllm-server.sh makes the vLLM CPU one (Python 3.11 here; both tools need >= 3.10).
# Neither needs a model or network at run time: AIPerf counts tokens with a Hugging Face
# tokenizer, which tests/capacity_peers/side_by_side.py points at the local folder of the
# suite's tiny model (scripts/vllm-server.sh writes it; HF_HUB_OFFLINE=1 is set for both).
#
# Idempotent: a complete folder is reused at once (measured 0.03 s). Fresh: 16 minutes on the
# 2-core machine this was written on, loaded 7-9 by other builds, pip's download cache warm —
# pip resolving and unpacking some 190 packages for aiperf and 170 for guidellm (which brings
# torch). Not part of .ci/run: the side by side is a measurement for the docs.
set -euo pipefail
GUIDELLM_VERSION="${GUIDELLM_VERSION:-0.8.1}"
AIPERF_VERSION="${AIPERF_VERSION:-0.13.0}"
ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/llmspeed/peers"
PYTHON="${PYTHON:-python3}"
mkdir -p "$ROOT"
log() { printf '[capacity_peers/install.sh] %s\n' "$*" >&2; }

# install NAME VERSION COMMAND: NAME==VERSION into ROOT/NAME-VERSION/venv, checked by version and
# by COMMAND --help; prints the console script's path.
install() {
  local name="$1" version="$2" cmd="$3" dir got
  dir="$ROOT/$name-$version"
  if [ -f "$dir/.complete" ] && [ -x "$dir/venv/bin/$cmd" ]; then
    echo "$dir/venv/bin/$cmd"
    return 0
  fi
  log "installing $name $version into $dir/venv (from PyPI)"
  rm -rf "$dir"
  mkdir -p "$dir"
  "$PYTHON" -m venv "$dir/venv"
  "$dir/venv/bin/python" -m pip install -q --disable-pip-version-check "$name==$version" >&2
  got="$("$dir/venv/bin/python" -c "import importlib.metadata as m; print(m.version('$name'))")"
  [ "$got" = "$version" ] || { log "$name reports version $got, not $version"; exit 1; }
  "$dir/venv/bin/$cmd" --help >/dev/null 2>"$dir/help.err" \
    || { cat "$dir/help.err" >&2; log "$cmd --help failed"; exit 1; }
  "$dir/venv/bin/python" -m pip freeze >"$dir/.complete"
  echo "$dir/venv/bin/$cmd"
}

echo "guidellm=$(install guidellm "$GUIDELLM_VERSION" guidellm)"
echo "aiperf=$(install aiperf "$AIPERF_VERSION" aiperf)"
