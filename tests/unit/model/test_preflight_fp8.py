"""fp8: the Hopper configs are their bf16 configs plus ``quantization: fp8``, and GPUs below 8.9 are refused
(whether fp8 comes from ``quantization`` or from a ``quantization_config``: tests/unit/model/test_quantization.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from serve_app.model.preflight import FP8_MIN_CAPABILITY, HardwareError, check_fp8, fp8_problems
from serve_app.model.quantization import QUANTIZATION_FP8, fp8_source

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_an_fp8_config_is_its_bf16_config_with_quantization_fp8(gpu):
    bf16 = yaml.safe_load((CONFIGS / f"{gpu}.yaml").read_text())
    fp8 = yaml.safe_load((CONFIGS / f"{gpu}-fp8.yaml").read_text())
    engine_args = fp8["applications"][0]["args"]["model"]["engine_args"]
    assert engine_args.pop("quantization") == "fp8"
    assert fp8 == bf16  # nothing else drifts from the measured bf16 configuration
    assert "kv_cache_dtype" not in engine_args


@pytest.mark.parametrize("gpu", ["a10", "a100"])
def test_ampere_configs_do_not_ship_fp8(gpu):
    doc = yaml.safe_load((CONFIGS / f"{gpu}.yaml").read_text())
    assert "quantization" not in doc["applications"][0]["args"]["model"].get("engine_args", {})


def test_fp8_needs_compute_capability_8_9():
    assert FP8_MIN_CAPABILITY == 89
    assert fp8_problems(QUANTIZATION_FP8, [90, 89]) == []  # H100/H200, L40S
    (a100,) = fp8_problems(QUANTIZATION_FP8, [80])
    assert "compute capability 8.0" in a100 and "weight-only" in a100 and "no faster prefill" in a100
    assert "remove quantization from engine_args" in a100
    assert len(fp8_problems(QUANTIZATION_FP8, [86, 90, 80])) == 2  # A10 and A100 of a mixed list, by index
    assert fp8_problems(None, [80]) == []


def test_a_calibrated_fp8_checkpoint_on_ampere_is_told_to_serve_the_bf16_one():
    source = fp8_source({}, {"quant_method": "fp8", "activation_scheme": "static"})
    (a10,) = fp8_problems(source, [86])
    assert "the checkpoint's quantization_config (fp8, static activation scales)" in a10
    assert "serve the bf16 checkpoint" in a10 and "remove quantization" not in a10


def test_the_replica_check_refuses_ampere_and_skips_without_nvml():
    with pytest.raises(HardwareError, match="will not run fp8"):
        check_fp8(QUANTIZATION_FP8, read=lambda: [80])
    check_fp8(QUANTIZATION_FP8, read=lambda: [90])
    check_fp8(None, read=lambda: pytest.fail("not read without fp8"))

    def no_nvml() -> list[int]:
        raise OSError("NVML Shared Library Not Found")

    check_fp8(QUANTIZATION_FP8, read=no_nvml)  # vLLM runs its own checks; the preflight only adds the reason
