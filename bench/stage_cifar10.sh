#!/usr/bin/env bash
# Gets the real CIFAR-10 binary set (6 x 30,730,000 bytes) onto the GPU machine, which has no
# internet and no ../shared, for bench/device_check.sh's 50-epoch seed run (issue 3). One device
# call carries at most 64 MiB with the working tree, so the set travels in three parts of two files.
#
# Once, on the development machine, in the repository root (.cifar/ is git-ignored):
#   bash bench/stage_cifar10.sh pack [SRC]      # SRC defaults to ../shared/data/cifar10
# Then through the device tool, back to back with nothing in between (the machine keeps /tmp only
# while it stays warm, about 30 s after a call; the first call names the H200, issue 3's targets' GPU,
# and the later ones keep it):
#   run(command="bash bench/stage_cifar10.sh receive", carry=[".cifar/part1"], timeout_s=60,
#       kind="nvidia-h200")
#   run(command="bash bench/stage_cifar10.sh receive", carry=[".cifar/part2"], timeout_s=60)
#   run(command="bash bench/stage_cifar10.sh receive && DEADLINE=T bash bench/device_check.sh",
#       carry=[".cifar/part3"], timeout_s=T+10)
# The third call must print "complete: all 6 files"; device_check.sh then finds /tmp/cifar10.
# The third part also brings the build's headers (.deps: doctest, nlohmann-json; see
# device_check.sh), packed by pack as deps.tar.gz (0.2 MB instead of 1.3): a part and the tree come
# to about 65.8 MB of the 67.1 MB (64 MiB) a call carries. receive unpacks them into
# /tmp/mptrain-deps, where device_check.sh takes them from.
#
#   pack [SRC]  verifies SRC/SHA256SUMS and puts the .bin files into .cifar/part1..3 (hard links,
#               else copies; a file already there and identical is left alone), and .deps, packed,
#               into .cifar/part3/deps.tar.gz.
#   receive     (device machine) copies the .cifar/part*/*.bin this call carried into /tmp/cifar10
#               (CIFAR_DEST overrides), checks sizes and SHA-256, and says what it now holds.
set -uo pipefail
cd "$(dirname "$0")/.."

readonly FILE_BYTES=30730000
readonly LIMIT_BYTES=$((64 * 1024 * 1024))
# The published digests (SHA256SUMS beside the set), so the device machine can check what it got.
declare -A SHA256=(
    [data_batch_1.bin]=cee916563c9f80d84e3cc88e17fdc0941787f1244f00a67874d45b261883ada5
    [data_batch_2.bin]=a591ca11fa1708a91ee40f54b3da4784ccd871ecf2137de63f51ada8b3fa57ed
    [data_batch_3.bin]=bbe8596564c0f86427f876058170b84dac6670ddf06d79402899d93ceea26f67
    [data_batch_4.bin]=014e562d6e23c72197cc727519169a60359f5eccd8945ad5a09d710285ff4e48
    [data_batch_5.bin]=755304fc0b379caeae8c14f0dac912fbc7d6cd469eb67a1029a08a39453a9add
    [test_batch.bin]=8e2eb146ae340b09e24670f29cabc6326dba54da8789dab6768acf480273f65b
)
readonly FILES=(data_batch_1.bin data_batch_2.bin data_batch_3.bin data_batch_4.bin data_batch_5.bin test_batch.bin)
part_of() {
    case $1 in
        data_batch_1.bin | data_batch_2.bin) echo part1 ;;
        data_batch_3.bin | data_batch_4.bin) echo part2 ;;
        *) echo part3 ;;
    esac
}
file_bytes() { stat -c %s "$1" 2>/dev/null || echo 0; }

pack() {
    local src=${1:-../shared/data/cifar10} name part dest bytes tree
    [ -f "$src/SHA256SUMS" ] || { echo "no $src/SHA256SUMS: is $src the CIFAR-10 binary set?"; return 2; }
    echo "verifying $src/SHA256SUMS"
    (cd "$src" && sha256sum --quiet -c SHA256SUMS) || { echo "checksum mismatch in $src"; return 3; }
    for name in "${FILES[@]}"; do
        grep -q "^${SHA256[$name]}  $name\$" "$src/SHA256SUMS" \
            || { echo "$src/SHA256SUMS disagrees with this script about $name"; return 3; }
    done
    for name in "${FILES[@]}"; do
        part=$(part_of "$name")
        dest=.cifar/$part/$name
        mkdir -p ".cifar/$part"
        if [ -f "$dest" ] && cmp -s "$src/$name" "$dest"; then
            echo "  $dest: already there"
        elif ln -f "$src/$name" "$dest" 2>/dev/null; then
            echo "  $dest: linked"
        else
            cp -f "$src/$name" "$dest.tmp" && mv -f "$dest.tmp" "$dest" || { echo "copying $name failed"; return 4; }
            echo "  $dest: copied"
        fi
    done
    if [ -f .deps/include/doctest/doctest.h ]; then
        tar -czf .cifar/part3/deps.tar.gz .deps && echo "  .cifar/part3/deps.tar.gz: the build's headers, packed"
    else
        echo "  WARNING: no .deps (mkdir -p .deps/include && cp -r /usr/include/doctest /usr/include/nlohmann .deps/include/)"
    fi
    # What travels with each call: the working tree (tracked and untracked-not-ignored files) too.
    tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
    for part in part1 part2 part3; do
        bytes=$(du -cb .cifar/$part | tail -1 | cut -f1)
        printf '  .cifar/%s: %d bytes; with the working tree (%d): %d of %d\n' "$part" "$bytes" "$tree" \
            $((bytes + tree)) "$LIMIT_BYTES"
        [ $((bytes + tree)) -lt "$LIMIT_BYTES" ] || echo "  WARNING: .cifar/$part and the tree exceed the device tool's 64 MiB"
    done
    echo "packed; now the three receive calls (see the header of bench/stage_cifar10.sh)"
}

receive() {
    local dest=${CIFAR_DEST:-/tmp/cifar10} file name got=0 complete=1 bytes
    mkdir -p "$dest" || return 2
    # The build's headers, when this call carried them (packed by pack, or .deps itself): kept in
    # /tmp/mptrain-deps for device_check.sh, in this call or a later one.
    for file in .cifar/part*/deps.tar.gz; do
        [ -f "$file" ] || continue
        rm -rf /tmp/mptrain-deps /tmp/mptrain-deps.unpack && mkdir -p /tmp/mptrain-deps.unpack &&
            tar -xzf "$file" -C /tmp/mptrain-deps.unpack && mv /tmp/mptrain-deps.unpack/.deps /tmp/mptrain-deps &&
            echo "  $file: unpacked into /tmp/mptrain-deps"
    done
    if [ -f .deps/include/doctest/doctest.h ]; then
        rm -rf /tmp/mptrain-deps && cp -r .deps /tmp/mptrain-deps && echo "  .deps: kept in /tmp/mptrain-deps"
    fi
    for file in .cifar/part*/*.bin; do
        [ -f "$file" ] || continue
        name=$(basename "$file")
        [ -n "${SHA256[$name]:-}" ] || { echo "  ignoring $file (not a CIFAR-10 batch)"; continue; }
        if [ -f "$dest/$name" ] && cmp -s "$file" "$dest/$name"; then
            echo "  $name: already in $dest"
            continue
        fi
        if [ "$(sha256sum "$file" | cut -d' ' -f1)" != "${SHA256[$name]}" ]; then
            echo "  $file: WRONG SHA-256 (damaged in transit?); not copied"; continue
        fi
        cp -f "$file" "$dest/$name.tmp" && mv -f "$dest/$name.tmp" "$dest/$name" && got=$((got + 1)) \
            && echo "  $name: received"
    done
    echo "$got file(s) received; $dest holds:"
    for name in "${FILES[@]}"; do
        bytes=$(file_bytes "$dest/$name")
        if [ "$bytes" = "$FILE_BYTES" ]; then
            printf '  %-18s %10d bytes  ok\n' "$name" "$bytes"
        elif [ -f "$dest/$name" ]; then
            printf '  %-18s %10d bytes  WRONG SIZE (want %d)\n' "$name" "$bytes" "$FILE_BYTES"; complete=0
        else
            printf '  %-18s %10s        missing\n' "$name" "-"; complete=0
        fi
    done
    if [ $complete = 1 ]; then
        echo "complete: all 6 files, $FILE_BYTES bytes each (bench/device_check.sh will run the seed run)"
    else
        echo "incomplete: not all 6 files yet (carry the missing .cifar/part* next)"
    fi
    df -h "$dest" | tail -1
}

case ${1:-} in
    pack) shift; pack "$@" ;;
    receive) receive ;;
    *) echo "usage: $0 pack [SRC] | receive   (see the header)"; exit 2 ;;
esac
