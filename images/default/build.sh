#!/usr/bin/env bash
# Builds the default image's root filesystem: Debian bookworm (minbase) with
# python3, numpy, matplotlib and pip from Debian's packages, trimmed for
# running code rather than building it (no recommends: pip comes without a
# compiler, so it installs wheels, not sdists that need building). Writes a
# tar to $1.
#
# The sha256 of this file is the image's recipe: setup rebuilds the image
# whenever this file changes. Nothing of the build host stays in it: its
# resolv.conf, hostname, hosts and machine-id are replaced or removed.
set -euo pipefail

out=${1:?usage: build.sh OUTPUT.tar}
suite=bookworm
packages=python3,python3-numpy,python3-matplotlib,python3-pip

# Fixed timestamps keep rebuilds from the same packages as close as dpkg allows.
export SOURCE_DATE_EPOCH=1700000000

# Quoted: these are dpkg globs, not the host's files.
exclude=(
  '/usr/share/doc/*' '/usr/share/man/*' '/usr/share/info/*' '/usr/share/lintian/*'
  '/usr/share/locale/*' '/usr/include/*' '/usr/lib/gcc/*' '/usr/libexec/gcc/*'
)
dpkgopts=()
for p in "${exclude[@]}"; do dpkgopts+=(--dpkgopt="path-exclude=$p"); done
dpkgopts+=(--dpkgopt='path-include=/usr/share/locale/locale.alias')

mmdebstrap \
  --variant=minbase \
  --aptopt='APT::Install-Recommends "false"' \
  --include="$packages" \
  "${dpkgopts[@]}" \
  --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/* "$1"/var/cache/debconf/*-old' \
  --customize-hook='find "$1" -xdev -type f -perm /6000 -exec chmod ug-s {} +' \
  --customize-hook='mkdir -p "$1"/tmp "$1"/work "$1"/out && chmod 1777 "$1"/tmp' \
  --customize-hook='rm -f "$1"/etc/resolv.conf "$1"/etc/hostname "$1"/etc/hosts "$1"/etc/machine-id' \
  --customize-hook=': > "$1"/etc/resolv.conf && echo sandbox > "$1"/etc/hostname && printf "127.0.0.1 localhost\n::1 localhost\n" > "$1"/etc/hosts' \
  "$suite" "$out"
