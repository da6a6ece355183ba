#!/usr/bin/env bash
# Downloads the CIFAR-10 binary release, checks its SHA-256 before unpacking anything, and unpacks it
# to DEST/cifar-10-batches-bin (DEST defaults to ./data), where mptrain-cifar10 looks by default.
#
# Usage: scripts/get-cifar10.sh [DEST]
# Offline: put cifar-10-binary.tar.gz (fetched elsewhere) into DEST first; it is checked and used.
set -euo pipefail

readonly URL="https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
readonly SHA256="c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd"
readonly ARCHIVE_NAME="cifar-10-binary.tar.gz"
readonly FOLDER="cifar-10-batches-bin"
readonly FILES=(data_batch_1.bin data_batch_2.bin data_batch_3.bin data_batch_4.bin data_batch_5.bin
                test_batch.bin)
readonly FILE_BYTES=30730000

die() {
    printf 'get-cifar10: error: %s\n' "$*" >&2
    exit 1
}

usage() {
    cat <<USAGE
Usage: $0 [DEST]

Downloads CIFAR-10 (binary version, 163 MB) from
  $URL
checks its SHA-256 and unpacks it to DEST/$FOLDER (DEST defaults to ./data).
Offline: copy $ARCHIVE_NAME into DEST yourself; it is checked and unpacked.
Then: mptrain-cifar10 --data DEST/$FOLDER  (or MPTRAIN_CIFAR10_DIR=DEST/$FOLDER)
USAGE
}

case "${1:-}" in
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; exit 2 ;;
esac
[[ $# -le 1 ]] || { usage >&2; exit 2; }

dest="${1:-./data}"
target="$dest/$FOLDER"

file_size() {
    # GNU stat, then BSD/macOS stat.
    stat -c %s "$1" 2>/dev/null || stat -f %z "$1"
}

complete() {
    local name
    for name in "${FILES[@]}"; do
        [[ -f "$1/$name" && "$(file_size "$1/$name")" == "$FILE_BYTES" ]] || return 1
    done
}

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    elif command -v shasum >/dev/null 2>&1; then
        shasum -a 256 "$1" | cut -d' ' -f1
    elif command -v openssl >/dev/null 2>&1; then
        openssl dgst -sha256 "$1" | sed 's/.*= *//'
    else
        die "no sha256sum, shasum or openssl found to check the download"
    fi
}

if complete "$target"; then
    echo "CIFAR-10 is already in $target"
    exit 0
fi

mkdir -p "$dest" || die "cannot create $dest"
archive="$dest/$ARCHIVE_NAME"
work="$(mktemp -d "$dest/.get-cifar10.XXXXXX")" || die "cannot create a temporary folder in $dest"
trap 'rm -rf "$work"' EXIT

downloaded=0
if [[ -f "$archive" ]]; then
    echo "Using the archive already in $archive"
    source_file="$archive"
else
    echo "Downloading $URL"
    source_file="$work/$ARCHIVE_NAME"
    offline_hint="Fetch $URL elsewhere, copy it to $archive, and run this again."
    if command -v curl >/dev/null 2>&1; then
        curl -fL --retry 2 --connect-timeout 20 -o "$source_file" "$URL" \
            || die "download failed (are you offline?). $offline_hint"
    elif command -v wget >/dev/null 2>&1; then
        wget --tries=3 --timeout=20 -O "$source_file" "$URL" \
            || die "download failed (are you offline?). $offline_hint"
    else
        die "neither curl nor wget is installed. $offline_hint"
    fi
    downloaded=1
fi

# Nothing is unpacked before the archive is known to be the official one.
echo "Checking SHA-256"
actual="$(sha256_of "$source_file")"
if [[ "$actual" != "$SHA256" ]]; then
    if [[ $downloaded == 1 ]]; then
        die "SHA-256 mismatch for the download (deleted): expected $SHA256, got $actual. Run this again; if it persists, the server is not serving the official file."
    fi
    mv -f "$archive" "$archive.bad"
    die "SHA-256 mismatch for $archive (moved to $archive.bad): expected $SHA256, got $actual. It is damaged or not the official file."
fi

echo "Unpacking to $target"
tar -xzf "$source_file" -C "$work" "$FOLDER" || die "unpacking $source_file failed"
complete "$work/$FOLDER" || die "the archive does not hold the expected $FOLDER files"
rm -rf "$target"
mv "$work/$FOLDER" "$target"

echo "CIFAR-10 is ready in $target"
echo "Run: mptrain-cifar10 --data $target   (or export MPTRAIN_CIFAR10_DIR=$target)"
