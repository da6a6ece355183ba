"""Which of the CUDA backend's switched-off paths the device check's own measurements favour as defaults.

A GPU session gets one device check; a second call on a fresh machine costs minutes of a 15-minute
budget. So the check chooses, from the switch stages it has just timed, the set of switches that made
the plain mixed-bf16 step faster, and times the whole table and the 50-epoch seed run with that set in
the same call: what committing those switches as the defaults would measure.

  best_switches.py choose CTEST_LOG RECORDS.json...
      The reasons, a line each, then on the last line the chosen settings ("VAR=value ..."; an empty
      line when none is chosen).
  best_switches.py report "VAR=value ..." RECORDS.json...
      The records timed with exactly that set against the default step, per precision and batch,
      with the issue's targets.

The rule, from mptrain-bench's records of the plain step (seed MLP, SGD, constant rate, resident data,
no caveat such as a refused graph or a switch the device turned off):
- at each batch the fastest switch set timed there among those none of whose switches that ran there
  failed its GPU test (a failed switch in the overall fastest set passes the batch to the fastest set
  without one, not to none; a failing case that names none of the switches is a failure of the
  default path, and then nothing is chosen at all), if at least 2% faster than the default step, less
  the switches whose paths did not run in its steps there (its context's op counters: grouped SGD's
  at batch 4096, where no fused SGD runs; the small-batch kernels past 64 rows), which take no credit
  for its time;
- the union of those sets, less any switch that was timed alone and was more than 2% slower than the
  default at some batch;
- split-K off dropped so, having lost only at smaller batches than those it won at (the GEMMs that
  need the split to fill the GPU, against the large outputs' gain), gives way to the rule that keeps
  only the large GEMMs whole, MPTRAIN_CUDA_SPLIT_K_SMALL_OUTPUTS=1, unless that rule's own tests
  failed or it was slower alone; with split-K off kept, the rule (which it overrides) is not chosen.
The GPU test stage also runs every switch on together (tests/test_cuda_switches_together.cpp). Its
failure names no one switch, so it stops no choice: the device check runs that case again under the
candidate's own settings, and that run says whether the candidate may be committed."""
import os
import sys

from gpu_test_log import failing_cases
from summary import TARGETS_US, caveats, idle_switches, load, target_device_note
from switch_table import SWITCH_ENTRIES, environment_setting

# (switch, the record's field, the field's value when switched on, words that name it in a GPU test
# case's name, lowercase), from bench/switches.json; its environment setting follows from the field
# (switch_table.environment_setting).
SWITCHES = tuple((s["name"], s["field"], s["on_value"], tuple(s["test_words"])) for s in SWITCH_ENTRIES)
# The case (or, should the program fail without naming a case, the test) of every switch on together.
TOGETHER = ("the cuda switches set on together", "test cuda_switches_together")
FASTER = 0.98  # a set is chosen at a batch when its step takes at most this share of the default's
SLOWER = 1.02  # a switch timed alone is dropped when its step took more than this share somewhere


def switch_set(record):
    return frozenset(name for name, field, on, _ in SWITCHES if record.get(field, not on) == on)


def acted(record):
    """The switches of the record's set whose paths ran in its steps, by its context's counters
    (switch_table.EVIDENCE, keyed by the switches' names here); a record without counters is taken at its word."""
    return switch_set(record) - frozenset(idle_switches(record))


def plain_step(record):
    """A record of mptrain-bench's plain step: the seed MLP, plain SGD at a constant rate, resident
    data, none of the options that add work (summary.py shows those against it), cuBLASLt's fused
    epilogues on."""
    return (record.get("bench") is None and "framework" not in record and record.get("backend") == "cuda"
            and "us_per_step" in record and record.get("hidden", [3000, 1000]) == [3000, 1000]
            and record.get("optimizer", "sgd") == "sgd" and not record.get("momentum")
            and not record.get("weight_decay") and record.get("lr_schedule", "constant") == "constant"
            and record.get("data", "resident") == "resident" and not record.get("global_clipnorm")
            and not record.get("ema_momentum") and not record.get("dropout") and not record.get("micro_batch")
            and not record.get("frozen_layers") and not record.get("standardized")
            and record.get("fused_epilogues", True) is not False)  # (a control, not a default step)


def excluded_by_tests(failing):
    """(switches whose tests failed, failing cases that name no switch)."""
    excluded, unexplained = set(), []
    for case in sorted(failing):
        lowered = case.lower()
        named = {name for name, _, _, words in SWITCHES if any(word in lowered for word in words)}
        excluded |= named
        if not named:
            unexplained.append(case)
    return excluded, unexplained


def settings_of(names):
    return " ".join(environment_setting(field, on) for name, field, on, _ in SWITCHES if name in names)


def choose(ctest_log, paths):
    records = [r for r in load(paths) if plain_step(r) and r.get("precision") == "mixed-bf16"]
    failing = failing_cases(ctest_log)
    if failing is None:
        print(f"no finished GPU test log ({ctest_log}): nothing chosen")
        return set()
    together = {case for case in failing if case.lower().startswith(TOGETHER)}
    if together:
        print("every switch on together failed its GPU test (test_cuda_switches_together): the choice goes on, "
              "and the candidate's own run of that test decides whether it may be committed")
    excluded, unexplained = excluded_by_tests(failing - together)
    if unexplained:
        shown = "; ".join(unexplained[:4]) + (f"; and {len(unexplained) - 4} more" if len(unexplained) > 4 else "")
        print(f"{len(unexplained)} GPU test case(s) of the default paths failed, nothing chosen: {shown}")
        return set()
    if excluded:
        print("left out, their GPU tests failed: " + ", ".join(sorted(excluded)))
    defaults = {r["batch"]: r["us_per_step"] for r in records if not switch_set(r) and not caveats(r)}
    if not defaults:
        print("no default mixed-bf16 step timed without a caveat: nothing chosen")
        return set()
    chosen, alone, won_at, slower_at, failed_fastest = set(), {}, {}, {}, set()
    for batch in sorted(defaults):
        timed = [r for r in records if r["batch"] == batch and switch_set(r) and not caveats(r)]
        # The fastest set among those with a switch that ran there (a set idle at this batch is the
        # default step again, and would hide a real winner).
        active = [r for r in timed if acted(r)]
        for r in timed:
            # (A switch alone whose path did not run there timed the default step: no verdict on it.)
            if len(switch_set(r)) == 1 and acted(r):
                name = next(iter(switch_set(r)))
                alone[name] = max(alone.get(name, 0.0), r["us_per_step"] / defaults[batch])
                if r["us_per_step"] / defaults[batch] > SLOWER:
                    slower_at.setdefault(name, set()).add(batch)
        if not active:
            continue
        best = min(active, key=lambda r: r["us_per_step"])
        failed = acted(best) & excluded
        if failed:
            for name in sorted(failed - failed_fastest):
                print(f"{name}: fastest somewhere, but its GPU tests failed")
            failed_fastest |= failed
            # (Its time is not the other switches' alone: the fastest set without a failed switch instead.)
            eligible = [r for r in active if not (acted(r) & excluded)]
            if not eligible:
                print(f"batch {batch}: every set timed there holds a switch whose GPU tests failed")
                continue
            print(f"batch {batch}: the fastest set holds {', '.join(sorted(failed))}: the fastest without a "
                  f"failed switch instead")
            best = min(eligible, key=lambda r: r["us_per_step"])
        share = best["us_per_step"] / defaults[batch]
        names = ", ".join(sorted(switch_set(best)))
        if share <= FASTER:
            idle = sorted(switch_set(best) - acted(best))
            print(f"batch {batch}: fastest {names}: {best['us_per_step']:.0f} us/step, {share:.2f}x the default "
                  f"{defaults[batch]:.0f}" + (f"; no credit to {', '.join(idle)}, whose paths did not run there"
                                              if idle else ""))
            chosen |= acted(best)
            for name in acted(best):
                won_at.setdefault(name, set()).add(batch)
        else:
            print(f"batch {batch}: no set 2% faster than the default {defaults[batch]:.0f} us/step "
                  f"(fastest {names}: {share:.2f}x)")
    chosen -= excluded  # (none left: no set with a failed switch was taken)
    for name in sorted(chosen):
        if alone.get(name, 0.0) > SLOWER:
            print(f"{name}: dropped, alone it took {alone[name]:.2f}x the default step at some batch")
            chosen.discard(name)
            if name == "split_k_off" and "split_k_small_outputs" not in chosen:
                substitute(chosen, excluded, alone, won_at[name], slower_at[name])
    if {"split_k_off", "split_k_small_outputs"} <= chosen:
        print("split_k_small_outputs: dropped, split_k_off (kept) keeps every GEMM whole")
        chosen.discard("split_k_small_outputs")
    return chosen


def substitute(chosen, excluded, alone, won_at, slower_at):
    """Split-K off, dropped for a batch where it was slower, replaced by the rule that keeps only the
    GEMMs with large outputs whole, when that is the rule's case (split K lost at smaller batches than
    every one it won at: the small GEMMs wanted the split, the large ones did not) and the rule may be."""
    rule = "split_k_small_outputs"
    if max(slower_at) >= min(won_at):
        print(f"{rule}: not in split_k_off's place, which was slower alone at batch {max(slower_at)} and "
              f"fastest at {min(won_at)}: not the large batches' gain the rule keeps")
    elif rule in excluded:
        print(f"{rule}: not in its place, its GPU tests failed")
    elif alone.get(rule, 0.0) > SLOWER:
        print(f"{rule}: not in its place, alone it took {alone[rule]:.2f}x the default step at some batch")
    else:
        print(f"{rule}: in split_k_off's place (K kept whole only in the GEMMs with a tile per multiprocessor or more)")
        chosen.add(rule)


def report(settings, paths):
    asked = settings.split()
    wanted = frozenset(name for name, field, on, _ in SWITCHES if environment_setting(field, on) in asked)
    defaults, mine, from_candidate_stage = {}, {}, set()
    for path in paths:
        # The candidate stages' own records (mptrain_candidate*.json) over a switch stage's that timed
        # the same set, whichever file came first.
        candidate_stage = os.path.basename(path).startswith("mptrain_candidate")
        for r in load([path]):
            if not plain_step(r):
                continue
            key = (r["precision"], r["batch"])
            if not switch_set(r):
                defaults[key] = r["us_per_step"]
            elif switch_set(r) == wanted and (candidate_stage or key not in from_candidate_stage):
                mine[key] = r
                if candidate_stage:
                    from_candidate_stage.add(key)
    if not mine:
        print(f"candidate defaults ({settings or 'none'}): not timed")
        return
    print(f"candidate defaults ({settings}):")
    note = target_device_note(list(mine.values()))
    if note:
        print(f"  {note}")
    for batch in sorted({b for _, b in mine}):
        cells = []
        for precision in ("fp32", "mixed-fp16", "mixed-bf16"):
            r = mine.get((precision, batch))
            if r is None:
                continue
            default = defaults.get((precision, batch))
            ratio = f" ({r['us_per_step'] / default:.2f}x default)" if default else ""
            cells.append(f"{precision} {r['us_per_step']:.0f}{ratio}{caveats(r)}")
        bf16, fp32 = mine.get(("mixed-bf16", batch)), mine.get(("fp32", batch))
        verdict = ""
        if bf16 and batch in TARGETS_US:
            verdict = f"; target {TARGETS_US[batch]} " + ("met" if bf16["us_per_step"] <= TARGETS_US[batch] else "MISSED")
        if bf16 and fp32:
            verdict += "; mixed-bf16 < fp32 " + ("yes" if bf16["us_per_step"] < fp32["us_per_step"] else "NO")
        print(f"  batch {batch}: " + ", ".join(cells) + " us/step" + verdict)


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "choose":
        chosen = choose(sys.argv[2], sys.argv[3:])
        print(settings_of(chosen))
    elif len(sys.argv) >= 3 and sys.argv[1] == "report":
        report(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
