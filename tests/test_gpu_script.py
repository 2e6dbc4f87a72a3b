"""CPU checks of the pieces of bench/gpu/run.sh (the one-call H200 check; the GPU run itself is not done here).

Shell syntax, the training-benchmark preset, the random-model writer, the floors writer, the carried-wheel
installer's decisions and the carried set itself, the summary table from a hand-made OUT folder, the merge
of per-algorithm step times, the roofline table, and run.sh's stage bookkeeping and loud failures (a
missing tool, module, GPU or disk names the stage and the piece, and the exit status is 1).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement
from packaging.version import Version

from lens.config import load_config
from lens.rollout import default_stop_ids
from lens.tasks import vartrack

ROOT = Path(__file__).resolve().parent.parent
GPU = ROOT / "bench" / "gpu"


def _load(name: str, folder: Path = GPU):
    spec = importlib.util.spec_from_file_location(f"gpu_{name}", folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


make_model = _load("make_model")
floors = _load("floors")
install_wheels = _load("install_wheels")
summary = _load("summary")
merge_steps = _load("merge_steps")
roofline = _load("roofline", ROOT / "bench")

TINY = ["--layers", "1", "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--intermediate", "128"]


# ----------------------------------------------------------------------------------------------
# Shell scripts and the preset
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("script", ["run.sh", "wheels.sh"])
def test_shell_syntax(script: str) -> None:
    result = subprocess.run(["bash", "-n", str(GPU / script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_gpu_bench_config_validates() -> None:
    cfg = load_config("configs/gpu_bench.yaml", ["model.path=/tmp/made"], cuda_available=True, world_size=1)
    assert (cfg.device, cfg.model.dtype, cfg.model.path) == ("cuda", "bfloat16", "/tmp/made")
    assert (cfg.rollout.engine, cfg.rollout.max_tokens, cfg.optim.zero_stage) == ("hf", 256, 0)
    assert (cfg.data.train, cfg.data.eval, cfg.data.eval_every) == ("vartrack", [], 0)
    assert (cfg.data.batch_size, cfg.algorithm.m, cfg.algorithm.name) == (16, 8, "lens")
    assert cfg.data.batch_size * cfg.algorithm.m % cfg.optim.micro_batch_size == 0
    assert cfg.algorithm.min_score < 0.0  # zero rewards keep policy == reference: scores are all 0
    assert not cfg.logging.tensorboard
    with pytest.warns(UserWarning, match="min_score"):  # the GRPO arm of the benchmark: same preset
        assert load_config("configs/gpu_bench.yaml", ["algorithm.name=grpo"], cuda_available=True).algorithm.m == 8


def test_gpu_bench_config_needs_a_gpu() -> None:
    with pytest.raises(ValueError, match="device"):
        load_config("configs/gpu_bench.yaml", cuda_available=False)


# ----------------------------------------------------------------------------------------------
# make_model.py
# ----------------------------------------------------------------------------------------------


def test_default_shape_is_qwen25_15b() -> None:
    cfg = make_model.qwen2_config(
        hidden=1536, layers=28, heads=12, kv_heads=2, intermediate=8960, vocab=151936, dtype="bfloat16"
    )
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    # Qwen2.5-1.5B: 1.54 B parameters with tied embeddings (151936 x 1536 counted once).
    assert sum(p.numel() for p in model.parameters()) == 1_543_714_304
    assert cfg.tie_word_embeddings and cfg.eos_token_id == vartrack.build_tokenizer().eos_token_id


def test_make_model_tiny_checkpoint_loads(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "model"
    make_model.main([str(out), *TINY, "--vocab", "512", "--device", "cpu", "--dtype", "float32"])
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(out, local_files_only=True)
    assert model.config.vocab_size == 512 > len(tokenizer)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert default_stop_ids(str(out)) == (tokenizer.eos_token_id,)
    ids = torch.tensor([vartrack.prompt_ids(tokenizer, vartrack.train_set(1, 0)[0].problem)])
    logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], 512) and torch.isfinite(logits).all()
    assert json.loads((out / "make_model.json").read_text())["params"] == sum(p.numel() for p in model.parameters())


def test_make_model_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="--vocab 8"):
        make_model.qwen2_config(hidden=64, layers=1, heads=4, kv_heads=2, intermediate=128, vocab=8, dtype="float32")
    with pytest.raises(ValueError, match="--heads 5"):
        make_model.qwen2_config(hidden=64, layers=1, heads=5, kv_heads=1, intermediate=128, vocab=512, dtype="float32")


def test_floors_writes_json(tmp_path: Path) -> None:
    floors.main([str(tmp_path), "--copy-bytes", str(1 << 20), "--matmul-size", "64"])
    data = json.loads((tmp_path / "floors.json").read_text())
    assert data["copy_GBps"] > 0 and data["bf16_TFLOPs"] > 0
    assert (data["copy_bytes"], data["matmul_size"]) == (1 << 20, 64)
    assert data["machine"]["torch"] == torch.__version__


# ----------------------------------------------------------------------------------------------
# install_wheels.py
# ----------------------------------------------------------------------------------------------


def _wheel(name: str, version: str) -> object:
    return install_wheels.Wheel(Path(f"{name}-{version}-py3-none-any.whl"), name, Version(version))


def test_install_plan_missing_old_and_present() -> None:
    wheels = [_wheel("deepspeed", "0.19.8"), _wheel("setuptools", "78.1.1"), _wheel("tqdm", "4.70.1")]
    have = {"setuptools": "65.5.0", "tqdm": "4.60.0"}
    reqs = [Requirement("deepspeed>=0.19"), Requirement("setuptools>=77"), Requirement("tqdm")]
    chosen = install_wheels.plan(wheels, reqs, have.get, wheel_reqs=lambda w: [])
    assert [(w.name, why) for w, why in chosen] == [
        ("deepspeed", "missing"),
        ("setuptools", "65.5.0 installed, need setuptools>=77"),
    ]


def test_install_plan_counts_only_chosen_wheels_requirements() -> None:
    # The image has pydantic 2.10 (fine: nothing needs newer) with its own pydantic-core 2.27: the carried
    # pydantic's pin on pydantic-core 2.50.5 must not count, or it would break the image's pydantic.
    # math-verify is missing, and its pin pulls latex2sympy2-extended 1.11.0 over the installed 1.0.
    wheels = [
        _wheel("pydantic", "2.14.4"),
        _wheel("pydantic-core", "2.50.5"),
        _wheel("math-verify", "0.9.0"),
        _wheel("latex2sympy2-extended", "1.11.0"),
    ]
    have = {"pydantic": "2.10.0", "pydantic-core": "2.27.0", "latex2sympy2-extended": "1.0.0"}
    own = {
        "pydantic": [Requirement("pydantic-core==2.50.5")],
        "math-verify": [Requirement("latex2sympy2_extended==1.11.0")],
    }
    chosen = install_wheels.plan(
        wheels, [Requirement("pydantic>=2")], have.get, wheel_reqs=lambda w: own.get(w.name, [])
    )
    assert [(w.name, why) for w, why in chosen] == [
        ("math-verify", "missing"),
        ("latex2sympy2-extended", "1.0.0 installed, need latex2sympy2_extended==1.11.0"),
    ]


def test_install_plan_rejects_a_carried_wheel_that_misses_a_requirement() -> None:
    with pytest.raises(ValueError, match=r"setuptools-70.0.0-py3-none-any.whl: carried 70.0.0"):
        install_wheels.plan([_wheel("setuptools", "70.0.0")], [Requirement("setuptools>=77")], {}.get)


def test_install_retries_one_by_one() -> None:
    chosen = [(_wheel("a", "1.0"), "missing"), (_wheel("b", "1.0"), "missing"), (_wheel("c", "1.0"), "missing")]
    calls = []

    def runner(paths: list[Path], target: Path) -> bool:
        calls.append([p.name for p in paths])
        return len(paths) == 1 and not paths[0].name.startswith("b-")

    failed = install_wheels.install(chosen, Path("/tmp/site"), runner)
    assert [w.name for w in failed] == ["b"]
    assert calls[0] == [w.path.name for w, _ in chosen] and len(calls) == 4
    assert install_wheels.install([], Path("/tmp/site"), runner) == []


def test_wheel_metadata_and_names(tmp_path: Path) -> None:
    path = tmp_path / "demo_pkg-1.2.0-py3-none-any.whl"
    meta = "Name: demo-pkg\nRequires-Dist: hjson\nRequires-Dist: pytest; extra == 'dev'\nRequires-Dist: tqdm>=4\n"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("demo_pkg-1.2.0.dist-info/METADATA", meta)
    assert [str(r) for r in install_wheels.wheel_requirements(path)] == ["hjson", "tqdm>=4"]
    wheel = install_wheels.read_wheel(path)
    assert (wheel.name, wheel.version) == ("demo-pkg", Version("1.2.0"))
    with pytest.raises(ValueError, match=r"notawheel\.whl"):
        install_wheels.read_wheel(tmp_path / "notawheel.whl")
    assert any(r.name == "deepspeed" for r in install_wheels.project_requirements())


# ----------------------------------------------------------------------------------------------
# summary.py
# ----------------------------------------------------------------------------------------------


def _row(name: str, provider: str, median: float, **extra: object) -> str:
    return json.dumps({"name": name, "provider": provider, "shape": {"N": 8, "V": 16}, "median": median, **extra})


def _fake_out(out: Path) -> None:
    raw = out / "raw"
    (raw / "step").mkdir(parents=True)
    (raw / "stages.tsv").write_text("build\tok\t61\ntests\tfailed rc=1\t40\nstep\ttimeout after 300 s\t300\n")
    machine = {"device": "NVIDIA H200", "torch": "2.11.0+cu130", "sms": 132}
    floors_data = {"machine": machine, "copy_GBps": 4300.0, "bf16_TFLOPs": 790.0, "matmul_size": 8192}
    (out / "floors.json").write_text(json.dumps(floors_data))
    (raw / "gpu_tests.xml").write_text(
        '<testsuites><testsuite name="pytest" tests="10" failures="1" errors="0" skipped="2" time="12.5">'
        '<testcase classname="tests.kernels.test_x" name="test_a[8|16]"><failure message="boom"/></testcase>'
        "</testsuite></testsuites>"
    )
    rows = [
        _row("token_logprobs_fwd", "torch_ref", 0.004, floor_s=0.001),
        _row("token_logprobs_fwd", "lens", 0.002, floor_s=0.001),
        _row("crpo_loss", "torch", 0.003),
        _row("crpo_loss", "native", 0.0006),
        "not json",
    ]
    (out / "results.jsonl").write_text("\n".join(rows) + "\n")
    step = {
        "algorithms": {
            "grpo": {"steps": 3, "stages": {"generate": 10.0, "update": 4.0, "step": 15.0}},
            "lens": {"steps": 3, "stages": {"generate": 10.0, "purify_generate": 9.0, "update": 4.0, "step": 24.0}},
        }
    }
    (raw / "step" / "step_time.json").write_text(json.dumps(step))


def test_summary_renders_every_section(tmp_path: Path) -> None:
    _fake_out(tmp_path)
    assert summary.main([str(tmp_path)]) == 0
    text = (tmp_path / "summary.md").read_text()
    assert "| tests | failed rc=1 | 40 |" in text and "| step | timeout after 300 s | 300 |" in text
    assert "| copy bandwidth (read + write) | 4300 GB/s |" in text and "| bf16 matmul 8192^3 | 790.0 TFLOP/s |" in text
    assert "| sms | 132 |" in text
    # 10 tests, 1 failure, 2 skipped -> 7 passed; the '|' of the parametrize id is escaped in markdown.
    assert "7 passed, 1 failed, 0 errors, 2 skipped in 12.5 s" in text
    assert "FAILED `tests.kernels.test_x::test_a[8\\|16]`" in text
    # 4 ms / 2 ms = 2.00x; 2 ms / 1 ms floor = 2.00; 3 ms / 0.6 ms = 5.00x, no floor; the bad line is counted.
    assert "| token_logprobs_fwd | N=8,V=16 | 4.000 | lens | 2.000 | 2.00x | 2.00 |" in text
    assert "| crpo_loss | N=8,V=16 | 3.000 | native | 0.600 | 5.00x | - |" in text
    assert "(1 unreadable lines skipped)" in text
    assert "| purify_generate | - | 9.000 | - |" in text and "| **step** | 15.000 | 24.000 | 1.60 |" in text
    assert "LENS / GRPO step time: 1.60x" in text


def test_summary_handles_missing_stages(tmp_path: Path) -> None:
    text = summary.render(tmp_path)
    for expected in ("no stages.tsv", "floors.json missing", "tests did not run", "no results.jsonl", "did not finish"):
        assert expected in text
    (tmp_path / "gpu_tests.log").write_text("....\n3 passed, 1 skipped in 4.20s\n")
    (tmp_path / "step_time.md").write_text("| algo | step |\n| grpo | 1.0 |\n")
    (tmp_path / "step_time.json").write_text("[1, 2]")
    text = summary.render(tmp_path)
    assert "3 passed, 0 failed, 0 errors, 1 skipped in 4.2 s" in text
    assert "bench_step's own table" in text and "| grpo | 1.0 |" in text


def test_step_times_of_flat_records() -> None:
    data = [{"algorithm": "grpo", "time/generate": 2.0, "time/step": 3.0, "steps": 3}, {"algorithm": "lens"}]
    assert summary.algorithm_times(data) == {"grpo": {"generate": 2.0, "step": 3.0}, "lens": {}}
    assert summary.step_total({"generate": 2.0, "update": 1.5}) == 3.5
    assert summary.stage_times({"stages": {"generate": {"mean": 1.5, "std": 0.1}}}) == {"generate": 1.5}


# ----------------------------------------------------------------------------------------------
# run.sh bookkeeping (no stage that needs a GPU is selected)
# ----------------------------------------------------------------------------------------------


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "OUT": str(tmp_path), "LENS_GPU_PYTHON": sys.executable, **env}
    return subprocess.run(["bash", str(GPU / "run.sh")], env=full, capture_output=True, text=True, timeout=60)


def test_run_sh_packs_out_within_the_tool_limits(tmp_path: Path) -> None:
    result = _run(tmp_path, LENS_GPU_STAGES="")
    assert result.returncode == 0, result.stdout + result.stderr
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["raw.tar.gz", "run.log", "summary.md"]  # the device tool brings back at most 8 files
    with tarfile.open(tmp_path / "raw.tar.gz") as tar:
        stages = tar.extractfile("raw/stages.tsv").read().decode()
    assert stages.count("skipped: not selected") == 10
    assert "# lens GPU check" in (tmp_path / "run.log").read_text()


def test_run_sh_skips_stages_past_the_budget(tmp_path: Path) -> None:
    result = _run(tmp_path, LENS_GPU_STAGES="wheels machine", LENS_GPU_BUDGET_S="20")
    assert result.returncode == 1
    text = (tmp_path / "summary.md").read_text()
    assert "| wheels | skipped: no time left | 0 |" in text and "| machine | skipped: no time left | 0 |" in text


def test_run_sh_machine_stage_names_everything_missing(tmp_path: Path) -> None:
    # This CPU machine has no GPU (and no liger-kernel): the preflight must fail, say why, and say which stage.
    result = _run(tmp_path, LENS_GPU_STAGES="machine", LENS_GPU_MIN_FREE_GB="100000000")
    assert result.returncode == 1
    log = (tmp_path / "run.log").read_text()
    assert "MISSING: a CUDA device torch can use" in log
    assert re.search(r"MISSING: free disk: \d+ GB < 100000000 GB", log)
    if importlib.util.find_spec("liger_kernel") is None:
        assert "MISSING: python module liger_kernel" in log
    assert "=== stage machine FAILED (failed rc=1)" in log
    assert log.rstrip().splitlines()[-1] == "FAILED stages: machine"
    assert "| machine | failed rc=1 |" in (tmp_path / "summary.md").read_text()


def test_run_sh_step_stage_refuses_to_fill_the_disk(tmp_path: Path) -> None:
    result = _run(tmp_path, LENS_GPU_STAGES="step", LENS_GPU_MIN_FREE_GB="100000000")
    assert result.returncode == 1
    log = (tmp_path / "run.log").read_text()
    assert re.search(r"free disk \d+ GB < 100000000 GB before the grpo run", log)
    assert log.rstrip().splitlines()[-1] == "FAILED stages: step"


def _sh_array(script: str, name: str) -> list[str]:
    """The words of a bash array assignment `name=(...)` in a script (may span lines)."""
    body = re.search(rf"^{name}=\((.*?)\)", (GPU / script).read_text(), re.S | re.M).group(1)
    return body.split()


def test_wheels_carry_every_module_the_preflight_needs() -> None:
    # Everything run.sh's machine stage imports comes from the GPU image (torch, triton, transformers) or
    # from a carried wheel; a new import without its wheel would fail only on the GPU machine.
    carried = {n.split("==")[0].replace("_", "-").lower() for n in _sh_array("wheels.sh", "names")}
    image = {"torch", "triton", "transformers"}
    dist = {"yaml": "pyyaml", "math_verify": "math-verify", "pytest_benchmark": "pytest-benchmark",
            "liger_kernel": "liger-kernel"}  # fmt: skip
    run_sh = (GPU / "run.sh").read_text()
    modules = re.search(r"for mod in (.*?); do", run_sh, re.S).group(1).replace("\\", " ").split()
    assert {"pytest", "pytest_benchmark", "hypothesis", "liger_kernel", "deepspeed"} <= set(modules)
    assert [m for m in modules if m not in image and dist.get(m, m).replace("_", "-") not in carried] == []
    # The test and benchmark stack's own dependencies travel too, and ninja (the CUDA build needs it on PATH).
    assert {"iniconfig", "pluggy", "pygments", "packaging", "py-cpuinfo2", "sortedcontainers", "ninja"} <= carried
    assert "liger-kernel==0.8.5" in _sh_array("wheels.sh", "names")
    assert 'export PATH="/tmp/site/bin:$PATH"' in run_sh


def _step_run(path: Path, algorithm: str, step_s: float) -> Path:
    path.mkdir(parents=True)
    data = {"algorithms": {algorithm: {"steps": 3, "stages": {"generate": step_s / 2, "step": step_s}}}}
    (path / "step_time.json").write_text(json.dumps(data))
    (path / "step_time.md").write_text(f"| {algorithm} | {step_s} |\n")
    return path


def test_merge_steps_feeds_the_summary(tmp_path: Path) -> None:
    runs = [_step_run(tmp_path / "grpo", "grpo", 10.0), _step_run(tmp_path / "lens", "lens", 15.0)]
    out = tmp_path / "out"
    assert merge_steps.main([str(out / "raw" / "step"), *map(str, runs)]) == 0
    merged = json.loads((out / "raw" / "step" / "step_time.json").read_text())
    assert set(merged["algorithms"]) == {"grpo", "lens"} and len(merged["runs"]) == 2
    assert "| grpo | 10.0 |" in (out / "raw" / "step" / "step_time.md").read_text()
    assert "LENS / GRPO step time: 1.50x" in summary.render(out)


def test_merge_steps_names_a_missing_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _step_run(tmp_path / "grpo", "grpo", 10.0)
    assert merge_steps.main([str(tmp_path / "out"), str(run), str(tmp_path / "lens")]) == 1
    assert f"{tmp_path / 'lens'}: no readable step_time.json" in capsys.readouterr().err
    assert set(json.loads((tmp_path / "out" / "step_time.json").read_text())["algorithms"]) == {"grpo"}
    assert merge_steps.main([str(tmp_path / "out2"), str(run), str(run)]) == 1  # the same algorithm twice


def test_roofline_table_is_current() -> None:
    assert (ROOT / "bench" / "results" / "roofline.md").read_text() == roofline.render()
    # Qwen2.5-7B head, 16,384 tokens: 2 N H V = 17.9 TFLOP at 790 TFLOP/s = 22.6 ms, compute-bound.
    fwd = next(w for w in roofline.works() if w.kernel == "linear_token_logprobs fwd" and "qwen2.5-7b" in w.shape)
    ms, bound = roofline.floor_s(fwd, "H200")
    assert (round(ms * 1e3, 1), bound) == (22.6, "compute")
    # token_logprobs forward reads 16,384 x 152,064 bf16 logits: ~5.0 GB at 4.3 TB/s = 1.16 ms.
    tok = next(w for w in roofline.works() if w.kernel == "token_logprobs fwd")
    assert roofline.floor_s(tok, "H200")[1] == "memory" and abs(roofline.floor_s(tok, "H200")[0] - 1.159e-3) < 1e-5
