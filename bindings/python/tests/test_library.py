"""The library and its context through the bindings: the version and status strings, the context's backend,
precision, memory and description, and objects that outlive a closed context."""
import mptrain
from conftest import CLASSES, FEATURES, raises


def test_version_matches_the_header_macros():
    import os
    import re
    header = open(os.environ.get("MPTRAIN_HEADER") or os.path.join(
        os.path.dirname(__file__), "..", "..", "..", "include", "mptrain", "mptrain.h")).read()
    parts = [re.search(r"#define MPT_VERSION_%s (\d+)" % p, header).group(1) for p in ("MAJOR", "MINOR", "PATCH")]
    assert mptrain.version() == ".".join(parts)


def test_status_strings_name_the_status():
    assert mptrain.status_string(mptrain.Status.SHAPE_MISMATCH) == "MPT_STATUS_SHAPE_MISMATCH"
    assert mptrain.status_string(999) == "MPT_STATUS_UNKNOWN"


def test_context_reports_backend_precision_and_memory(ctx, model, blobs):
    assert ctx.backend == mptrain.Backend.CPU
    # bf16 where the CPU multiplies it natively (AMX), else fp32; the trainer runs what auto resolved to.
    assert ctx.resolve_precision("auto") in (mptrain.Precision.FP32, mptrain.Precision.MIXED_BF16)
    assert mptrain.Trainer(model).precision == ctx.resolve_precision("auto")
    samples, labels = blobs
    mptrain.Trainer(model).fit(mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES), 1, 32)
    used, peak = ctx.memory
    assert peak >= used > 0
    assert mptrain.cuda_device_count() >= 0


def test_context_describes_its_cpu_backend_as_json(blobs):
    ctx = mptrain.Context(backend="cpu", threads=1, memory_budget=1 << 30)
    description = ctx.describe()
    assert description["version"] == mptrain.version()
    assert description["backend"] == "cpu"
    assert isinstance(description["device"], str) and description["device"]
    assert description["auto_fallback"] == ""  # the CPU was asked for, not fallen back to
    assert description["memory_budget_bytes"] == 1 << 30
    assert description["threads"] == 1
    assert description["gemm_library"]
    assert description["amx"] in ("supported", "refused by Linux", "absent")
    assert description["bf16_gemm"] in ("amx tiles", "avx512-bf16 dot products", "emulated in fp32")
    assert description["fp16_gemm"] in ("amx tiles", "emulated in fp32")
    assert description["small_gemm"] in ("avx512", "avx512f", "avx2", "none")
    assert "device_index" not in description  # a CUDA member
    assert ctx.describe() == description  # nothing changes while the context is unused

    model = mptrain.Model(ctx, FEATURES).add_dense(CLASSES, "softmax")
    samples, labels = blobs
    mptrain.Trainer(model).fit(mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES), 1, 32)
    trained = ctx.describe()
    assert (trained["memory_used_bytes"], trained["memory_peak_bytes"]) == tuple(ctx.memory)
    assert trained["memory_peak_bytes"] > 0
    ctx.close()
    with raises(mptrain.Status.INVALID_ARGUMENT):
        ctx.describe()


def test_children_outlive_a_closed_context(blobs):
    ctx = mptrain.Context(backend="cpu", threads=1)
    model = mptrain.Model(ctx, FEATURES).add_dense(CLASSES, "softmax")
    samples, labels = blobs
    data = mptrain.Dataset.from_f32(ctx, samples, labels, CLASSES)
    ctx.close()
    del ctx
    trainer = mptrain.Trainer(model)
    model.close()  # the trainer keeps the C model alive
    trainer.fit(data, 1, 32)
    assert trainer.evaluate(data).accuracy > 0.3
    with mptrain.Context(backend="cpu") as scoped:
        assert not scoped.closed
    assert scoped.closed
