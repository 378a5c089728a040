#!/usr/bin/env bash
# install.sh: installs airlock from this offline bundle. It needs no network.
#
#   ./install.sh [--prefix DIR] [--root DIR] [--key PUBKEY] [--runtime NAME]
#
#   --prefix DIR   where bin/airlock goes (default /usr/local)
#   --root DIR     airlock's state directory: runsc, images, keys (default
#                  /var/lib/airlock)
#   --key PUBKEY   trust this ed25519 public key (PEM, as `make bundle` writes
#                  beside the tarball). Without it, the fingerprint of the
#                  bundle's own key is printed and must be confirmed on the
#                  terminal.
#   --runtime NAME the name dockerd knows this root's runsc by (default
#                  airlock-runsc for /var/lib/airlock, airlock-runsc-<hash
#                  of the root> for any other root)
#   --daemon-json FILE, --docker-pid FILE
#                  dockerd's configuration file and pid file (default
#                  /etc/docker/daemon.json, /var/run/docker.pid); DOCKER_HOST
#                  is the socket airlock talks to
#
# Steps, each failing closed:
#   1. check the signature over SHA256SUMS with openssl, against the trusted
#      key; nothing from the bundle is used before this;
#   2. copy every file to a private directory and check the copy against
#      SHA256SUMS, naming any file that does not match, is missing, or is
#      not listed;
#   3. check glibc and the shared libraries airlock links against (deps.txt);
#   4. install airlock under the prefix, and runsc and the exec agent under
#      <root>/tools;
#   5. check that step 6 can register runsc, then import every image with
#      `airlock image import --require-digest`, the default one with
#      --default (the default-image lock);
#   6. register runsc with dockerd only when dockerd is installed (daemon.json
#      is merged and backed up, never replaced), under the root's own
#      runtime name: an entry of that name that runs another root's runsc
#      is refused, never re-pointed;
#   7. run `airlock doctor` (for the oci engine when there is no dockerd).
#
# Running it again is safe: what is already in place is left as it is.
set -euo pipefail
umask 022

here=$(cd "$(dirname "$0")" && pwd)
prefix=/usr/local
root=/var/lib/airlock
keyfile=
runtime=
daemon_json=/etc/docker/daemon.json
docker_pid=/var/run/docker.pid
start=$(date +%s)

step() { printf '[install %4ss] %s\n' "$(($(date +%s) - start))" "$*"; }
fail() { printf 'install: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }

while (($#)); do
  case $1 in
    --prefix) prefix=${2:?--prefix needs a directory}; shift 2 ;;
    --root) root=${2:?--root needs a directory}; shift 2 ;;
    --key) keyfile=${2:?--key needs a public key file}; shift 2 ;;
    --runtime) runtime=${2:?--runtime needs a name}; shift 2 ;;
    --daemon-json) daemon_json=${2:?--daemon-json needs a file}; shift 2 ;;
    --docker-pid) docker_pid=${2:?--docker-pid needs a file}; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; fail "unknown argument $1" ;;
  esac
done
case $prefix in /*) ;; *) fail "--prefix $prefix: give an absolute path" ;; esac
case $root in /*) ;; *) fail "--root $root: give an absolute path" ;; esac
# The root is written into the installed wrapper's shell text.
case $root in *[!A-Za-z0-9/._-]*) fail "--root $root: use letters, digits, '/', '.', '_' and '-' only" ;; esac
prefix=${prefix%/} root=${root%/}

[ "$(id -u)" = 0 ] || fail "run as root (it installs runsc and images, and may configure dockerd)"
for t in openssl sha256sum ldd cmp find install; do
  command -v "$t" >/dev/null || fail "$t is not on PATH; install it from the target's own media (Debian: openssl, coreutils, libc-bin, diffutils, findutils)"
done

# 1. the signature -----------------------------------------------------------------
# The private copies live beside the store, on the same filesystem.
mkdir -p "$root"
# runsc goes under the root and runs as root: no user but root may change
# the root or a directory above it (one others may write but sticky, as
# /tmp, keeps what is not theirs).
root_only() {
  local d u m
  d=$(cd -P -- "$1" && pwd -P) || return 1
  while :; do
    read -r u m < <(stat -c '%u %a' -- "$d") || return 1
    if [ "$u" != 0 ] || { (( 8#$m & 8#22 )) && ! (( 8#$m & 8#1000 )); }; then
      echo "$d (owner uid $u, mode $m)"
      return 1
    fi
    [ "$d" = / ] && return 0
    d=$(dirname -- "$d")
  done
}
# Every name on the way as given, not only where it leads: whoever can
# change a directory holding a symlink on the way, or the symlink itself,
# can point the root elsewhere.
root_only_path() {
  local p= c u
  local -a names
  IFS=/ read -ra names <<< "${1#/}"
  for c in "${names[@]}"; do
    [ -n "$c" ] || continue
    p=$p/$c
    if [ -L "$p" ]; then
      u=$(stat -c %u -- "$p") || return 1
      [ "$u" = 0 ] || { echo "$p (a symlink owned by uid $u)"; return 1; }
    fi
    root_only "$p" || return 1
  done
  root_only /
}
bad=$(root_only_path "$root") ||
  fail "--root $root: ${bad:-it} can be changed by a user other than root; make it root's and writable by root alone (chown root DIR && chmod go-w DIR)"
work=$(mktemp -d "$root/.install-XXXXXX")
trap 'rm -rf "$work"' EXIT
if [ -n "$keyfile" ]; then
  [ -f "$keyfile" ] || fail "--key $keyfile: no such file"
  src=$keyfile
else
  src=$here/bundle.pub
  [ -f "$src" ] || fail "bundle.pub is missing and no --key was given"
fi
text=$(openssl pkey -pubin -in "$src" -out "$work/key.pem" 2>/dev/null &&
  openssl pkey -pubin -in "$work/key.pem" -noout -text 2>/dev/null) || text=
[[ $text == "ED25519 Public-Key"* ]] ||
  fail "$src is not an ed25519 public key in PEM (\`make bundle\` writes one beside the tarball)"
fingerprint=$(openssl pkey -pubin -in "$work/key.pem" -outform DER | sha256sum | cut -d' ' -f1)
if [ -n "$keyfile" ]; then
  step "trusting key SHA256:$fingerprint from $keyfile"
else
  echo "This bundle is signed with key SHA256:$fingerprint"
  echo "Compare it with the fingerprint \`make bundle\` printed on the build host."
  [ -t 0 ] || fail "no --key given and no terminal to confirm the key on: pass --key with the public key carried from the build host"
  read -r -p "Type yes if it is the same: " answer
  [ "$answer" = yes ] || fail "key not confirmed; nothing was installed"
fi
for f in SHA256SUMS SHA256SUMS.sig; do
  [ -f "$here/$f" ] && [ ! -L "$here/$f" ] || fail "$f: missing from the bundle; nothing was installed"
done
cp "$here/SHA256SUMS" "$work/SHA256SUMS"
cp "$here/SHA256SUMS.sig" "$work/SHA256SUMS.sig"
openssl pkeyutl -verify -pubin -inkey "$work/key.pem" -rawin -in "$work/SHA256SUMS" \
  -sigfile "$work/SHA256SUMS.sig" >/dev/null 2>&1 ||
  fail "SHA256SUMS: the signature in SHA256SUMS.sig does NOT verify with key SHA256:$fingerprint (SHA256SUMS or SHA256SUMS.sig was changed, or the bundle was signed with another key); nothing was installed"
step "SHA256SUMS signature verified"

# 2. every file ------------------------------------------------------------------------
# SHA256SUMS is trusted now; its names are still checked before use.
mkdir "$work/bundle"
declare -A listed=()
while IFS= read -r line; do
  [[ $line =~ ^([0-9a-f]{64})\ \ ([A-Za-z0-9._+-]+(/[A-Za-z0-9._+-]+)*)$ ]] || fail "SHA256SUMS: malformed line: $line"
  sum=${BASH_REMATCH[1]} f=${BASH_REMATCH[2]}
  [[ /$f/ != */../* && /$f/ != */./* ]] || fail "SHA256SUMS: bad name $f"
  [ -z "${listed[$f]:-}" ] || fail "SHA256SUMS: $f is listed twice"
  listed[$f]=1
  [ -f "$here/$f" ] && [ ! -L "$here/$f" ] || fail "$f: missing from the bundle (or not a regular file); nothing was installed"
  # The copy is what is checked and what is used.
  mkdir -p "$work/bundle/$(dirname "$f")"
  cp "$here/$f" "$work/bundle/$f"
  got=$(sha256sum <"$work/bundle/$f" | cut -d' ' -f1)
  [ "$got" = "$sum" ] || fail "$f: sha256 $got does not match SHA256SUMS ($sum): the file was changed; nothing was installed"
done <"$work/SHA256SUMS"
while IFS= read -r f; do
  case $f in SHA256SUMS | SHA256SUMS.sig) continue ;; esac
  [ -n "${listed[$f]:-}" ] || fail "$f: not listed in SHA256SUMS; nothing was installed"
done < <(cd "$here" && find . -mindepth 1 ! -type d -printf '%P\n')
for f in install.sh bin/airlock tools/runsc tools/airlock-agent images/images.txt deps.txt; do
  [ -n "${listed[$f]:-}" ] || fail "$f: not listed in SHA256SUMS; the bundle is incomplete"
done
b=$work/bundle
step "${#listed[@]} files match SHA256SUMS"

# 3. what the target must provide -------------------------------------------------------
have=$(ldd --version 2>/dev/null || true)
have=$(grep -m1 -oE '[0-9]+\.[0-9]+$' <<<"${have%%$'\n'*}" || true)
libs=$(ldd "$b/bin/airlock" 2>&1 || true)
while read -r kind what; do
  case $kind in
    glibc)
      [ -n "$have" ] || fail "cannot tell this host's glibc version (ldd --version); airlock needs glibc $what or newer"
      [ "$(printf '%s\n%s\n' "$what" "$have" | sort -V | head -1)" = "$what" ] ||
        fail "this host has glibc $have; airlock needs glibc $what or newer (Debian 12 or newer)"
      ;;
    lib)
      grep -qF "	$what => /" <<<"$libs" ||
        fail "$what, which airlock links against, is not installed (Debian: libseccomp2 for libseccomp.so.2, libc6 for the rest)"
      ;;
  esac
done <"$b/deps.txt"
version=$("$b/bin/airlock" --version) || fail "bin/airlock does not run on this host"
step "runtime dependencies present: glibc $have, $(awk '$1 == "lib" { printf "%s ", $2 }' "$b/deps.txt")"
command -v mkfs.ext4 >/dev/null || step "note: mkfs.ext4 (e2fsprogs) is missing: \`airlock sandbox create\` needs it for workspaces"
command -v runc >/dev/null || step "note: runc is missing: the oci engine's --isolation seccomp needs it; gvisor does not"

# 4. binaries -----------------------------------------------------------------------------
# put SRC DEST MODE: replaces DEST by rename, only when it differs.
put() {
  if [ -f "$2" ] && cmp -s "$1" "$2"; then
    echo unchanged
    return
  fi
  mkdir -p "$(dirname "$2")"
  install -m "$3" "$1" "$2.new.$$"
  mv -f "$2.new.$$" "$2"
  echo installed
}
r=$(put "$b/tools/runsc" "$root/tools/runsc" 0755)
step "runsc: $r $root/tools/runsc"
r=$(put "$b/tools/airlock-agent" "$root/tools/airlock-agent" 0755)
step "exec agent: $r $root/tools/airlock-agent"
if [ "$root" = /var/lib/airlock ]; then
  airlock=$prefix/bin/airlock
  r=$(put "$b/bin/airlock" "$airlock" 0755)
  step "airlock: $r $airlock ($version)"
else
  # airlock looks for its root in AIRLOCK_ROOT, else /var/lib/airlock: a
  # wrapper sets it, so the installed command finds this root's runsc.
  airlock=$prefix/lib/airlock/airlock
  r=$(put "$b/bin/airlock" "$airlock" 0755)
  step "airlock: $r $airlock ($version)"
  cat >"$work/wrapper" <<EOF
#!/bin/sh
# Installed by airlock's install.sh: this airlock's root is $root.
: "\${AIRLOCK_ROOT:=$root}"
export AIRLOCK_ROOT
exec "$airlock" "\$@"
EOF
  r=$(put "$work/wrapper" "$prefix/bin/airlock" 0755)
  step "wrapper: $r $prefix/bin/airlock (AIRLOCK_ROOT=$root)"
fi
al() { "$airlock" --root "$root" "$@"; }

# 5. images -------------------------------------------------------------------------------
# The runtime's name is checked first: a name another root's runsc holds
# is refused before the images' long import, with nothing imported.
if command -v dockerd >/dev/null; then
  if ! why=$(al host install-runtime --check --runsc "$root/tools/runsc" --daemon-json "$daemon_json" ${runtime:+--name "$runtime"} 2>&1 >/dev/null); then
    printf '%s\n' "$why" >&2
    fail "registering runsc with dockerd would fail (above); fix what it says (a name another root's runsc holds: choose this root's with --runtime NAME); no image was imported"
  fi
fi
while read -r file ref role recipe; do
  [[ $file =~ ^[A-Za-z0-9._-]+\.tar$ ]] || fail "images/images.txt: bad file name $file"
  id=${ref##*@}
  if [ "$role" = default ]; then
    if cur=$(al image default 2>/dev/null) && [ "$cur" = "$ref" ]; then
      step "default image present: $ref"
      continue
    fi
    step "importing the default image $ref"
    al image import --require-digest "$id" --default --recipe "$recipe" "$b/images/$file" >/dev/null ||
      fail "importing images/$file failed (above)"
  else
    step "importing $ref"
    al image import --require-digest "$id" "$b/images/$file" >/dev/null || fail "importing images/$file failed (above)"
  fi
done <"$b/images/images.txt"
def=$(al image default) || fail "no default image after the import"
step "default image: $def"

# 6. dockerd, only where it is installed ------------------------------------------------------
engine=oci
if command -v dockerd >/dev/null; then
  engine=auto
  # The root's own name; an entry of it that runs another runsc is refused.
  changed=$(al host install-runtime --runsc "$root/tools/runsc" --daemon-json "$daemon_json" ${runtime:+--name "$runtime"}) ||
    fail "registering runsc with dockerd failed (above); fix what it says (a name another root's runsc holds: choose this root's with --runtime NAME)"
  [ -f "$root/docker-runtime" ] && name=$(cat "$root/docker-runtime") || name=airlock-runsc
  step "dockerd runtime $name: $changed ($daemon_json)"
  if [ "$changed" = changed ] && [ -f "$docker_pid" ]; then
    kill -HUP "$(cat "$docker_pid")" && step "asked dockerd to reload its runtimes (SIGHUP)"
  fi
else
  step "no dockerd: the oci engine needs nothing more"
fi

# 7. doctor -------------------------------------------------------------------------------------
step "airlock doctor --engine $engine"
al doctor --engine "$engine" || fail "airlock doctor found problems (above); fix them and run install.sh again"
step "done: $prefix/bin/airlock ($version), root $root"
