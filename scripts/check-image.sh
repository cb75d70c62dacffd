#!/usr/bin/env bash
# Checks the image scripts/build-image.sh made, the way a user (or the Kubernetes Job) meets it:
#   scripts/check-image.sh NAME ARCHIVE BINARY
# - the oci-archive's config (skopeo inspect): entrypoint, non-root user, labels;
# - its size: under MAX_IMAGE_MIB (default 32) unpacked in local storage;
# - rootful podman runs `llmspeed --version` (must equal BINARY's) and
#   `llmspeed selftest --streams 8 --tokens 50` inside it.
#
# Running needs two settings on machines like CI's, where root lacks CAP_SYS_RESOURCE and the
# cgroups are v1/v2 hybrid: podman's default rlimits (nofile/nproc raised past the current hard
# limit) are dropped by a containers.conf of our own, and runc is used because crun refuses
# hybrid cgroups ("cgroups in hybrid mode not supported"). Both only loosen how podman starts
# the container, not what is in it.
set -euo pipefail

name="$1" archive="$2" bin="$3"
max_mib="${MAX_IMAGE_MIB:-32}"
say() { printf 'image: %s\n' "$*" >&2; }

# ---- the archive's config ----------------------------------------------------------------------
skopeo inspect --config "oci-archive:$archive" | python3 -c '
import json, sys
c = json.load(sys.stdin)["config"]
want = {
    "Entrypoint": ["/usr/local/bin/llmspeed"],
    "User": "65532:65532",
}
for k, v in want.items():
    assert c.get(k) == v, f"{k}: {c.get(k)!r}, expected {v!r}"
labels = c.get("Labels") or {}
for k in ("org.opencontainers.image.title", "org.opencontainers.image.version",
          "org.opencontainers.image.revision", "org.opencontainers.image.licenses",
          "io.llmspeed.version"):
    assert labels.get(k), f"label {k} missing"
assert sys.argv[1] == "llmspeed " + labels["io.llmspeed.version"], (sys.argv[1], labels)
print("image: entrypoint", c["Entrypoint"], "user", c["User"])
for k in sorted(labels):
    print(f"image: label {k}={labels[k]}")
' "$("$bin" --version)"

# ---- its size ----------------------------------------------------------------------------------
bytes=$(podman image inspect --format '{{.Size}}' "$name")
mib=$((bytes / 1024 / 1024))
say "$name: $mib MiB unpacked, $(($(stat -c %s "$archive") / 1024)) KiB as $archive"
if [ "$mib" -ge "$max_mib" ]; then
  say "larger than $max_mib MiB"
  exit 1
fi

# ---- run it ------------------------------------------------------------------------------------
conf=$(mktemp)
trap 'rm -f "$conf"' EXIT
printf '[containers]\ndefault_ulimits = []\n' >"$conf"
runtime=()
if command -v runc >/dev/null 2>&1; then runtime=(--runtime runc); fi
run() { CONTAINERS_CONF="$conf" podman "${runtime[@]}" run --rm --network none "$name" "$@"; }

inside=$(run --version)
[ "$inside" = "$("$bin" --version)" ] || { say "--version inside: $inside"; exit 1; }
say "runs: $inside"
run selftest --streams 8 --tokens 50
