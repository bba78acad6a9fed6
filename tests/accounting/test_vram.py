"""`plan vram` against hand-computed values for public architectures and the seed's example."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hybrid_gateway.accounting.vram import (
    GIB,
    PRESETS,
    Headroom,
    PlanError,
    WeightFormat,
    Workload,
    estimate_params,
    kv_bytes_per_token,
    load_config_json,
    plan_vram,
    preset,
)
from hybrid_gateway.cli import main


def test_llama_2_7b_fp16_kv_is_half_a_mib_per_token() -> None:
    # 2 (K, V) x 32 layers x 32 KV heads x 128 head dim x 2 bytes = 524,288 bytes = 0.5 MiB
    assert kv_bytes_per_token(preset("llama-2-7b"), "fp16") == 524_288 == 2**20 // 2


def test_qwen2_5_7b_gqa_kv_per_token() -> None:
    # 2 x 28 layers x 4 KV heads x 128 (3584 / 28) x 2 bytes (bf16) = 57,344 bytes
    assert kv_bytes_per_token(preset("qwen2.5-7b"), "bf16") == 57_344


@pytest.mark.parametrize("name", ["llama-2-70b", "llama-3-70b", "qwen2.5-72b"])
def test_70b_gqa_kv_per_token(name: str) -> None:
    # 2 x 80 layers x 8 KV heads x 128 (8192 / 64) x 2 bytes = 327,680 bytes
    assert kv_bytes_per_token(preset(name), "fp16") == 327_680
    # fp8 KV halves it: 2 x 80 x 8 x 128 x 1 = 163,840
    assert kv_bytes_per_token(preset(name), "fp8") == 163_840


def test_llama_2_7b_parameter_estimate_within_two_percent() -> None:
    # embeddings 2 x 32000 x 4096 = 262,144,000 (untied LM head)
    # per layer: attention 4 x 4096^2 = 67,108,864; gated MLP 3 x 4096 x 11008 = 135,266,304;
    # two norms 8,192 -> 202,383,360 x 32 = 6,476,267,520; + final norm 4,096
    estimate = estimate_params(preset("llama-2-7b"))
    assert estimate == 262_144_000 + 6_476_267_520 + 4_096
    assert abs(estimate - 6.74e9) / 6.74e9 < 0.02


def test_seed_example_6b_int8_at_1024_tokens_and_30_concurrent() -> None:
    plan = plan_vram(
        preset("6b"), WeightFormat("int8"), Workload(1024, 30, "fp16"), gpu=(24.0, 0.9)
    )
    # weights: 6.0e9 params x 1 byte = 6.0 GB
    assert plan.weight_bytes == 6_000_000_000
    # KV: 2 x 28 layers x 32 KV heads x 128 x 2 bytes = 458,752 bytes/token;
    # x 1024 tokens = 469,762,048 bytes = 0.47 GB, the seed's "~500 MB"
    assert plan.kv_bytes_per_token == 458_752
    assert plan.kv_bytes_per_request == 469_762_048
    # weights + KV x 30 = 6.0e9 + 14,092,861,440 = 20.09 GB (seed: 6 + 0.5 x 30 = 21 GB)
    assert plan.kv_bytes_total == 14_092_861_440
    assert plan.weight_bytes + plan.kv_bytes_total == pytest.approx(21e9, rel=0.05)
    # headroom: 1 GiB + 10 % of 6.0e9 = 1,073,741,824 + 600,000,000 = 1,673,741,824
    assert plan.headroom_bytes == 1_673_741_824
    assert plan.total_bytes == 6_000_000_000 + 14_092_861_440 + 1_673_741_824  # 21.77 GB
    assert plan.fits


def test_int4_weight_memory_includes_group_scales_and_zeros() -> None:
    # per 128 weights: 128 x 0.5 byte + 2 (fp16 scale) + 0.5 (packed int4 zero) = 66.5 bytes
    # -> 0.51953125 bytes/param, 3.9 % over the bare 0.5
    fmt = WeightFormat("int4", group_size=128)
    assert fmt.bytes_per_param() == pytest.approx(66.5 / 128)
    plan = plan_vram(preset("llama-2-7b"), fmt, Workload(), gpu=(80.0, 0.9))
    params = 6_738_415_616
    assert plan.weight_bytes == pytest.approx(params * 66.5 / 128, abs=1)
    assert plan.weight_bytes > params * 0.5
    # a smaller group costs more: 32 -> 0.5 + 2.5 / 32 = 0.578125
    assert WeightFormat("int4", group_size=32).bytes_per_param() == pytest.approx(0.578125)


def test_max_concurrency_for_an_80_gib_gpu() -> None:
    # Llama-2-7B fp16: weights 6,738,415,616 x 2 = 13,476,831,232 bytes
    # headroom 1 GiB + 10 % = 1,073,741,824 + 1,347,683,123 = 2,421,424,947
    # budget 80 GiB x 0.9 = 77,309,411,328; left for KV = 61,411,155,149
    # KV/request at 4096 tokens = 524,288 x 4096 = 2 GiB = 2,147,483,648 -> floor(28.6) = 28
    plan = plan_vram(preset("llama-2-7b"), WeightFormat("fp16"), Workload(4096, 32), (80.0, 0.9))
    assert plan.weight_bytes == 13_476_831_232
    assert plan.headroom_bytes == 2_421_424_947
    assert plan.budget_bytes == 77_309_411_328
    assert plan.max_concurrency == 28
    assert not plan.fits  # 32 were asked for
    flags = {e.engine: dict(e.flags) for e in plan.engines}
    assert flags["vllm"]["--max-num-seqs"] == "28"
    assert flags["vllm"]["--max-model-len"] == "4096"
    assert flags["sglang"]["--max-running-requests"] == "28"
    # static = 0.9 - 2,421,424,947 / 80 GiB = 0.9 - 0.0282 = 0.8718 -> 0.87
    assert flags["sglang"]["--mem-fraction-static"] == "0.87"
    assert plan.notes  # says it does not fit


def test_weights_that_do_not_fit_give_zero_concurrency() -> None:
    plan = plan_vram(preset("llama-2-70b"), WeightFormat("fp16"), Workload(), (24.0, 0.9))
    assert plan.max_concurrency == 0 and not plan.fits


def test_quantization_and_kv_flags() -> None:
    plan = plan_vram(
        preset("llama-3-8b"),
        WeightFormat("int4", int4_method="gptq"),
        Workload(8192, 8, "fp8"),
        (24.0, 0.9),
        Headroom(fixed_gib=0.5, weight_fraction=0.0),
    )
    flags = {e.engine: dict(e.flags) for e in plan.engines}
    assert flags["vllm"]["--quantization"] == "gptq"
    assert flags["vllm"]["--kv-cache-dtype"] == "fp8"
    assert flags["sglang"]["--kv-cache-dtype"] == "fp8_e5m2"
    assert plan.headroom_bytes == GIB // 2
    fp16 = plan_vram(preset("llama-3-8b"), WeightFormat("bf16"), Workload(), (80.0, 0.9))
    assert "--quantization" not in dict(fp16.engines[0].flags)


def test_config_json_loading(tmp_path: Path) -> None:
    # Qwen2.5-7B's config.json values (head_dim derived: 3584 / 28 = 128)
    config = {
        "model_type": "qwen2",
        "hidden_act": "silu",
        "num_hidden_layers": 28,
        "hidden_size": 3584,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "intermediate_size": 18944,
        "tie_word_embeddings": False,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    arch = load_config_json(path)
    assert arch.attention.head_dim == 128
    assert arch.mlp.gated
    assert arch.attention == PRESETS["qwen2.5-7b"].attention
    assert kv_bytes_per_token(arch, "bf16") == 57_344
    # 7.62B on the model card (the estimate leaves out the q/k/v biases)
    assert estimate_params(arch) == pytest.approx(7.62e9, rel=0.01)


def test_config_json_errors(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="cannot read"):
        load_config_json(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"hidden_size": 4096}))
    with pytest.raises(PlanError, match="num_attention_heads"):
        load_config_json(bad)


def test_bad_precision_and_preset_raise() -> None:
    with pytest.raises(PlanError, match="int3"):
        WeightFormat("int3")
    with pytest.raises(PlanError, match="fp4"):
        Workload(kv_dtype="fp4")
    with pytest.raises(PlanError, match="unknown preset"):
        preset("gpt-5")


def test_cli_table(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "vram", "--preset", "llama-2-7b", "--weights", "fp16", "--kv-dtype", "fp16"]
    assert main([*argv, "--context", "4096", "--concurrency", "16", "--gpu-gib", "80"]) == 0
    out = capsys.readouterr().out
    assert "524,288 bytes (0.5 MiB)" in out
    assert "--max-num-seqs 16" in out and "--mem-fraction-static" in out


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "vram", "--preset", "6b", "--weights", "int8", "--context", "1024"]
    assert main([*argv, "--concurrency", "30", "--gpu-gib", "24", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["bytes"]["weights"] == 6_000_000_000
    assert data["bytes"]["kv_per_request"] == 469_762_048
    assert data["fits"] is True
    assert data["flags"]["vllm"]["--max-num-seqs"] == "30"


def test_cli_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "num_hidden_layers": 80,
                "hidden_size": 8192,
                "num_attention_heads": 64,
                "num_key_value_heads": 8,
                "vocab_size": 32000,
                "intermediate_size": 28672,
                "hidden_act": "silu",
            }
        )
    )
    assert main(["plan", "vram", "--config", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bytes"]["kv_per_token"] == 327_680


@pytest.mark.parametrize(
    "extra",
    [
        ["--preset", "gpt-5"],
        ["--preset", "6b", "--weights", "int3"],
        ["--preset", "6b", "--kv-dtype", "fp4"],
        ["--config", "/does/not/exist/config.json"],
        ["--preset", "6b", "--context", "0"],
    ],
)
def test_cli_bad_input_exits_2(extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "vram", *extra]) == 2
    assert "hybrid-gateway plan vram:" in capsys.readouterr().err
