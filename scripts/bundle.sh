#!/usr/bin/env bash
# Builds the offline install bundle, dist/airlock-<version>-linux-<arch>.tar.gz,
# on a connected host where `make setup` has run. It holds:
#
#   install.sh            the installer (scripts/install-bundle.sh)
#   bin/airlock           this tree's airlock
#   tools/airlock-agent   the exec agent of gVisor sandboxes (static)
#   tools/runsc           setup's pinned runsc (<root>/tools/runsc)
#   images/*.tar          the default image and BUNDLE_IMAGES, as OCI layout tars
#                         written by `airlock image export`
#   images/images.txt     one line per image: FILE REF default|extra RECIPE|-
#   deps.txt              what the target must provide (glibc, shared libraries)
#   bundle.pub            the bundle key's public half (trusted only once its
#                         fingerprint is confirmed, or given with --key)
#   SHA256SUMS            the sha256 of every other file
#   SHA256SUMS.sig        an ed25519 signature over SHA256SUMS
#
# The bundle key (ed25519, PKCS#8 PEM as receipts' key) is made on first use
# at <root>/keys/bundle.key, mode 0600, and kept: every bundle from this host
# is signed with it. Its public half is also written beside the tarball.
#
# Environment: AIRLOCK_ROOT (default /var/lib/airlock), BUNDLE_IMAGES
# (pinned references, comma-separated), DIST (default dist).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
root=${AIRLOCK_ROOT:-/var/lib/airlock}
dist=${DIST:-$here/dist}
start=$(date +%s)

step() { printf '[bundle %4ss] %s\n' "$(($(date +%s) - start))" "$*"; }
fail() { printf 'bundle: %s\n' "$*" >&2; exit 1; }

for t in go openssl sha256sum gzip tar ldd; do
  command -v "$t" >/dev/null || fail "$t is not on PATH; the bundle is built on a host where \`make setup\` has run"
done

version=$(git -C "$here" describe --always --dirty 2>/dev/null || echo dev)
arch=$(cd "$here" && go env GOARCH)
name=airlock-$version-linux-$arch
bin=$here/bin/airlock
runsc=$root/tools/runsc

# 1. airlock and runsc ---------------------------------------------------------
step "building airlock $version"
(cd "$here" && go build -trimpath -ldflags "-X main.version=$version" -o "$bin" ./cmd/airlock)
gvisor_version=$(cd "$here/tools/runsc" && go list -m -f '{{.Version}}' gvisor.dev/gvisor)
have=$("$runsc" --version 2>/dev/null) || have=
[[ $have == *"runsc version $gvisor_version"* ]] ||
  fail "$runsc is not the pinned runsc $gvisor_version; run \`make setup\` first"

# 2. images --------------------------------------------------------------------
recipe=$(sha256sum "$here/images/default/build.sh" | cut -d' ' -f1)
default=$("$bin" --root "$root" image default --recipe "$recipe") ||
  fail "the default image under $root is missing or stale; run \`make setup\` first"

mkdir -p "$dist"
stage=$(mktemp -d "$dist/.stage-XXXXXX")
trap 'rm -rf "$stage"' EXIT
out=$stage/$name
mkdir -p "$out/bin" "$out/tools" "$out/images"
install -m 0755 "$bin" "$out/bin/airlock"
install -m 0755 "$runsc" "$out/tools/runsc"
(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags=-s -o "$out/tools/airlock-agent" ./cmd/airlock-agent)
install -m 0755 "$here/scripts/install-bundle.sh" "$out/install.sh"

step "exporting the default image $default"
"$bin" --root "$root" image export "$default" -o "$out/images/default.tar" >/dev/null
printf '%s %s default %s\n' default.tar "$default" "$recipe" >"$out/images/images.txt"
n=0
IFS=, read -ra extra <<<"${BUNDLE_IMAGES:-}"
for ref in "${extra[@]}"; do
  ref=$(printf '%s' "$ref" | tr -d '[:space:]')
  [ -n "$ref" ] || continue
  case $ref in *@sha256:*) ;; *) fail "BUNDLE_IMAGES: $ref is not pinned; use NAME@sha256:<id> as \`airlock image ls\` prints it" ;; esac
  n=$((n + 1))
  step "exporting $ref"
  "$bin" --root "$root" image export "$ref" -o "$out/images/image-$n.tar" >/dev/null
  printf '%s %s extra -\n' "image-$n.tar" "$ref" >>"$out/images/images.txt"
done

# 3. what the target must provide ------------------------------------------------
# The newest glibc symbol version airlock links against, and its shared
# libraries by soname. runsc is static (CGO_ENABLED=0).
glibc=$(grep -aoE 'GLIBC_2\.[0-9]+(\.[0-9]+)?' "$bin" | sort -uV | tail -1 | cut -d_ -f2)
{
  printf 'glibc %s\n' "$glibc"
  ldd "$bin" | awk '$2 == "=>" { print "lib", $1 }'
} >"$out/deps.txt"
[[ $(ldd "$runsc" 2>&1 || true) == *"not a dynamic executable"* ]] || fail "$runsc is dynamically linked; setup builds it with CGO_ENABLED=0"
[[ $(ldd "$out/tools/airlock-agent" 2>&1 || true) == *"not a dynamic executable"* ]] || fail "the exec agent is dynamically linked; it must be built with CGO_ENABLED=0"

# 4. key, sums, signature ------------------------------------------------------------
keys=$root/keys
key=$keys/bundle.key
(umask 077 && mkdir -p "$keys")
if [ ! -e "$key" ]; then
  step "creating the bundle key $key"
  tmp=$(umask 077 && mktemp "$keys/.bundle.key.XXXXXX")
  openssl genpkey -algorithm ed25519 -out "$tmp" 2>/dev/null
  # A concurrent creator may win; its key is used.
  ln "$tmp" "$key" 2>/dev/null || true
  rm -f "$tmp"
fi
[ -f "$key" ] && [ ! -L "$key" ] || fail "$key is not a regular file"
[ "$(stat -c %a "$key")" = 600 ] || fail "$key has mode $(stat -c %a "$key"), which lets others read it; run: chmod 600 $key"
text=$(openssl pkey -in "$key" -noout -text 2>/dev/null) || text=
[[ $text == "ED25519 Private-Key"* ]] || fail "$key is not an ed25519 private key in PEM"
openssl pkey -in "$key" -pubout -out "$out/bundle.pub"
fingerprint=$(openssl pkey -pubin -in "$out/bundle.pub" -outform DER | sha256sum | cut -d' ' -f1)

(cd "$out" && find . -type f ! -name SHA256SUMS ! -name SHA256SUMS.sig -printf '%P\n' | LC_ALL=C sort |
  while IFS= read -r f; do sha256sum -- "$f"; done) >"$out/SHA256SUMS"
openssl pkeyutl -sign -inkey "$key" -rawin -in "$out/SHA256SUMS" -out "$out/SHA256SUMS.sig"
openssl pkeyutl -verify -pubin -inkey "$out/bundle.pub" -rawin -in "$out/SHA256SUMS" \
  -sigfile "$out/SHA256SUMS.sig" >/dev/null || fail "the fresh signature does not verify"

# 5. the tarball -----------------------------------------------------------------------
step "writing $dist/$name.tar.gz"
tar -C "$stage" --owner=0 --group=0 --numeric-owner --sort=name -cf - "$name" | gzip >"$stage/$name.tar.gz"
mv -f "$stage/$name.tar.gz" "$dist/$name.tar.gz"
cp "$out/bundle.pub" "$dist/$name.pub"
step "done: $dist/$name.tar.gz ($(du -h "$dist/$name.tar.gz" | cut -f1)), $(wc -l <"$out/images/images.txt") image(s)"
echo "bundle key fingerprint: SHA256:$fingerprint"
echo "public key: $dist/$name.pub (carry it separately: on the target, verify SHA256SUMS.sig with it before running install.sh; docs/offline.md)"
