"""bench/peers/best_switches.py, which the device check runs on a GPU to choose the switch set it then
times as candidate defaults: checked here on made-up records and ctest logs, since a wrong choice
there would waste the one device check a GPU session gets.
Usage: python3 test_best_switches.py BENCH_PEERS_DIR"""
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "bench", "peers"))
sys.dont_write_bytecode = True
import best_switches  # noqa: E402
import gpu_test_log  # noqa: E402
import summary  # noqa: E402
import switch_table  # noqa: E402

DEFAULT_FIELDS = {"split_k": True, "gemm_autotune": False, "small_batch_forward": False, "small_batch_backward": False,
                  "dependent_launch": False, "grouped_sgd": False, "split_k_small_outputs": False,
                  "relu_from_output": False, "fused_sgd_three_blocks": False, "gradient_into_masters": False,
                  "fused_sgd_32_rows": False, "bulk_copy_sgd": False, "head_layer_cluster": False}


H200 = "cuda:0 (NVIDIA H200, compute capability 9.0, 143771 MiB)"


def record(batch, us, precision="mixed-bf16", refusals=0, device=H200, ops=None, **switches):
    """A plain-step record of mptrain-bench, the switches as named (split_k=False for MPTRAIN_CUDA_SPLIT_K=0);
    `ops`: its context's op counters (none: a record from before them)."""
    fields = dict(DEFAULT_FIELDS, **switches)
    context = {"backend": "cuda", "device": device, "switches": {name: value for name, value in fields.items()},
               "graphs": {"refusals": refusals, "last_refusal": "capture failed" if refusals else ""}}
    if ops is not None:
        context["ops"] = ops
        context["gemm"] = {"autotuned_plans": 0, "retuned_plans": 0, "plans_kept_whole_by_size": 0}
    return dict(fields, hidden=[3000, 1000], backend="cuda", precision=precision, batch=batch, us_per_step=us,
                data="resident", lr_schedule="constant", global_clipnorm=0, ema_momentum=0, dropout=0, weight_decay=0,
                optimizer="sgd", momentum=0, micro_batch=0, frozen_layers=0, standardized=False, context=context)


def ctest_log(*failing_cases):
    """A `ctest -V -j 3` log: two test programs' lines interleaved, the named cases failing in the first."""
    lines = ["1: Test command: /b/bin/test_cuda_ops", "2: Test command: /b/bin/test_cuda_pipeline",
             "2: TEST CASE:  the device builds the epoch order the CPU reference builds",
             "1: TEST CASE:  the CUDA loss head matches the CPU for every activation and loss",
             "1: MESSAGE: fp32: 0 fused plans refused"]
    for case in failing_cases:
        # Another test's case header between a case's header and its error: each test's own lines count.
        lines += [f"1: TEST CASE:  {case}", "2: TEST CASE:  a case of test 2 that prints a MESSAGE",
                  "2: /s/tests/test_cuda_pipeline.cpp:40: MESSAGE: 3 steps",
                  "1: /s/tests/test_cuda_ops.cpp:120: ERROR: CHECK( a == b ) is NOT correct!"]
    lines += ["2: TEST CASE:  a dataset streamed through pinned buffers trains exactly like a resident one",
              "100% tests passed" if not failing_cases else "50% tests passed, 1 tests failed out of 2"]
    if failing_cases:
        lines += ["The following tests FAILED:", "\t  1 - cuda_ops (Failed)"]
    return "\n".join(lines) + "\n"


class BestSwitches(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.TemporaryDirectory()
        self.log = os.path.join(self.folder.name, "ctest_cuda.log")
        self.write_log()

    def tearDown(self):
        self.folder.cleanup()

    def write_log(self, *failing_cases):
        with open(self.log, "w") as f:
            f.write(ctest_log(*failing_cases))

    def records(self, *items):
        path = os.path.join(self.folder.name, f"mptrain_{len(os.listdir(self.folder.name))}.json")
        with open(path, "w") as f:
            json.dump(list(items), f)
        return path

    def choose(self, *items):
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            chosen = best_switches.choose(self.log, [self.records(*items)])
        return best_switches.settings_of(chosen), output.getvalue()

    def seed_stages(self):
        """The default step at three batches, and switch stages as the device check times them."""
        return [record(32, 129), record(256, 177), record(4096, 576),
                record(32, 100, dependent_launch=True), record(256, 140, dependent_launch=True),
                record(32, 95, dependent_launch=True, grouped_sgd=True, small_batch_forward=True,
                       small_batch_backward=True),
                record(4096, 500, split_k=False), record(32, 131, split_k=False), record(256, 176, split_k=False)]

    def test_the_fastest_set_at_each_batch_and_their_union(self):
        settings, why = self.choose(*self.seed_stages())
        self.assertEqual(settings, "MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1 MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1 "
                                   "MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 MPTRAIN_CUDA_GROUPED_SGD=1 MPTRAIN_CUDA_SPLIT_K=0")
        self.assertIn("batch 4096: fastest split_k_off", why)

    def unsplit_slower_at_batch_32(self):
        """The seed stages with split-K off losing at batch 32 (its GEMMs need the split there)."""
        return [r for r in self.seed_stages() if not (r["batch"] == 32 and r["split_k"] is False)] + [
            record(32, 140, split_k=False)]

    def test_split_k_off_slower_somewhere_gives_way_to_the_small_outputs_rule(self):
        settings, why = self.choose(*self.unsplit_slower_at_batch_32())
        self.assertEqual(settings, "MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1 MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1 "
                                   "MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 MPTRAIN_CUDA_GROUPED_SGD=1 "
                                   "MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS=1")
        self.assertIn("split_k_off: dropped, alone it took 1.09x", why)
        self.assertIn("split_k_small_outputs: in split_k_off's place", why)

    def test_the_small_outputs_rule_not_in_split_k_offs_place_when_its_test_failed_or_it_was_slower(self):
        self.write_log("MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS=1 keeps the large GEMMs whole and trains as the default does")
        settings, why = self.choose(*self.unsplit_slower_at_batch_32())
        self.assertNotIn("SPLIT_K", settings)
        self.assertIn("split_k_small_outputs: not in its place, its GPU tests failed", why)
        # Its failing case names the rule alone: split-K off, faster everywhere it was timed, stays.
        settings, why = self.choose(*self.seed_stages())
        self.assertIn("MPTRAIN_CUDA_SPLIT_K=0", settings)
        self.assertIn("left out, their GPU tests failed: split_k_small_outputs", why)
        self.write_log()
        settings, why = self.choose(*self.unsplit_slower_at_batch_32(), record(256, 185, split_k_small_outputs=True))
        self.assertNotIn("SPLIT_K", settings)
        self.assertIn("split_k_small_outputs: not in its place, alone it took 1.05x", why)

    def test_the_small_outputs_rule_not_in_split_k_offs_place_when_it_lost_at_a_larger_batch(self):
        # Fastest at 256 (where the rule changes little), slower at 4096 (where the rule is split-K off).
        stages = [r for r in self.seed_stages() if r["split_k"] is not False] + [
            record(32, 129, split_k=False), record(256, 130, split_k=False), record(4096, 620, split_k=False)]
        settings, why = self.choose(*stages)
        self.assertNotIn("SPLIT_K", settings)
        self.assertIn("split_k_off: dropped", why)
        self.assertIn("split_k_small_outputs: not in split_k_off's place, which was slower alone at batch 4096", why)

    def test_split_k_off_kept_leaves_the_rule_it_overrides_out(self):
        stages = self.seed_stages() + [
            record(256, 120, split_k_small_outputs=True, dependent_launch=True, grouped_sgd=True)]
        settings, why = self.choose(*stages)
        self.assertIn("MPTRAIN_CUDA_SPLIT_K=0", settings)
        self.assertNotIn("SMALL_OUTPUTS", settings)
        self.assertIn("split_k_small_outputs: dropped, split_k_off (kept)", why)

    def test_a_switch_whose_path_did_not_run_takes_no_credit_for_its_sets_time(self):
        # At batch 4096 the combined large set wins, but grouped SGD's path never ran there (fused SGD
        # takes at most 64 rows); at batch 32, where it runs, it was no faster: it is not chosen.
        ran = {"dependent_launches": 6, "fused_sgd_grouped": 0, "steps_finished_by_update": 0}
        settings, why = self.choose(
            record(32, 129, ops={}), record(4096, 576, ops={}),
            record(4096, 520, dependent_launch=True, grouped_sgd=True, ops=ran),
            record(32, 128.5, grouped_sgd=True, ops={"fused_sgd_grouped": 40, "steps_finished_by_update": 40}))
        self.assertEqual(settings, "MPTRAIN_CUDA_DEPENDENT_LAUNCH=1")
        self.assertIn("no credit to grouped_sgd, whose paths did not run there", why)
        # Counted where it ran, it is chosen with the set.
        settings, _ = self.choose(
            record(32, 129, ops={}), record(4096, 576, ops={}),
            record(4096, 520, dependent_launch=True, grouped_sgd=True,
                   ops={"dependent_launches": 6, "fused_sgd_grouped": 12}))
        self.assertEqual(settings, "MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 MPTRAIN_CUDA_GROUPED_SGD=1")

    def test_a_faster_set_whose_paths_did_not_run_hides_no_set_that_ran(self):
        # At batch 4096 a set of idle switches is fastest by noise; the fastest set that ran wins there.
        settings, why = self.choose(
            record(32, 129, ops={}), record(4096, 576, ops={}),
            record(4096, 540, grouped_sgd=True, ops={"fused_sgd_grouped": 0}),
            record(4096, 545, small_batch_forward=True, ops={"forward_small_batch": 0}),
            record(4096, 550, dependent_launch=True, ops={"dependent_launches": 6}))
        self.assertEqual(settings, "MPTRAIN_CUDA_DEPENDENT_LAUNCH=1")
        self.assertIn("batch 4096: fastest dependent_launch", why)

    def test_a_switch_alone_whose_path_did_not_run_is_no_verdict_on_it(self):
        # Alone at batch 4096 grouped SGD is idle (no fused SGD there): 1.05x there is the default
        # step's noise, and does not drop it where it won.
        settings, why = self.choose(
            record(32, 129, ops={}), record(4096, 576, ops={}),
            record(32, 110, grouped_sgd=True, ops={"fused_sgd_grouped": 40}),
            record(4096, 605, grouped_sgd=True, ops={"fused_sgd_grouped": 0}))
        self.assertEqual(settings, "MPTRAIN_CUDA_GROUPED_SGD=1")
        self.assertNotIn("dropped", why)
        # Where it ran and was slower, it is dropped.
        settings, why = self.choose(
            record(32, 129, ops={}), record(64, 150, ops={}),
            record(32, 110, grouped_sgd=True, ops={"fused_sgd_grouped": 40}),
            record(64, 160, grouped_sgd=True, ops={"fused_sgd_grouped": 12}))
        self.assertEqual(settings, "")
        self.assertIn("grouped_sgd: dropped", why)

    def relu_from_output_stage(self, counted=10):
        """The default step and MPTRAIN_CUDA_RELU_FROM_OUTPUT=1 alone at three batches, as the device check
        times them: 0.93x at batch 4096, even elsewhere; `counted`: its backward-data ops on the path."""
        ran = {"backward_data_relu_from_output": counted}
        return [record(32, 129, ops={}), record(256, 177, ops={}), record(4096, 576, ops={}),
                record(32, 129, relu_from_output=True, ops=ran), record(256, 176, relu_from_output=True, ops=ran),
                record(4096, 536, relu_from_output=True, ops=ran)]

    def test_relu_from_output_is_chosen_where_it_was_faster(self):
        settings, why = self.choose(*self.relu_from_output_stage())
        self.assertEqual(settings, "MPTRAIN_CUDA_RELU_FROM_OUTPUT=1")
        self.assertIn("batch 4096: fastest relu_from_output: 536 us/step, 0.93x the default 576", why)
        # Beside the other switches' stages it joins their union.
        settings, _ = self.choose(*self.seed_stages(), record(4096, 536, relu_from_output=True))
        self.assertEqual(settings, "MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1 MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1 "
                                   "MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 MPTRAIN_CUDA_GROUPED_SGD=1 MPTRAIN_CUDA_SPLIT_K=0")
        settings, _ = self.choose(*self.seed_stages(), record(4096, 480, relu_from_output=True, split_k=False))
        self.assertEqual(settings, "MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1 MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1 "
                                   "MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 MPTRAIN_CUDA_GROUPED_SGD=1 MPTRAIN_CUDA_SPLIT_K=0 "
                                   "MPTRAIN_CUDA_RELU_FROM_OUTPUT=1")

    def test_relu_from_output_is_left_out_when_its_gpu_test_failed(self):
        self.write_log("MPTRAIN_CUDA_RELU_FROM_OUTPUT=1 takes ReLU's derivative from the outputs and trains as the "
                       "default does")
        settings, why = self.choose(*self.relu_from_output_stage())
        self.assertEqual(settings, "")
        self.assertIn("left out, their GPU tests failed: relu_from_output", why)
        self.assertIn("relu_from_output: fastest somewhere, but its GPU tests failed", why)
        self.assertNotIn("default paths failed", why)

    def test_a_failed_switch_in_the_fastest_set_passes_the_batch_to_the_fastest_set_without_it(self):
        self.write_log("MPTRAIN_CUDA_RELU_FROM_OUTPUT=1 takes ReLU's derivative from the outputs and trains as the "
                       "default does")
        stages = [record(32, 129), record(256, 177), record(4096, 576),
                  record(4096, 500, relu_from_output=True, split_k_small_outputs=True),
                  record(4096, 540, split_k_small_outputs=True), record(4096, 520, relu_from_output=True)]
        settings, why = self.choose(*stages)
        self.assertEqual(settings, "MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS=1")
        self.assertIn("relu_from_output: fastest somewhere, but its GPU tests failed", why)
        self.assertIn("batch 4096: the fastest set holds relu_from_output: the fastest without a failed switch instead",
                      why)
        self.assertIn("batch 4096: fastest split_k_small_outputs: 540 us/step, 0.94x the default 576", why)
        # The set without it no faster than 2%: nothing at that batch.
        settings, why = self.choose(*stages[:-2], record(4096, 570, split_k_small_outputs=True))
        self.assertEqual(settings, "")
        self.assertIn("batch 4096: no set 2% faster than the default 576 us/step (fastest split_k_small_outputs: 0.99x)",
                      why)
        # Only sets with the failed switch: none at that batch.
        settings, why = self.choose(*stages[:4])
        self.assertEqual(settings, "")
        self.assertIn("batch 4096: every set timed there holds a switch whose GPU tests failed", why)

    def test_relu_from_output_takes_no_credit_where_its_path_did_not_run_and_is_dropped_where_slower(self):
        # No backward-data op on the path (the ops' counter 0): its 0.93x is not its own.
        settings, why = self.choose(*self.relu_from_output_stage(counted=0))
        self.assertEqual(settings, "")
        self.assertNotIn("fastest relu_from_output", why)
        stages = [r for r in self.relu_from_output_stage() if not (r["batch"] == 256 and r["relu_from_output"])]
        settings, why = self.choose(*stages, record(256, 185, relu_from_output=True,
                                                    ops={"backward_data_relu_from_output": 10}))
        self.assertEqual(settings, "")
        self.assertIn("relu_from_output: dropped, alone it took 1.05x", why)

    def fused_sgd_three_blocks_stage(self, counted=10):
        """The default step at three batches and MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1 alone at batch 32, as
        the device check times it (fused SGD runs at most 64 rows): 0.96x; `counted`: its fused SGD
        updates planned with the 3-blocks kernel."""
        return [record(32, 129, ops={}), record(256, 177, ops={}), record(4096, 576, ops={}),
                record(32, 124, fused_sgd_three_blocks=True, ops={"fused_sgd_three_blocks": counted})]

    def test_fused_sgd_three_blocks_is_chosen_where_it_was_faster(self):
        settings, why = self.choose(*self.fused_sgd_three_blocks_stage())
        self.assertEqual(settings, "MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1")
        self.assertIn("batch 32: fastest fused_sgd_three_blocks: 124 us/step, 0.96x the default 129", why)
        # Beside the other switches' stages it joins their union through batch 32's combined set.
        settings, _ = self.choose(*self.seed_stages(), record(32, 124, fused_sgd_three_blocks=True))
        self.assertEqual(settings, "MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1 MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1 "
                                   "MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 MPTRAIN_CUDA_GROUPED_SGD=1 MPTRAIN_CUDA_SPLIT_K=0")
        settings, why = self.choose(*self.seed_stages(), record(32, 124, fused_sgd_three_blocks=True),
                                    record(32, 91, dependent_launch=True, grouped_sgd=True, fused_sgd_three_blocks=True))
        self.assertEqual(settings, "MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 MPTRAIN_CUDA_GROUPED_SGD=1 MPTRAIN_CUDA_SPLIT_K=0 "
                                   "MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1")
        self.assertIn("batch 32: fastest dependent_launch, fused_sgd_three_blocks, grouped_sgd: 91 us/step", why)

    def test_fused_sgd_three_blocks_is_left_out_when_its_gpu_test_failed(self):
        self.write_log("MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1 trains exactly as the default does, 3 blocks an SM")
        settings, why = self.choose(*self.fused_sgd_three_blocks_stage())
        self.assertEqual(settings, "")
        self.assertIn("left out, their GPU tests failed: fused_sgd_three_blocks", why)
        self.assertIn("fused_sgd_three_blocks: fastest somewhere, but its GPU tests failed", why)
        self.assertNotIn("default paths failed", why)
        # Grouped SGD's failing case (the same kernel's code, grouped) names only grouped SGD.
        self.write_log("MPTRAIN_CUDA_GROUPED_SGD=1 trains exactly as the default does")
        settings, why = self.choose(*self.fused_sgd_three_blocks_stage())
        self.assertEqual(settings, "MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1")
        self.assertIn("left out, their GPU tests failed: grouped_sgd", why)

    def test_fused_sgd_three_blocks_takes_no_credit_where_its_path_did_not_run_and_is_dropped_where_slower(self):
        # No fused SGD update planned with the 3-blocks kernel (its counter 0): its 0.96x is not its own.
        settings, why = self.choose(*self.fused_sgd_three_blocks_stage(counted=0))
        self.assertEqual(settings, "")
        self.assertNotIn("fastest fused_sgd_three_blocks", why)
        # Idle and slower past 64 rows (no fused SGD there): the default step's noise, no verdict on it.
        settings, why = self.choose(*self.fused_sgd_three_blocks_stage(),
                                    record(256, 186, fused_sgd_three_blocks=True, ops={"fused_sgd_three_blocks": 0}))
        self.assertEqual(settings, "MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1")
        self.assertNotIn("dropped", why)
        # Where it ran and was slower, it is dropped.
        stages = [r for r in self.fused_sgd_three_blocks_stage() if not r["fused_sgd_three_blocks"]]
        settings, why = self.choose(*stages, record(32, 136, fused_sgd_three_blocks=True,
                                                    ops={"fused_sgd_three_blocks": 10}),
                                    record(32, 120, fused_sgd_three_blocks=True, grouped_sgd=True,
                                           ops={"fused_sgd_three_blocks": 10, "fused_sgd_grouped": 10}))
        self.assertEqual(settings, "MPTRAIN_CUDA_GROUPED_SGD=1")
        self.assertIn("fused_sgd_three_blocks: dropped, alone it took 1.05x", why)

    def gradient_into_masters_stage(self, counted=10):
        """The default step at three batches and MPTRAIN_CUDA_GRADIENT_INTO_MASTERS=1 alone at batch 256 and
        4096, as the device check times it (it runs only past fused SGD's 64 rows): 0.95x; `counted`: its
        updates planned as one GEMM into the masters."""
        ran = {"gradient_into_masters": counted}
        return [record(32, 129, ops={}), record(256, 177, ops={}), record(4096, 576, ops={}),
                record(256, 168, gradient_into_masters=True, ops=ran),
                record(4096, 547, gradient_into_masters=True, ops=ran)]

    def test_gradient_into_masters_is_chosen_where_it_was_faster(self):
        settings, why = self.choose(*self.gradient_into_masters_stage())
        self.assertEqual(settings, "MPTRAIN_CUDA_GRADIENT_INTO_MASTERS=1")
        self.assertIn("batch 256: fastest gradient_into_masters: 168 us/step, 0.95x the default 177", why)
        self.assertIn("batch 4096: fastest gradient_into_masters: 547 us/step, 0.95x the default 576", why)
        # Beside the other switches' stages it joins their union through the larger batches' combined set.
        settings, _ = self.choose(*self.seed_stages(), record(4096, 547, gradient_into_masters=True))
        self.assertEqual(settings, "MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1 MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1 "
                                   "MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 MPTRAIN_CUDA_GROUPED_SGD=1 MPTRAIN_CUDA_SPLIT_K=0")
        settings, why = self.choose(*self.seed_stages(), record(4096, 547, gradient_into_masters=True),
                                    record(4096, 475, split_k=False, gradient_into_masters=True))
        self.assertEqual(settings, "MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1 MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1 "
                                   "MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 MPTRAIN_CUDA_GROUPED_SGD=1 MPTRAIN_CUDA_SPLIT_K=0 "
                                   "MPTRAIN_CUDA_GRADIENT_INTO_MASTERS=1")
        self.assertIn("batch 4096: fastest gradient_into_masters, split_k_off: 475 us/step, 0.82x the default 576", why)

    def test_gradient_into_masters_is_left_out_when_its_gpu_test_failed(self):
        self.write_log("MPTRAIN_CUDA_GRADIENT_INTO_MASTERS=1 updates plain SGD's masters in the GEMM and trains as the "
                       "default does")
        settings, why = self.choose(*self.gradient_into_masters_stage())
        self.assertEqual(settings, "")
        self.assertIn("left out, their GPU tests failed: gradient_into_masters", why)
        self.assertIn("gradient_into_masters: fastest somewhere, but its GPU tests failed", why)
        self.assertNotIn("default paths failed", why)
        # Its op case against the CPU (test_cuda_ops) names the path, not the variable: a failure there
        # leaves out this switch alone, not every switch as a failure of the default paths would.
        self.write_log("CUDA plain SGD into the masters matches the CPU, and a skipped step leaves them, inf in dZ "
                       "or not")
        settings, why = self.choose(*self.gradient_into_masters_stage())
        self.assertEqual(settings, "")
        self.assertIn("left out, their GPU tests failed: gradient_into_masters", why)
        self.assertNotIn("default paths failed", why)
        settings, why = self.choose(*self.seed_stages())
        self.assertEqual(settings, "MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1 MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1 "
                                   "MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 MPTRAIN_CUDA_GROUPED_SGD=1 MPTRAIN_CUDA_SPLIT_K=0")

    def test_gradient_into_masters_takes_no_credit_where_its_path_did_not_run_and_is_dropped_where_slower(self):
        # No update planned into the masters (its counter 0): its 0.95x is not its own.
        settings, why = self.choose(*self.gradient_into_masters_stage(counted=0))
        self.assertEqual(settings, "")
        self.assertNotIn("fastest gradient_into_masters", why)
        # Idle and slower at batch 32 (fused SGD takes those updates): the default step's noise, no verdict on it.
        settings, why = self.choose(*self.gradient_into_masters_stage(),
                                    record(32, 136, gradient_into_masters=True, ops={"gradient_into_masters": 0}))
        self.assertEqual(settings, "MPTRAIN_CUDA_GRADIENT_INTO_MASTERS=1")
        self.assertNotIn("dropped", why)
        # Where it ran and was slower, it is dropped, though faster at the other batch.
        stages = [r for r in self.gradient_into_masters_stage()
                  if not (r["batch"] == 256 and r["gradient_into_masters"])]
        settings, why = self.choose(*stages, record(256, 186, gradient_into_masters=True,
                                                    ops={"gradient_into_masters": 10}))
        self.assertEqual(settings, "")
        self.assertIn("gradient_into_masters: dropped, alone it took 1.05x", why)

    def fused_sgd_32_rows_stage(self, counted=10):
        """The default step at three batches and MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1 alone at batch 32, as the
        device check times it (it acts only at batches of exactly 32 rows): 0.94x; `counted`: its fused
        SGD updates planned with the kernel compiled for 32 rows."""
        return [record(32, 129, ops={}), record(256, 177, ops={}), record(4096, 576, ops={}),
                record(32, 121, fused_sgd_32_rows=True, ops={"fused_sgd_32_rows": counted})]

    def test_fused_sgd_32_rows_is_chosen_where_it_was_faster(self):
        settings, why = self.choose(*self.fused_sgd_32_rows_stage())
        self.assertEqual(settings, "MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1")
        self.assertIn("batch 32: fastest fused_sgd_32_rows: 121 us/step, 0.94x the default 129", why)
        # Beside the other switches' stages it joins their union through batch 32's combined set.
        settings, _ = self.choose(*self.seed_stages(), record(32, 121, fused_sgd_32_rows=True))
        self.assertEqual(settings, "MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1 MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1 "
                                   "MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 MPTRAIN_CUDA_GROUPED_SGD=1 MPTRAIN_CUDA_SPLIT_K=0")
        settings, why = self.choose(*self.seed_stages(), record(32, 121, fused_sgd_32_rows=True),
                                    record(32, 85, dependent_launch=True, grouped_sgd=True, fused_sgd_three_blocks=True,
                                           fused_sgd_32_rows=True))
        self.assertEqual(settings, "MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 MPTRAIN_CUDA_GROUPED_SGD=1 MPTRAIN_CUDA_SPLIT_K=0 "
                                   "MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1 MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1")
        self.assertIn("batch 32: fastest dependent_launch, fused_sgd_32_rows, fused_sgd_three_blocks, grouped_sgd: "
                      "85 us/step", why)

    # Its GPU cases: training as the default does (test_cuda_fast_paths, which also runs it with 3 blocks
    # an SM and grouped) and its op case against the CPU (test_cuda_ops). Both name the variable.
    FUSED_SGD_32_ROWS_CASES = ("MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1 trains exactly as the default does",
                               "MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1: CUDA fused SGD for 32 rows matches the CPU")

    def test_a_failing_case_of_fused_sgd_32_rows_names_that_switch_alone(self):
        for case in self.FUSED_SGD_32_ROWS_CASES:
            self.assertEqual(best_switches.excluded_by_tests({case}), ({"fused_sgd_32_rows"}, []), case)
        # The 3-blocks kernel's and grouped SGD's cases do not name it.
        for case in ("MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1 trains exactly as the default does, 3 blocks an SM",
                     "MPTRAIN_CUDA_GROUPED_SGD=1 trains exactly as the default does",
                     "CUDA fused SGD updates recorded for several layers run as one launch, each layer as in its own"):
            self.assertNotIn("fused_sgd_32_rows", best_switches.excluded_by_tests({case})[0], case)

    def test_fused_sgd_32_rows_is_left_out_when_its_gpu_test_failed(self):
        for case in self.FUSED_SGD_32_ROWS_CASES:
            self.write_log(case)
            settings, why = self.choose(*self.fused_sgd_32_rows_stage())
            self.assertEqual(settings, "", case)
            self.assertIn("left out, their GPU tests failed: fused_sgd_32_rows\n", why)
            self.assertIn("fused_sgd_32_rows: fastest somewhere, but its GPU tests failed", why)
            self.assertNotIn("default paths failed", why)
            # The other switches stay: the seed stages' choice, and the 3-blocks kernel where it won.
            settings, why = self.choose(*self.seed_stages())
            self.assertEqual(settings, "MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1 MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1 "
                                       "MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 MPTRAIN_CUDA_GROUPED_SGD=1 MPTRAIN_CUDA_SPLIT_K=0")
            settings, _ = self.choose(*self.fused_sgd_three_blocks_stage())
            self.assertEqual(settings, "MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1")
        # The 3-blocks kernel's failing case names only that switch.
        self.write_log("MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1 trains exactly as the default does, 3 blocks an SM")
        settings, why = self.choose(*self.fused_sgd_32_rows_stage())
        self.assertEqual(settings, "MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1")
        self.assertIn("left out, their GPU tests failed: fused_sgd_three_blocks\n", why)

    def test_fused_sgd_32_rows_takes_no_credit_where_its_path_did_not_run_and_is_dropped_where_slower(self):
        # No fused SGD update planned with the 32-rows kernel (its counter 0): its 0.94x is not its own.
        settings, why = self.choose(*self.fused_sgd_32_rows_stage(counted=0))
        self.assertEqual(settings, "")
        self.assertNotIn("fastest fused_sgd_32_rows", why)
        # Idle and slower at another batch (the kernel for any rows there): no verdict on it.
        settings, why = self.choose(*self.fused_sgd_32_rows_stage(),
                                    record(256, 186, fused_sgd_32_rows=True, ops={"fused_sgd_32_rows": 0}))
        self.assertEqual(settings, "MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1")
        self.assertNotIn("dropped", why)
        # Where it ran and was slower, it is dropped.
        stages = [r for r in self.fused_sgd_32_rows_stage() if not r["fused_sgd_32_rows"]]
        settings, why = self.choose(*stages, record(32, 136, fused_sgd_32_rows=True, ops={"fused_sgd_32_rows": 10}),
                                    record(32, 120, fused_sgd_32_rows=True, grouped_sgd=True,
                                           ops={"fused_sgd_32_rows": 10, "fused_sgd_grouped": 10}))
        self.assertEqual(settings, "MPTRAIN_CUDA_GROUPED_SGD=1")
        self.assertIn("fused_sgd_32_rows: dropped, alone it took 1.05x", why)

    def bulk_copy_sgd_stage(self, counted=10):
        """The default step at three batches and MPTRAIN_CUDA_BULK_COPY_SGD=1 alone at batch 32, as the
        device check times it (fused SGD runs at most 64 rows): 0.92x; `counted`: its fused SGD updates
        planned with the bulk-copy kernel."""
        return [record(32, 129, ops={}), record(256, 177, ops={}), record(4096, 576, ops={}),
                record(32, 119, bulk_copy_sgd=True, ops={"fused_sgd_bulk_copy": counted})]

    def test_bulk_copy_sgd_is_chosen_where_it_was_faster(self):
        settings, why = self.choose(*self.bulk_copy_sgd_stage())
        self.assertEqual(settings, "MPTRAIN_CUDA_BULK_COPY_SGD=1")
        self.assertIn("batch 32: fastest bulk_copy_sgd: 119 us/step, 0.92x the default 129", why)
        # Beside the other switches' stages it joins their union through batch 32's combined set.
        settings, _ = self.choose(*self.seed_stages(), record(32, 119, bulk_copy_sgd=True))
        self.assertEqual(settings, "MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1 MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1 "
                                   "MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 MPTRAIN_CUDA_GROUPED_SGD=1 MPTRAIN_CUDA_SPLIT_K=0")
        settings, why = self.choose(*self.seed_stages(), record(32, 119, bulk_copy_sgd=True),
                                    record(32, 80, dependent_launch=True, grouped_sgd=True, fused_sgd_three_blocks=True,
                                           fused_sgd_32_rows=True, bulk_copy_sgd=True))
        self.assertEqual(settings, "MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 MPTRAIN_CUDA_GROUPED_SGD=1 MPTRAIN_CUDA_SPLIT_K=0 "
                                   "MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1 MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1 "
                                   "MPTRAIN_CUDA_BULK_COPY_SGD=1")
        self.assertIn("batch 32: fastest bulk_copy_sgd, dependent_launch, fused_sgd_32_rows, fused_sgd_three_blocks, "
                      "grouped_sgd: 80 us/step", why)

    # Its GPU cases: its op case against the CPU (test_cuda_ops, named by the variable and by "bulk
    # copies") and training as the default does within rounding (test_cuda_fast_paths; the kernel sums
    # the weight gradient in another order than the CUDA-core kernel, so not bit for bit).
    BULK_COPY_SGD_CASES = ("MPTRAIN_CUDA_BULK_COPY_SGD=1: CUDA fused SGD by bulk copies matches the CPU",
                           "MPTRAIN_CUDA_BULK_COPY_SGD=1 trains as the default does, within rounding")

    def test_a_failing_case_of_bulk_copy_sgd_names_that_switch_alone(self):
        for case in self.BULK_COPY_SGD_CASES:
            self.assertEqual(best_switches.excluded_by_tests({case}), ({"bulk_copy_sgd"}, []), case)
        # A case named by its words alone, without the variable, names it too.
        self.assertEqual(best_switches.excluded_by_tests({"CUDA fused SGD by bulk copies, grouped, matches the CPU"}),
                         ({"bulk_copy_sgd"}, []))
        # The other fused SGD compilations' and grouped SGD's cases do not name it.
        for case in self.FUSED_SGD_32_ROWS_CASES + (
                "MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1 trains exactly as the default does, 3 blocks an SM",
                "MPTRAIN_CUDA_GROUPED_SGD=1 trains exactly as the default does",
                "CUDA fused SGD updates recorded for several layers run as one launch, each layer as in its own",
                "plain SGD with weight decay keeps the fused small-batch SGD kernel"):
            self.assertNotIn("bulk_copy_sgd", best_switches.excluded_by_tests({case})[0], case)

    # MPTRAIN_CUDA_HEAD_LAYER_CLUSTER=1's GPU cases: its op case (test_cuda_ops), training as the
    # separate launches do (test_cuda_fast_paths, the small MLP and the seed MLP's own case).
    HEAD_LAYER_CLUSTER_CASES = (
        "CUDA head layer in a cluster matches the CPU, and leaves the shapes it does not take to the separate launches",
        "MPTRAIN_CUDA_HEAD_LAYER_CLUSTER=1 trains as the separate launches do",
        "the seed MLP's last layer in a cluster of 8 blocks trains as the separate launches do")

    def test_a_failing_case_of_head_layer_cluster_names_that_switch_alone(self):
        for case in self.HEAD_LAYER_CLUSTER_CASES:
            self.assertEqual(best_switches.excluded_by_tests({case}), ({"head_layer_cluster"}, []), case)
        # The loss head's own case and the begin_step fold's do not name it.
        for case in ("the CUDA loss head matches the CPU for every activation and loss",
                     "a recorded begin_step is folded into its loss head, which leaves found_inf as the memset would"):
            self.assertEqual(best_switches.excluded_by_tests({case}), (set(), [case]), case)

    def test_bulk_copy_sgd_is_left_out_when_its_gpu_test_failed(self):
        for case in self.BULK_COPY_SGD_CASES:
            self.write_log(case)
            settings, why = self.choose(*self.bulk_copy_sgd_stage())
            self.assertEqual(settings, "", case)
            self.assertIn("left out, their GPU tests failed: bulk_copy_sgd\n", why)
            self.assertIn("bulk_copy_sgd: fastest somewhere, but its GPU tests failed", why)
            self.assertNotIn("default paths failed", why)
            # The other fused SGD switches stay, alone and where batch 32's combined set held the failed
            # switch (the fastest set without it takes the batch).
            settings, _ = self.choose(*self.fused_sgd_32_rows_stage())
            self.assertEqual(settings, "MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1")
            settings, _ = self.choose(*self.fused_sgd_three_blocks_stage())
            self.assertEqual(settings, "MPTRAIN_CUDA_FUSED_SGD_THREE_BLOCKS=1")
            settings, why = self.choose(*self.bulk_copy_sgd_stage(),
                                        record(32, 121, fused_sgd_32_rows=True, ops={"fused_sgd_32_rows": 10}),
                                        record(32, 110, fused_sgd_32_rows=True, bulk_copy_sgd=True,
                                               ops={"fused_sgd_32_rows": 10, "fused_sgd_bulk_copy": 10}))
            self.assertEqual(settings, "MPTRAIN_CUDA_FUSED_SGD_32_ROWS=1")
            self.assertIn("batch 32: the fastest set holds bulk_copy_sgd: the fastest without a failed switch instead",
                          why)
            self.assertIn("batch 32: fastest fused_sgd_32_rows: 121 us/step, 0.94x the default 129", why)
        # The 32-rows kernel's failing case names only that switch.
        self.write_log(self.FUSED_SGD_32_ROWS_CASES[0])
        settings, why = self.choose(*self.bulk_copy_sgd_stage())
        self.assertEqual(settings, "MPTRAIN_CUDA_BULK_COPY_SGD=1")
        self.assertIn("left out, their GPU tests failed: fused_sgd_32_rows\n", why)

    def test_bulk_copy_sgd_takes_no_credit_where_its_path_did_not_run_and_is_dropped_where_slower(self):
        # No fused SGD update planned with the bulk-copy kernel (its counter 0: below compute capability
        # 9.0, or no layer whose shapes it takes): its 0.92x is not its own.
        settings, why = self.choose(*self.bulk_copy_sgd_stage(counted=0))
        self.assertEqual(settings, "")
        self.assertNotIn("fastest bulk_copy_sgd", why)
        # Idle and slower past 64 rows (no fused SGD there): no verdict on it.
        settings, why = self.choose(*self.bulk_copy_sgd_stage(),
                                    record(256, 186, bulk_copy_sgd=True, ops={"fused_sgd_bulk_copy": 0}))
        self.assertEqual(settings, "MPTRAIN_CUDA_BULK_COPY_SGD=1")
        self.assertNotIn("dropped", why)
        # Where it ran and was slower, it is dropped.
        stages = [r for r in self.bulk_copy_sgd_stage() if not r["bulk_copy_sgd"]]
        settings, why = self.choose(*stages, record(32, 136, bulk_copy_sgd=True, ops={"fused_sgd_bulk_copy": 10}),
                                    record(32, 120, bulk_copy_sgd=True, grouped_sgd=True,
                                           ops={"fused_sgd_bulk_copy": 10, "fused_sgd_grouped": 10}))
        self.assertEqual(settings, "MPTRAIN_CUDA_GROUPED_SGD=1")
        self.assertIn("bulk_copy_sgd: dropped, alone it took 1.05x", why)

    # The small-batch kernels' GPU cases: each op's against the CPU (test_cuda_ops), named by its kernel's
    # words, and the training case of both (test_cuda_fast_paths), which names both variables.
    SMALL_BATCH_FORWARD_CASE = ("CUDA dense_forward matches the CPU with the small-batch kernel, whose ReLU mask is "
                                "cuBLASLt's")
    SMALL_BATCH_BACKWARD_CASE = ("CUDA dense_backward_data matches the CPU with the small-batch kernel, through either "
                                 "forward's mask")
    SMALL_BATCH_CASE = "MPTRAIN_CUDA_SMALL_BATCH_FORWARD=1 and _BACKWARD=1 train as cuBLASLt's GEMMs do"

    def test_a_failing_case_of_the_small_batch_kernels_names_their_switches(self):
        self.assertEqual(best_switches.excluded_by_tests({self.SMALL_BATCH_FORWARD_CASE}),
                         ({"small_batch_forward"}, []))
        self.assertEqual(best_switches.excluded_by_tests({self.SMALL_BATCH_BACKWARD_CASE}),
                         ({"small_batch_backward"}, []))
        self.assertEqual(best_switches.excluded_by_tests({self.SMALL_BATCH_CASE}),
                         ({"small_batch_forward", "small_batch_backward"}, []))
        # The fused SGD kernel's case (once "the small-batch kernel" too) names neither: a default path's.
        case = "plain SGD with weight decay keeps the fused small-batch SGD kernel"
        self.assertEqual(best_switches.excluded_by_tests({case}), (set(), [case]))

    def test_the_small_batch_kernels_are_left_out_when_their_gpu_test_failed(self):
        self.write_log(self.SMALL_BATCH_CASE)
        settings, why = self.choose(*self.seed_stages())
        # Batch 32's fastest set held them: the batch passes to the fastest set without them.
        self.assertEqual(settings, "MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 MPTRAIN_CUDA_SPLIT_K=0")
        self.assertIn("left out, their GPU tests failed: small_batch_backward, small_batch_forward", why)
        self.assertNotIn("default paths failed", why)
        # The forward's case alone leaves the input gradients' kernel in.
        self.write_log(self.SMALL_BATCH_FORWARD_CASE)
        settings, why = self.choose(*self.seed_stages(), record(32, 94, dependent_launch=True, grouped_sgd=True,
                                                                small_batch_backward=True))
        self.assertEqual(settings, "MPTRAIN_CUDA_SMALL_BATCH_BACKWARD=1 MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 "
                                   "MPTRAIN_CUDA_GROUPED_SGD=1 MPTRAIN_CUDA_SPLIT_K=0")

    def test_the_small_batch_kernels_take_no_credit_past_64_rows(self):
        # Idle at batch 4096 (they take at most 64 rows): the set's time there is not theirs.
        idle = {"forward_small_batch": 0, "backward_data_small_batch": 0, "dependent_launches": 6}
        settings, why = self.choose(
            record(32, 129, ops={}), record(4096, 576, ops={}),
            record(4096, 520, small_batch_forward=True, small_batch_backward=True, dependent_launch=True, ops=idle))
        self.assertEqual(settings, "MPTRAIN_CUDA_DEPENDENT_LAUNCH=1")
        self.assertIn("no credit to small_batch_backward, small_batch_forward, whose paths did not run there", why)

    def test_a_set_within_two_percent_of_the_default_is_not_chosen(self):
        settings, why = self.choose(record(32, 129), record(32, 127, dependent_launch=True))
        self.assertEqual(settings, "")
        self.assertIn("no set 2% faster", why)

    def test_a_switch_timed_alone_and_slower_somewhere_is_dropped(self):
        stages = self.seed_stages() + [record(256, 190, grouped_sgd=True)]
        settings, why = self.choose(*stages)
        self.assertNotIn("GROUPED_SGD", settings)
        self.assertIn("DEPENDENT_LAUNCH", settings)
        self.assertIn("grouped_sgd: dropped", why)

    def test_a_switch_whose_gpu_test_failed_is_left_out(self):
        self.write_log("MPTRAIN_CUDA_GROUPED_SGD=1 trains exactly as the default does")
        settings, why = self.choose(*self.seed_stages())
        self.assertNotIn("GROUPED_SGD", settings)
        self.assertIn("MPTRAIN_CUDA_DEPENDENT_LAUNCH=1", settings)
        self.assertIn("MPTRAIN_CUDA_SPLIT_K=0", settings)
        self.assertIn("their GPU tests failed: grouped_sgd", why)

    def test_a_failing_case_of_the_default_paths_chooses_nothing(self):
        self.write_log("CUDA dense_update matches the CPU for every optimizer and skips a non-finite step")
        settings, why = self.choose(*self.seed_stages())
        self.assertEqual(settings, "")
        self.assertIn("default paths failed", why)

    def test_a_test_program_that_failed_without_a_failing_case_chooses_nothing(self):
        self.write_log()
        with open(self.log, "a") as f:
            f.write("The following tests FAILED:\n\t  1 - cuda_ops (Timeout)\n")
        settings, why = self.choose(*self.seed_stages())
        self.assertEqual(settings, "")
        self.assertIn("test cuda_ops (Timeout), with no failing case named", why)

    def test_every_switch_on_together_failing_stops_no_choice(self):
        # (The choice is the candidate's own run of that case to confirm, under its settings.)
        self.write_log("the CUDA switches set on together train as with all of them off")
        settings, why = self.choose(*self.seed_stages())
        self.assertIn("MPTRAIN_CUDA_DEPENDENT_LAUNCH=1", settings)
        self.assertIn("every switch on together failed its GPU test", why)
        self.assertNotIn("default paths failed", why)
        # Its program cut off by ctest's timeout, or crashed, without a failing case named.
        self.write_log()
        with open(self.log, "a") as f:
            f.write("The following tests FAILED:\n\t  3 - cuda_switches_together (Timeout)\n")
        settings, why = self.choose(*self.seed_stages())
        self.assertIn("MPTRAIN_CUDA_DEPENDENT_LAUNCH=1", settings)
        self.assertIn("every switch on together failed its GPU test", why)
        # Beside a failing case of the default paths, nothing is chosen all the same.
        self.write_log("the CUDA switches set on together train as with all of them off",
                       "CUDA dense_update matches the CPU for every optimizer and skips a non-finite step")
        settings, why = self.choose(*self.seed_stages())
        self.assertEqual(settings, "")
        self.assertIn("default paths failed", why)

    def test_a_gpu_test_stage_cut_short_chooses_nothing(self):
        for cut in ("skipped, no time left: ctest", "1: Test command: /b/bin/test_cuda_ops\n1: TEST CASE:  x", ""):
            with open(self.log, "w") as f:
                f.write(cut + "\n")
            settings, why = self.choose(*self.seed_stages())
            self.assertEqual(settings, "", cut)
            self.assertIn("no finished GPU test log", why)

    def test_a_switch_faster_alone_at_one_batch_and_slower_at_another_is_dropped(self):
        settings, why = self.choose(record(32, 129), record(256, 177), record(32, 110, grouped_sgd=True),
                                    record(256, 190, grouped_sgd=True))
        self.assertEqual(settings, "")
        self.assertIn("grouped_sgd: dropped, alone it took 1.07x", why)

    def test_a_slower_set_that_holds_a_switch_does_not_drop_it(self):
        settings, _ = self.choose(record(32, 129), record(256, 177), record(32, 100, dependent_launch=True),
                                  record(256, 150, dependent_launch=True),
                                  record(256, 190, dependent_launch=True, grouped_sgd=True))
        self.assertEqual(settings, "MPTRAIN_CUDA_DEPENDENT_LAUNCH=1")

    def test_a_default_step_with_a_refused_graph_is_no_baseline(self):
        settings, why = self.choose(record(32, 500, refusals=3), record(32, 100, dependent_launch=True))
        self.assertEqual(settings, "")
        self.assertIn("no default mixed-bf16 step timed without a caveat", why)

    def test_no_gpu_test_log_chooses_nothing(self):
        os.remove(self.log)
        self.assertEqual(self.choose(*self.seed_stages())[0], "")

    def test_records_with_a_refused_graph_or_of_other_steps_do_not_count(self):
        refused = record(32, 60, refusals=1, small_batch_forward=True)
        adam = dict(record(32, 50, dependent_launch=True), optimizer="adam")
        narrow = dict(record(32, 40, grouped_sgd=True), hidden=[64, 64])
        fp16 = record(32, 45, precision="mixed-fp16", split_k_small_outputs=True)
        settings, _ = self.choose(record(32, 129), refused, adam, narrow, fp16)
        self.assertEqual(settings, "")

    def test_report_compares_the_candidate_records_with_the_defaults_and_the_targets(self):
        candidate = dict(dependent_launch=True, grouped_sgd=True)
        path = self.records(record(32, 129), record(32, 200, precision="fp32"), record(4096, 576),
                            record(32, 68, **candidate), record(32, 150, precision="fp32", **candidate),
                            record(4096, 590, **candidate))
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            best_switches.report("MPTRAIN_CUDA_DEPENDENT_LAUNCH=1 MPTRAIN_CUDA_GROUPED_SGD=1", [path])
        lines = output.getvalue().splitlines()
        self.assertIn("batch 32: fp32 150 (0.75x default), mixed-bf16 68 (0.53x default) us/step; target 70 met; "
                      "mixed-bf16 < fp32 yes", lines[1])
        self.assertIn("batch 4096: mixed-bf16 590 (1.02x default) us/step; target 480 MISSED", lines[2])

    def test_report_says_when_the_records_ran_on_another_gpu_than_the_targets_h200(self):
        h100 = "cuda:0 (NVIDIA H100 80GB HBM3, compute capability 9.0, 81079 MiB)"
        gh200 = "cuda:0 (NVIDIA GH200 480GB, compute capability 9.0, 97871 MiB)"
        for device, note in ((H200, False), (h100, True), (gh200, True)):
            path = self.records(record(32, 129, device=device), record(32, 68, device=device, grouped_sgd=True))
            output = io.StringIO()
            with contextlib.redirect_stdout(output):
                best_switches.report("MPTRAIN_CUDA_GROUPED_SGD=1", [path])
            said = "targets: issue 3's are an H200's; these steps ran on " + device in output.getvalue()
            self.assertEqual(said, note, output.getvalue())
            self.assertIn("target 70 met", output.getvalue())

    def test_one_programs_failing_cases_are_those_an_error_follows(self):
        lines = ["TEST CASE:  prints a message", "/s/t.cpp:1: MESSAGE: 3 plans",
                 "TEST CASE:  fails, twice", "/s/t.cpp:2: ERROR: CHECK( a == b ) is NOT correct!",
                 "/s/t.cpp:3: ERROR: CHECK( c ) is NOT correct!", "TEST CASE:  stops",
                 "/s/t.cpp:4: FATAL ERROR: REQUIRE( d ) is NOT correct!", "TEST CASE:  passes"]
        self.assertEqual(gpu_test_log.program_failing_cases(lines), ["fails, twice", "fails, twice", "stops"])

    def test_report_takes_the_candidate_stages_records_over_a_switch_stage_that_timed_the_same_set(self):
        names = {}
        for name, items in (("mptrain_candidate.json", [record(32, 90, grouped_sgd=True)]),
                            ("mptrain_small.json", [record(32, 129)]),
                            ("mptrain_grouped_sgd.json", [record(32, 100, grouped_sgd=True)])):
            names[name] = os.path.join(self.folder.name, name)
            with open(names[name], "w") as f:
                json.dump(items, f)
        for order in (sorted(names.values()), sorted(names.values(), reverse=True)):
            output = io.StringIO()
            with contextlib.redirect_stdout(output):
                best_switches.report("MPTRAIN_CUDA_GROUPED_SGD=1", order)
            self.assertIn("batch 32: mixed-bf16 90 (0.70x default)", output.getvalue())


class SwitchTableCase(unittest.TestCase):
    """bench/switches.json, the one list of the switches, which best_switches.py and summary.py read
    through switch_table.py (as here), and tests/test_cuda_switches_together.cpp and tests/CMakeLists.txt
    (the every-switch ctest entry) read too: each switch's variable and settings must be those that mptrain-bench names its record
    field after, or a candidate would be tested, or its records read, without one of its switches."""

    def test_each_switch_is_set_as_its_record_field_names_it(self):
        entries = switch_table.SWITCH_ENTRIES
        self.assertTrue(entries)
        for s in entries:
            self.assertEqual(f"{s['variable']}={s['on']}", switch_table.environment_setting(s["field"], s["on_value"]))
            self.assertEqual(f"{s['variable']}={s['off']}", switch_table.environment_setting(s["field"], not s["on_value"]))
            for place in s["evidence"] + s.get("test_evidence", []):
                self.assertRegex(place, r"^(ops|gemm)\.[a-z0-9_]+$", s["name"])
            self.assertTrue(s["test_words"], s["name"])
        self.assertEqual(len({s["name"] for s in entries}), len(entries))
        # These tests' records default every switch's field to off.
        self.assertEqual(DEFAULT_FIELDS, {s["field"]: not s["on_value"] for s in entries})


if __name__ == "__main__":
    unittest.main()
