"""OpenBLAS loads with mptrain, so a script that imports mptrain before numpy (whose Debian build
links the same OpenBLAS) runs the GEMM kernels mptrain chose for the CPU, not OpenBLAS's own guess.
Each case runs in a fresh interpreter: which library loads first is decided once per process."""
import subprocess
import sys

SCRIPT = """
import mptrain
loaded_at_import = any("libopenblas" in line for line in open("/proc/self/maps"))
{after_import}
messages = []
context = mptrain.Context(backend="cpu", threads=1, log=lambda level, text: messages.append((int(level), text)),
                          log_level="info")
context.close()
runs_openblas = any("openblas" in text for _, text in messages)
warned = [text for level, text in messages if level >= 2 and "OpenBLAS" in text]
print(loaded_at_import, runs_openblas, warned)
assert not runs_openblas or loaded_at_import, "OpenBLAS was not loaded with mptrain"
assert not warned, warned
"""


def run(after_import=""):
    result = subprocess.run([sys.executable, "-c", SCRIPT.format(after_import=after_import)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_openblas_is_loaded_with_mptrain_and_runs_the_kernels_it_chose():
    run()


def test_numpy_imported_after_mptrain_keeps_the_kernels_mptrain_chose():
    run("try:\n    import numpy\nexcept ImportError:\n    pass")
