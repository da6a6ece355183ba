"""The CUDA backend's switched-off paths, the one list of them (bench/switches.json), as the device
check's scripts read it: summary.py (what a record asked for and ran) and best_switches.py (the
candidate defaults). tests/test_cuda_switches_together.cpp and tests/CMakeLists.txt read the same
file."""
import json
import os

SWITCH_TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "switches.json")
with open(SWITCH_TABLE) as _table:
    SWITCH_ENTRIES = tuple(json.load(_table)["switches"])

# The switches a record names (what the environment asked for), as its context's description names
# them ("switches": what the backend had on), those that a value of true turns on (not split-K off).
SWITCHES = tuple(s["field"] for s in SWITCH_ENTRIES if s["on_value"] is True)

# What shows that a switch's path ran in a record's steps: counters of its context's description
# (mpt_context_describe, per bench run), any of them above 0, as (section, key); keyed by the record's
# field (switches.json's "evidence", and why each). Split-K off has none.
EVIDENCE = {s["field"]: tuple(tuple(place.split(".", 1)) for place in s["evidence"])
            for s in SWITCH_ENTRIES if s["evidence"]}


def environment_setting(field, on=True):
    """The environment setting that asks for a record's switch field's value (mptrain-bench names each
    field after its variable): ("grouped_sgd", True) is MPTRAIN_CUDA_GROUPED_SGD=1, ("split_k", False)
    MPTRAIN_CUDA_SPLIT_K=0."""
    return f"MPTRAIN_CUDA_{field.upper()}={1 if on else 0}"
