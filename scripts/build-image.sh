#!/usr/bin/env bash
# The llmspeed container image without any registry: `buildah from scratch`, the release binary,
# exactly the shared libraries `ldd` lists for it, the CA certificates, an /etc/passwd with the
# non-root user 65532 (distroless' "nonroot", as in the Containerfile), the man pages and shell
# completions, labels and the entrypoint.
#
#   scripts/build-image.sh [BINARY] [OUT_DIR]
#
# BINARY: a release build of llmspeed (default target/release/llmspeed; CI passes the binary from
# the wheel, built for glibc 2.17, so one release build serves both). The image is committed to
# local containers storage as localhost/llmspeed:VERSION (and :latest), and written to
# OUT_DIR/llmspeed-VERSION.oci.tar (default target/dist) to copy to a registry:
#   skopeo copy oci-archive:target/dist/llmspeed-0.1.0.oci.tar docker://REGISTRY/llmspeed:0.1.0
# Prints `image=NAME` and `archive=PATH` as its last lines. Needs root (rootful buildah).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=$(realpath "${1:-$repo/target/release/llmspeed}")
out=$(realpath -m "${2:-$repo/target/dist}")
uid=65532
# `llmspeed 0.1.0 (COMMIT TARGET)`: the version for the tag, the whole string for a label.
full=$("$bin" --version)
version=$(awk '{print $2}' <<<"$full")
commit=$(sed -E 's/.*\(([^ ]+) .*/\1/' <<<"$full")
name="localhost/llmspeed:$version"

root=$(mktemp -d)
ctr=
cleanup() {
  if [ -n "$ctr" ]; then buildah rm "$ctr" >/dev/null 2>&1 || true; fi
  rm -rf "$root"
}
trap cleanup EXIT

# ---- the file tree ---------------------------------------------------------------------------
install -D -m 0755 "$bin" "$root/usr/local/bin/llmspeed"
# The release profile keeps line tables (for profiling a local build): the image ships the
# binary stripped, as the wheel does (42 MB -> 8 MB).
strip "$root/usr/local/bin/llmspeed"
# Every library the dynamic loader maps, the loader itself included, at the path ldd names
# (symbolic links resolved). Nothing else from the host.
ldd "$bin" | grep -o '/[^ ]*' | sort -u | while read -r lib; do
  install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
done
# `--system-roots` reads the system's store; the default roots are compiled in (webpki-roots).
install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
mkdir -p "$root/etc" "$root/home/llmspeed" "$root/tmp"
chmod 1777 "$root/tmp"
printf 'root:x:0:0:root:/root:/sbin/nologin\nllmspeed:x:%s:%s:llmspeed:/home/llmspeed:/sbin/nologin\n' \
  "$uid" "$uid" >"$root/etc/passwd"
printf 'root:x:0:\nllmspeed:x:%s:\n' "$uid" >"$root/etc/group"
"$bin" man --dir "$root/usr/share/man/man1"
"$bin" completions bash | install -D -m 0644 /dev/stdin "$root/usr/share/bash-completion/completions/llmspeed"
"$bin" completions zsh | install -D -m 0644 /dev/stdin "$root/usr/share/zsh/site-functions/_llmspeed"
"$bin" completions fish | install -D -m 0644 /dev/stdin "$root/usr/share/fish/vendor_completions.d/llmspeed.fish"

# ---- the image -------------------------------------------------------------------------------
# The previous build of this version goes, so rebuilds leave no untagged images behind.
buildah rmi "$name" localhost/llmspeed:latest >/dev/null 2>&1 || true
ctr=$(buildah from scratch)
buildah copy --quiet "$ctr" "$root" / >/dev/null
# The user's home (matrix prompt cache under ~/.cache) belongs to the user.
buildah copy --quiet --chown "$uid:$uid" "$ctr" "$root/home/llmspeed" /home/llmspeed >/dev/null
buildah config \
  --entrypoint '["/usr/local/bin/llmspeed"]' --cmd '["--help"]' \
  --user "$uid:$uid" --workingdir /home/llmspeed \
  --env PATH=/usr/local/bin --env HOME=/home/llmspeed \
  --label org.opencontainers.image.title=llmspeed \
  --label "org.opencontainers.image.description=Measures how fast LLM inference servers serve tokens" \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$commit" \
  --label "org.opencontainers.image.licenses=MIT OR Apache-2.0" \
  --label "io.llmspeed.version=${full#llmspeed }" \
  "$ctr"
buildah commit --quiet --rm "$ctr" "$name" >/dev/null
ctr=
buildah tag "$name" localhost/llmspeed:latest
mkdir -p "$out"
archive="$out/llmspeed-$version.oci.tar"
rm -f "$archive"
buildah push --quiet "$name" "oci-archive:$archive:$name" >/dev/null

echo "image=$name"
echo "archive=$archive"
