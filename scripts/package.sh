#!/usr/bin/env bash
# The Python wheel, built and checked the way a user meets it:
#   scripts/package.sh [OUT_DIR]        (default target/dist)
# 1. builds the release binary once, with maturin --zig against glibc 2.17 (manylinux2014), so the
#    wheel installs on any Linux from 2014 on; the man pages and shell completions are generated
#    with that binary and packed into the wheel's data (share/man, share/*completion*);
# 2. checks the wheel's tag against the binary: the highest GLIBC_x.y symbol version the binary
#    needs must not pass the glibc of its manylinux tag (and shows auditwheel's own verdict);
# 3. installs the wheel file into a fresh virtualenv and runs the installed `llmspeed`:
#    --version, `python -m llmspeed`, `bench serve` against `llmspeed mock` (12 requests) and
#    `selftest --streams 8 --tokens 50`.
# Prints `wheel=PATH` and `binary=PATH` (the binary inside the wheel, for scripts/build-image.sh)
# as its last lines.
#
# Tools: maturin, ziglang and auditwheel from PyPI in a virtualenv under ~/.cache keyed by their
# versions. The release build goes to a CARGO_TARGET_DIR under ~/.cache keyed by rustc's version
# (LLMSPEED_RELEASE_TARGET_DIR overrides), so a later run rebuilds only what changed.
set -euo pipefail
out=$(realpath -m "${1:-$(dirname "$0")/../target/dist}")
cd "$(dirname "$0")/.."
cache="$HOME/.cache/llmspeed-ci"
maturin_v=1.16.0 ziglang_v=0.17.1 auditwheel_v=6.8.2
tools="$cache/pack-maturin$maturin_v-ziglang$ziglang_v-auditwheel$auditwheel_v"
rustc_v=$(rustc --version | awk '{print $2}')
export CARGO_TARGET_DIR="${LLMSPEED_RELEASE_TARGET_DIR:-$cache/release-rustc$rustc_v}"
manylinux=manylinux2014 # = manylinux_2_17: glibc 2.17
tag_glibc=2.17

say() { printf 'package: %s\n' "$*" >&2; }

# ---- tools -----------------------------------------------------------------------------------
if ! [ -x "$tools/bin/maturin" ] || ! [ -x "$tools/bin/auditwheel" ]; then
  rm -rf "$tools"
  python3 -m venv "$tools"
  "$tools/bin/pip" install --quiet "maturin==$maturin_v" "ziglang==$ziglang_v" "auditwheel==$auditwheel_v"
fi
# maturin finds zig through `python3 -m ziglang` of the first python3 on PATH.
export PATH="$tools/bin:$PATH"

# ---- build -----------------------------------------------------------------------------------
rm -rf "$out" llmspeed.data
mkdir -p "$out/pass1"
build() { nice -n 10 maturin build --release --locked --zig --compatibility "$manylinux" --out "$1"; }
wheel_binary() { # WHEEL DEST: the binary maturin put in the wheel's scripts
  python3 - "$1" "$2" <<'EOF'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.endswith(".data/scripts/llmspeed")]
    if len(names) != 1:
        sys.exit(f"{wheel}: expected one .data/scripts/llmspeed, found {names}")
    with z.open(names[0]) as src, open(dest, "wb") as dst:
        dst.write(src.read())
EOF
  chmod +x "$2"
}

# Pass 1 compiles (the only expensive step); its binary makes the man pages and completions.
build "$out/pass1"
wheel1=$(ls "$out"/pass1/llmspeed-*.whl)
wheel_binary "$wheel1" "$out/pass1/llmspeed"
# maturin packs the folder <name>.data/ beside pyproject.toml as the wheel's data.
share=llmspeed.data/data/share
mkdir -p "$share/man/man1" "$share/bash-completion/completions" \
  "$share/zsh/site-functions" "$share/fish/vendor_completions.d"
"$out/pass1/llmspeed" man --dir "$share/man/man1"
"$out/pass1/llmspeed" completions bash >"$share/bash-completion/completions/llmspeed"
"$out/pass1/llmspeed" completions zsh >"$share/zsh/site-functions/_llmspeed"
"$out/pass1/llmspeed" completions fish >"$share/fish/vendor_completions.d/llmspeed.fish"
# Pass 2 finds the build up to date and only packs the wheel again, now with the data.
build "$out"
rm -rf "$out/pass1" llmspeed.data
wheel=$(ls "$out"/llmspeed-*.whl)
binary="$out/llmspeed"
wheel_binary "$wheel" "$binary"
say "wheel $(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB"

# ---- check the tag against the binary --------------------------------------------------------
# The highest GLIBC_x.y the binary's symbol versions need; failing when it is newer than the
# tag's glibc. Tried on the host's own /bin/ls first: a check that cannot fail proves nothing.
needs_glibc() { readelf --version-info --wide "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1; }
newer_than() { [ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -1)" = "$1" ]; }
check_glibc() { # BINARY TAG_GLIBC
  local need
  need=$(needs_glibc "$1")
  if [ -z "$need" ]; then
    say "$1: no GLIBC symbol versions found"; return 1
  fi
  if newer_than "$need" "$2"; then
    say "$1 needs glibc $need, newer than the tag's $2"; return 1
  fi
  say "$1 needs glibc $need, within the tag's $2"
}
if check_glibc /bin/ls "$tag_glibc" 2>/dev/null; then
  say "the glibc check passed the host's /bin/ls (glibc $(needs_glibc /bin/ls)); it cannot catch a bad wheel"
  exit 1
fi
case "$(basename "$wheel")" in
  *manylinux_2_17_x86_64*manylinux2014_x86_64* | *manylinux2014_x86_64*) ;;
  *) say "unexpected platform tag: $(basename "$wheel")"; exit 1 ;;
esac
check_glibc "$binary" "$tag_glibc"
auditwheel show "$wheel"

# The data made it into the wheel.
for f in share/man/man1/llmspeed.1 share/man/man1/llmspeed-bench-serve.1 \
  share/bash-completion/completions/llmspeed share/zsh/site-functions/_llmspeed \
  share/fish/vendor_completions.d/llmspeed.fish; do
  python3 -c 'import sys, zipfile; n = zipfile.ZipFile(sys.argv[1]).namelist(); sys.exit(0 if any(x.endswith(".data/data/" + sys.argv[2]) for x in n) else f"{sys.argv[2]} missing from the wheel")' "$wheel" "$f"
done

# ---- install the wheel file into a fresh virtualenv and run it -------------------------------
work=$(mktemp -d)
mock_pid=
cleanup() {
  if [ -n "$mock_pid" ]; then kill "$mock_pid" 2>/dev/null || true; wait "$mock_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --no-index --no-deps "$wheel"
installed="$work/venv/bin/llmspeed"
[ -x "$installed" ] || { say "pip install put no llmspeed in the virtualenv's bin"; exit 1; }
[ -f "$work/venv/share/man/man1/llmspeed.1" ] || { say "no man page under the virtualenv's share/"; exit 1; }
"$installed" --version
[ "$("$work/venv/bin/python" -m llmspeed --version)" = "$("$installed" --version)" ]

"$installed" mock --port 0 --profile fast >"$work/mock.out" 2>&1 &
mock_pid=$!
url=
for _ in $(seq 1 100); do
  url=$(grep -o 'http://127.0.0.1:[0-9]*' "$work/mock.out" || true)
  [ -n "$url" ] && break
  sleep 0.1
done
[ -n "$url" ] || { cat "$work/mock.out"; say "the mock did not start"; exit 1; }
"$installed" bench serve --base-url "$url" --dataset-name random --random-input-len 64 \
  --random-output-len 16 --num-prompts 12 --seed 0 --disable-tqdm \
  --save-result --result-dir "$work" --result-filename bench.json
python3 - "$work/bench.json" "$("$installed" --version)" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["completed"] == 12, f"completed {r['completed']} of 12"
assert "llmspeed " + r["llmspeed"]["version"] == sys.argv[2], (r["llmspeed"]["version"], sys.argv[2])
EOF
kill "$mock_pid"; wait "$mock_pid" 2>/dev/null || true; mock_pid=
"$installed" selftest --streams 8 --tokens 50

echo "wheel=$wheel"
echo "binary=$binary"
