#!/usr/bin/env bash
# Installs what building, testing and the bindings need on Debian 12 (run as root), skipping
# packages that are already there so a second run costs a second.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config        # build
  libopenblas-dev                         # CPU GEMMs
  doctest-dev                             # C++ tests
  nlohmann-json3-dev                      # safetensors headers
  python3 python3-pytest python3-numpy    # Python binding and its tests
  mono-mcs mono-runtime                   # C# binding and its tests
  cargo                                   # Rust binding and its tests
)

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
# A Rust toolchain from rustup also serves; Debian's cargo is only needed when none is on PATH.
if command -v cargo >/dev/null 2>&1; then
  missing=("${missing[@]/cargo}")
fi
read -r -a missing <<<"${missing[*]:-}"

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup: build dependencies present"
