"""bench/kernel_table.py, which turns the device check's Nsight Compute CSV into kernels.txt's tables:
checked here on made-up CSV, since a table that cannot find the step's boundaries would leave the one
device check a GPU session gets without its profile.
Usage: python3 test_kernel_table.py BENCH_DIR"""
import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "bench"))
sys.dont_write_bytecode = True
import kernel_table  # noqa: E402

HEADER = ['"ID"', '"Kernel Name"', f'"{kernel_table.TIME}"', f'"{kernel_table.READ}"', f'"{kernel_table.WRITE}"',
          f'"{kernel_table.DRAM_PCT}"', f'"{kernel_table.SM_PCT}"']


def csv_of(kernels):
    """ncu's raw CSV: its own lines, the header, the units row, then a row a launch (name, ns)."""
    lines = ["==PROF== Connected to process 1", ",".join(HEADER),
             ",".join(['""', '""', '"ns"', '"byte"', '"byte"', '"%"', '"%"'])]
    for i, (name, ns) in enumerate(kernels):
        lines.append(f'"{i}","void mpt::(anonymous namespace)::{name}(mpt::LossHeadArgs)","{ns}","1000000","0","10","20"')
    return "\n".join(lines) + "\n"


class KernelTable(unittest.TestCase):
    def table(self, kernels):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "ncu.csv")
            with open(path, "w") as f:
                f.write(csv_of(kernels))
            out = io.StringIO()
            sys.argv = ["kernel_table.py", path, "mixed-bf16, batch 32"]
            with contextlib.redirect_stdout(out):
                try:
                    kernel_table.main()
                    status = 0
                except SystemExit as stop:
                    status = stop.code
            return status, out.getvalue()

    def test_steps_between_loss_heads(self):
        step = [("gather_kernel", 2000), ("forward_kernel", 5000), ("loss_head_kernel<32>", 4000),
                ("fused_sgd_kernel", 30000)]
        status, text = self.table(step[2:] + step * 3 + step[:1])
        self.assertEqual(status, 0)
        self.assertIn("3 steps", text)
        self.assertIn("kernel time 41.0 us/step", text)

    def test_the_last_step_in_launch_order(self):
        # Two launches of one kernel a step, told apart by their times in the last step's list.
        step = [("gather_kernel", 2000), ("gemm_kernel", 9000), ("gemm_kernel", 3000), ("loss_head_kernel<32>", 4000)]
        status, text = self.table(step + step + [("gather_kernel", 2500), ("gemm_kernel", 9500)] + step[2:])
        self.assertEqual(status, 0)
        self.assertIn("2 steps", text)
        order = text[text.index("launches in order"):].splitlines()[2:]
        self.assertEqual([line.split()[1] for line in order],
                         ["loss_head_kernel<32>", "gather_kernel", "gemm_kernel", "gemm_kernel"])
        self.assertEqual([float(line.split()[2]) for line in order], [4.0, 2.5, 9.5, 3.0])

    def test_fewer_than_two_heads_is_no_table(self):
        status, text = self.table([("gather_kernel", 2000), ("loss_head_kernel<32>", 4000)])
        self.assertEqual(status, 1)
        self.assertIn("no whole step", text)


if __name__ == "__main__":
    unittest.main()
