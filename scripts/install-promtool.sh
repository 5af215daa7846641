#!/usr/bin/env bash
# install-promtool.sh DIR puts promtool from Debian's prometheus package into DIR (make tools). The
# package is downloaded and unpacked, not installed: no Prometheus server is set up or started, and
# nothing is compiled (building promtool from source compiles all of Prometheus: 25 minutes on a
# fresh 2-core machine). The version is checked against PROMTOOL_SERIES (the Makefile's).
set -euo pipefail
dir=${1:?usage: install-promtool.sh DIR}
series=${PROMTOOL_SERIES:?PROMTOOL_SERIES=2.42 is required}
if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
  echo "promtool comes from Debian's prometheus package (apt-get download prometheus); this machine has no apt-get." >&2
  echo "Install promtool $series.x some other way and put it at $dir/promtool." >&2
  exit 1
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
# _apt cannot write into a folder root made private; the download itself needs no root.
chmod 0755 "$tmp"
if ! apt-get download -qq prometheus 2>/dev/null; then
  # A fresh machine may have no package lists yet.
  sudo=""; ((EUID == 0)) || sudo=sudo
  $sudo apt-get update -qq
  apt-get download -qq prometheus
fi
dpkg-deb -x prometheus_*.deb root
version=$(root/usr/bin/promtool --version 2>&1 | sed -n 's/^promtool, version \([0-9.]*\).*/\1/p')
case $version in
  "$series".*) ;;
  *) echo "Debian's prometheus package has promtool ${version:-of an unknown version}; deploy/prometheus's rule tests are kept for $series.x" >&2
     exit 1 ;;
esac
install -m 0755 root/usr/bin/promtool "$dir/promtool"
echo "promtool $version (Debian's prometheus package) in $dir"
