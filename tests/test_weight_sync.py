"""The weight sync under ZeRO-3 hands the rollout engine a bucket of parameters at a time: what is gathered while
the engine copies never exceeds the bucket, and the engine ends with the trainer's weights.

One process, ZeRO-3 on a one-rank group (DeepSpeed still partitions: a parameter's data is empty until gathered),
the tiny vartrack model, lens/train.py's `sync_weights` into an HF engine copy.
"""

from __future__ import annotations

import contextlib
import types

import pytest
import torch

from lens import memplan, model, packing, train
from lens.config import load_config
from lens.rollout import make_engine
from lens.tasks import vartrack

pytestmark = pytest.mark.skipif(not (vartrack.ASSETS_DIR / "model.safetensors").exists(), reason="no checkpoint")


def test_consecutive_buckets_hand_computed():
    assert packing.consecutive_buckets([3, 4, 2, 9, 1, 1], 7) == [[0, 1], [2], [3], [4, 5]]
    assert packing.consecutive_buckets([], 7) == []


class _Recording:
    """An engine that measures, as it receives each bucket, the bytes of partitioned parameters gathered."""

    def __init__(self, engine, params: list[torch.nn.Parameter]) -> None:
        self.engine, self.params, self.held, self.buckets = engine, params, [], []

    def load_weights(self, buckets):
        def measured():
            from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

            for bucket in buckets:
                gathered = [p for p in self.params if p.ds_status == ZeroParamStatus.AVAILABLE and not p.ds_persist]
                self.held.append(sum(model.full_bytes(p) for p in gathered))
                self.buckets.append(sum(t.numel() * t.element_size() for t in bucket.values()))
                yield bucket

        self.engine.load_weights(measured())


def test_zero3_sync_gathers_one_bucket_at_a_time(monkeypatch):
    path = str(vartrack.ASSETS_DIR)
    cfg = load_config("cpu_default", [f"model.path={path}", "optim.zero_stage=3", "logging.tensorboard=false"])
    model.setup_distributed("cpu")
    policy, _ = model.load_models(cfg, torch.device("cpu"))
    trainer = model.build_engine(policy, cfg)
    params = list(trainer.module.parameters())
    assert all(hasattr(p, "ds_id") for p in params)
    partitioned = sum(model.full_bytes(p) for p in params if not p.ds_persist)
    largest = max(model.full_bytes(p) for p in params)
    bucket = max(partitioned // 4, largest)  # a quarter of the model: gathering it whole would fail below
    monkeypatch.setattr(memplan, "SYNC_BUCKET_BYTES", bucket)
    engine = make_engine("hf", path, dtype="float32", device="cpu", seed=0)
    with torch.no_grad():
        for p in engine.model.parameters():
            p.zero_()  # so that the sync has something to do
    recording = _Recording(engine, params)
    run = types.SimpleNamespace(
        cfg=cfg, trainer=trainer, sampler=recording, timer=lambda name: contextlib.nullcontext()
    )
    train.sync_weights(run)
    assert max(recording.held) <= bucket, (recording.held, bucket, partitioned)
    assert len(recording.held) > 1
    assert all(b <= bucket for b in recording.buckets)
    with model.gathered(params):
        want = {n: p.detach().clone() for n, p in trainer.module.named_parameters()}
    for name, p in engine.model.named_parameters():
        assert torch.equal(p, want[name]), name
