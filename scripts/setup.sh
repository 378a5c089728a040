#!/usr/bin/env bash
# Prepares this machine for airlock. Idempotent: each step checks before it
# acts, so a second run does nothing but confirm.
#
#   1. apt packages: docker.io, runc, libseccomp-dev, mmdebstrap, busybox-static, e2fsprogs
#   2. runsc, built from the gVisor version pinned in tools/runsc (CGO_ENABLED=0)
#   3. the airlock-runsc runtime registered in /etc/docker/daemon.json (merged, backed up)
#   4. dockerd started if it is not answering
#   5. the airlock binary
#   6. the default image (python3, numpy, matplotlib, pip), rebuilt only when its
#      recipe changed or dockerd lost it
#
# Environment: AIRLOCK_ROOT (default /var/lib/airlock).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
root=${AIRLOCK_ROOT:-/var/lib/airlock}
tools=$root/tools
bin=$here/bin/airlock
start=$(date +%s)

step() { printf '[setup %4ss] %s\n' "$(($(date +%s) - start))" "$*"; }
fail() { printf 'setup: %s\n' "$*" >&2; exit 1; }

# heartbeat WHAT LOG CMD...: runs CMD (output to LOG, or here if LOG is -),
# printing a line every 15s so that long steps show life.
heartbeat() {
  local what=$1 log=$2; shift 2
  if [ "$log" = - ]; then "$@" & else "$@" >"$log" 2>&1 & fi
  local pid=$! t=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1; t=$((t + 1))
    if ((t % 15 == 0)); then step "  … $what, ${t}s so far"; fi
  done
  wait "$pid"
}

[ "$(id -u)" = 0 ] || fail "run as root (it installs packages, builds runsc into $root and configures dockerd)"
command -v go >/dev/null || fail "Go is not on PATH; install Go 1.26 or newer"

# 1. apt packages ----------------------------------------------------------
want=(docker.io runc libseccomp-dev mmdebstrap busybox-static ca-certificates e2fsprogs binutils curl jq)
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  step "installing ${missing[*]} (apt)"
  heartbeat "apt-get update" - apt-get update -qq
  export DEBIAN_FRONTEND=noninteractive
  heartbeat "apt-get install" /var/log/airlock-setup-apt.log \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" ||
    { tail -20 /var/log/airlock-setup-apt.log >&2; fail "apt-get install failed (log above)"; }
else
  step "apt packages present"
fi

# Long-lived sandboxes keep their workspace on a loop-mounted ext4 image.
[ -e /dev/loop-control ] || modprobe loop 2>/dev/null || true

# 2. runsc -------------------------------------------------------------------
# Built from a vendored copy of the pinned module, with the sentry's and the
# gofer's seccomp programs compiled ahead (tools/runsc/precompile), as gVisor's
# own build does. Rebuilt when the pin or the precompiler changes (the key is
# their hash, kept beside the binary), or when the binary is no longer the
# one built (its sha256, kept beside it too).
gvisor_version=$(cd "$here/tools/runsc" && go list -m -f '{{.Version}}' gvisor.dev/gvisor)
runsc=$tools/runsc
key=$(cd "$here/tools/runsc" && cat go.mod go.sum precompile/*.go | sha256sum | cut -d' ' -f1)
runsc_current() {
  [ "$(cat "$runsc.key" 2>/dev/null)" = "$key" ] || return 1
  local sum have
  sum=$(sha256sum "$runsc" 2>/dev/null | cut -d' ' -f1) || return 1
  if [ -e "$runsc.sha256" ]; then
    [ "$(cat "$runsc.sha256")" = "$sum" ] || return 1
  fi
  # The version is read whole: `| grep -q` under pipefail fails when grep
  # quits before runsc has written its last line (SIGPIPE), and rebuilt.
  have=$("$runsc" --version 2>/dev/null) || return 1
  [[ $have == *"runsc version $gvisor_version"* ]] || return 1
  # One built before setup kept its sha256 is trusted by its key and
  # version this once.
  [ -e "$runsc.sha256" ] || echo "$sum" >"$runsc.sha256"
}
if runsc_current; then
  step "runsc $gvisor_version present"
else
  step "building runsc $gvisor_version with its seccomp programs precompiled (CGO_ENABLED=0; about 2-4 minutes)"
  mkdir -p "$tools"
  build=$root/cache/runsc-build
  rm -rf "$build" && mkdir -p "$build" && cp -R "$here/tools/runsc/." "$build/"
  (cd "$build" && export CGO_ENABLED=0 &&
    GOFLAGS=-mod=readonly go mod vendor &&
    heartbeat "precompiling runsc's seccomp programs" - go run -mod=vendor ./precompile precompiled &&
    heartbeat "building runsc" - \
      go build -mod=vendor -overlay precompiled/overlay.json -trimpath \
      -ldflags "-X gvisor.dev/gvisor/runsc/version.version=$gvisor_version" \
      -o "$runsc.new" gvisor.dev/gvisor/runsc)
  rm -rf "$build"
  # The sum first: cut short before the rename, it names the new binary
  # and the old one is rebuilt.
  sha256sum "$runsc.new" | cut -d' ' -f1 >"$runsc.sha256"
  mv -f "$runsc.new" "$runsc"
  echo "$key" >"$runsc.key"
  step "runsc built: $("$runsc" --version | head -1)"
fi

# 5 (early). The airlock binary does the daemon.json merge and image import.
step "building airlock"
(cd "$here" && go build -trimpath -ldflags "-X main.version=$(git -C "$here" describe --always --dirty 2>/dev/null || echo dev)" -o "$bin" ./cmd/airlock)
# The exec agent gVisor sandboxes fork their execs from: static, since it
# runs inside any image. Replaced by rename, only when it changed.
mkdir -p "$tools"
(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags=-s -o "$tools/airlock-agent.new" ./cmd/airlock-agent)
if cmp -s "$tools/airlock-agent.new" "$tools/airlock-agent"; then
  rm -f "$tools/airlock-agent.new"
else
  chmod 0755 "$tools/airlock-agent.new" && mv -f "$tools/airlock-agent.new" "$tools/airlock-agent"
  step "exec agent installed: $tools/airlock-agent"
fi

# 3. daemon.json ---------------------------------------------------------------
changed=$("$bin" host install-runtime --runsc "$runsc")
# The name it registered, recorded in the root: airlock-runsc for the
# default root, airlock-runsc-<hash> for another.
runtime=$(cat "$root/docker-runtime")
step "dockerd runtime $runtime: $changed"

# 4. dockerd -------------------------------------------------------------------
docker_up() { timeout 5 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }
# has_runtime: dockerd lists $runtime, by its exact name (read whole, as
# runsc's version is).
has_runtime() {
  local names
  names=$(docker info --format '{{range $name, $_ := .Runtimes}}{{println $name}}{{end}}' 2>/dev/null) || return 1
  grep -qxF -- "$runtime" <<<"$names"
}
if docker_up; then
  if [ "$changed" = changed ] && [ -f /var/run/docker.pid ]; then
    step "reloading dockerd's runtimes (SIGHUP)"
    kill -HUP "$(cat /var/run/docker.pid)"
    for _ in $(seq 1 50); do
      has_runtime && break
      sleep 0.2
    done
  fi
else
  step "starting dockerd (log: /var/log/airlock-dockerd.log)"
  mkdir -p /var/log
  # dockerd outlives setup: it keeps none of setup's descriptors above
  # stderr (a lock that `flock LOCK make …` holds).
  (
    for fd in /proc/self/fd/*; do
      n=${fd##*/}
      if [ "$n" -gt 2 ]; then eval "exec $n>&-" 2>/dev/null || true; fi
    done
    exec nohup setsid dockerd >>/var/log/airlock-dockerd.log 2>&1 </dev/null
  ) &
  for i in $(seq 1 120); do
    docker_up && break
    ((i % 20 == 0)) && step "  … waiting for dockerd, ${i}/120"
    sleep 0.5
  done
  docker_up || fail "dockerd did not answer within 60s; see /var/log/airlock-dockerd.log"
fi
has_runtime ||
  fail "dockerd does not list the $runtime runtime; check /etc/docker/daemon.json and restart dockerd"
step "dockerd $(docker version --format '{{.Server.Version}}') answers, $runtime registered"

# 6. default image -----------------------------------------------------------
recipe=$(sha256sum "$here/images/default/build.sh" | cut -d' ' -f1)
if ref=$("$bin" --root "$root" image default --recipe "$recipe" 2>/dev/null); then
  step "default image present: $ref"
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/airlock-image.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  step "building the default image with mmdebstrap (python3, numpy, matplotlib, pip; about 2-3 minutes)"
  heartbeat "mmdebstrap" "$work/build.log" "$here/images/default/build.sh" "$work/rootfs.tar" ||
    { tail -30 "$work/build.log" >&2; fail "building the default image failed (log above)"; }
  step "importing the default image"
  "$bin" --root "$root" image import --rootfs "$work/rootfs.tar" --name airlock/default \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env HOME=/tmp --env MPLCONFIGDIR=/tmp/matplotlib --env MPLBACKEND=Agg \
    --env LANG=C.UTF-8 --env PYTHONDONTWRITEBYTECODE=1 \
    --workdir /tmp --default --recipe "$recipe"
  rm -rf "$work"
  trap - EXIT
fi
step "done: $("$bin" --root "$root" image default)"
