#!/usr/bin/env bash
# The CUDA backend's launch rules (src/backend/cuda/cuda_launch.cuh), checked on its sources so that
# a machine without a GPU catches what only a GPU would show, and then only as a rare race:
#  1. no kernel is launched with <<<>>> or a cudaLaunchKernel* call of its own: every launch goes
#     through launch_kernel() (cuda_launch.cuh), which adds the dependent-launch attribute when the
#     backend asks for it;
#  2. every __global__ function's body starts with start_after_preceding_kernel(), so that no
#     kernel launched with that attribute reads or writes memory before the kernel before it has
#     finished.
# A kernel of another file (a benchmark's) is not launched by the backend and is not checked.
#
# usage: test_kernel_launches.sh SOURCE_DIR   (the repository root)
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 SOURCE_DIR" >&2
    exit 2
fi
dir=$1/src/backend/cuda
[[ -d $dir ]] || { echo "test_kernel_launches: no directory $dir" >&2; exit 2; }
shopt -s nullglob
sources=("$dir"/*.cu "$dir"/*.cuh)
[[ ${#sources[@]} -gt 0 ]] || { echo "test_kernel_launches: no CUDA sources in $dir" >&2; exit 2; }

status=0
# Comments are dropped first, so that a comment may speak of <<<>>> or __global__.
if grep -n '<<<' "${sources[@]}" | grep -v '^[^:]*:[0-9]*: *//' ; then
    echo "test_kernel_launches: a <<<>>> launch above; launch through launch_kernel() (cuda_launch.cuh)" >&2
    status=1
fi

if grep -n 'cudaLaunchKernel\|cudaLaunchCooperativeKernel' "${sources[@]}" | grep -v '^[^:]*cuda_launch\.cuh:' \
        | grep -v '^[^:]*:[0-9]*: *//'; then
    echo "test_kernel_launches: a launch call of its own above; launch through launch_kernel() (cuda_launch.cuh)" >&2
    status=1
fi

kernels=0
for file in "${sources[@]}"; do
    # From each __global__ to its body's opening brace, then the body's first statement.
    report=$(awk -v file="$file" '
        { sub(/\/\/.*/, "") }
        in_signature == 0 && /__global__/ { in_signature = 1; name = $0 }
        in_signature == 1 {
            brace = index($0, "{")
            if (brace == 0) next
            rest = substr($0, brace + 1)
            in_signature = 2
            line = NR
        }
        in_signature == 2 {
            if (NR != line) rest = $0
            gsub(/^[ \t]+/, "", rest)
            if (rest == "") next
            kernels++
            if (index(rest, "start_after_preceding_kernel();") != 1)
                printf "%s:%d: a kernel whose body does not start with start_after_preceding_kernel(): %s\n", file, line, name
            in_signature = 0
        }
        END { printf "kernels %d\n", kernels }
    ' "$file")
    while IFS= read -r entry; do
        if [[ $entry == kernels\ * ]]; then
            kernels=$((kernels + ${entry#kernels }))
        else
            echo "$entry" >&2
            status=1
        fi
    done <<< "$report"
done

if [[ $kernels -eq 0 ]]; then
    echo "test_kernel_launches: found no kernel at all in $dir; the check reads nothing" >&2
    exit 1
fi
echo "test_kernel_launches: $kernels kernels checked"
exit $status
