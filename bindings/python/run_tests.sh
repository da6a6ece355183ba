#!/usr/bin/env bash
# Runs the Python bindings' pytest suite against the library in $MPTRAIN_LIB_DIR (set by ctest).
# Exits 77 (ctest: skipped) when there is no python3 with pytest.
set -u
here=$(cd "$(dirname "$0")" && pwd)
python=
for candidate in "${MPTRAIN_PYTHON:-}" python3 /usr/bin/python3; do
    if [[ -n $candidate ]] && command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c "import pytest" 2>/dev/null; then
        python=$candidate
        break
    fi
done
if [[ -z $python ]]; then
    echo "SKIPPED: Python bindings not tested: no python3 with pytest (apt-get install python3-pytest python3-numpy)"
    exit 77
fi
"$python" -c "import numpy" 2>/dev/null || echo "note: numpy is not installed; the numpy tests will skip"
export PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH}
export PYTHONDONTWRITEBYTECODE=1
if [[ -n ${MPTRAIN_LIB_DIR:-} ]]; then
    export LD_LIBRARY_PATH=$MPTRAIN_LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
cd "$here" && exec "$python" -m pytest -q -p no:cacheprovider tests "$@"
