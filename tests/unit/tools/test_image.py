"""The Dockerfile's two images and their pinned package sets.

Both images run one Ray cluster, so they must agree on Python, Ray and the
project's code; the GPU image's packages must be the set that passed tests/gpu
(``results/gpu/gpu-freeze.txt``, turned into ``constraints/*.txt`` by
``python -m cosmos_tools.constraints``).
"""

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from cosmos_tools import constraints as gen

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
FREEZE = ROOT / gen.DEFAULT_FREEZE
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def stages() -> dict[str, list[str]]:
    """Instructions of each ``FROM … AS name`` stage (continuation lines joined)."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"FROM (\S+) AS (\w+)$", line)
        if match:
            current = match[2]
            out[current] = [line]
        elif current:
            out[current].append(line)
    return out


def args() -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", DOCKERFILE, re.M))


def test_both_images_share_ray_python_and_the_project_code():
    s = stages()
    assert set(s) == {"cpu", "gpu"}
    assert s["cpu"][0] == "FROM rayproject/ray:${RAY_VERSION}-${PYTHON_TAG}-cpu AS cpu"
    assert s["gpu"][0] == "FROM rayproject/ray:${RAY_VERSION}-${PYTHON_TAG}-${CUDA_TAG} AS gpu"
    copies = {name: [i for i in body if i.startswith("COPY") and "constraints" not in i] for name, body in s.items()}
    assert copies["cpu"] == copies["gpu"]
    # the runtime only: the package and its configs (the load tester, benches, tests and dev tools stay out)
    sources = {src for line in copies["cpu"] for src in line.split()[2:-1]}
    assert sources == {"pyproject.toml", "README.md", "serve_app", "configs"}
    assert args()["PYTHON_TAG"] == "py312" and args()["CUDA_TAG"] == "cu130"
    pin = next(r for r in PYPROJECT["project"]["dependencies"] if r.startswith("ray[serve]=="))
    assert args()["RAY_VERSION"] == pin.split("==")[1]


def test_the_build_context_leaves_the_dev_trees_out():
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert {"loadtest", "benchmarks", "tests", "cosmos_tools"} <= ignored
    assert not {"serve_app", "configs", "pyproject.toml", "README.md"} & ignored


@pytest.mark.parametrize("stage, pins", [("cpu", "constraints/image-cpu.txt"), ("gpu", "constraints/gpu.txt")])
def test_pinned_dependencies_are_installed_before_the_code_and_the_code_without_dependencies(stage, pins):
    body = stages()[stage]
    deps = next(i for i, line in enumerate(body) if line.startswith("RUN pip install") and f"-r {pins}" in line)
    assert " --no-deps " in body[deps]  # exactly the pinned set that ran: no resolution on top
    code = next(i for i, line in enumerate(body) if line.startswith("COPY") and "serve_app" in line)
    project = next(i for i, line in enumerate(body) if "pip install --no-cache-dir --no-deps ." in line)
    assert body[deps - 1].startswith(f"COPY --chown=ray:users {pins} ")
    assert deps < code < project
    assert sum("pip install" in line for line in body) == 2


# ------------------------------------------------------------ the generator


def test_select_keeps_the_freeze_versions_of_the_resolved_set():
    freeze = gen.parse_freeze("torch==2.11.0+cu130\nRuamel.YAML==0.19.1\nunused==1.0\n# a comment\n-e git+x#egg=y\n")
    pins = gen.select([("torch", "2.11.0"), ("ruamel-yaml", "0.19.1"), ("cosmos-serve", "0.1.0")], freeze)
    assert [p.line() for p in pins] == ["Ruamel.YAML==0.19.1", "torch==2.11.0+cu130"]


@pytest.mark.parametrize(
    "resolved, message",
    [([("torch", "2.12.0")], r"resolved 2.12.0, freeze 2.11.0\+cu130"), ([("torchvision", "0.27.0")], "torchvision")],
)
def test_select_refuses_other_versions_than_the_tested_ones(resolved, message):
    with pytest.raises(gen.ConstraintsError, match=message):
        gen.select(resolved, gen.parse_freeze("torch==2.11.0+cu130\ntorchvision==0.26.0+cu130\n"))


def test_select_marks_packages_the_test_machine_did_not_have():
    pins = gen.select([("flashinfer-python", "0.6.1"), ("torch", "2.11.0")], gen.parse_freeze("torch==2.11.0+cu130\n"))
    assert [p.line() for p in pins] == [
        "flashinfer-python==0.6.1  # not installed on the GPU test machine",
        "torch==2.11.0+cu130",
    ]
    assert gen.parse_freeze("\n".join(p.line() for p in pins))["flashinfer-python"].version == "0.6.1"


def test_cpu_variant_drops_cuda_wheels_and_takes_the_cpu_torch_build():
    pairs = [("nvidia-nccl-cu13", "2.28.9"), ("torch", "2.11.0+cu130"), ("torchvision", "0.26.0+cu130")]
    pins = [gen.Pin(n, v) for n, v in [*pairs, ("triton", "3.6.0"), ("av", "19.0.2")]]
    assert [p.line() for p in gen.cpu_variant(pins)] == ["torch==2.11.0+cpu", "torchvision==0.26.0+cpu", "av==19.0.2"]


# ------------------------------------------------- the sets of the last GPU run


#: Direct dependencies the GPU run did without: dashscope only ships the Qwen vocabulary used to
#: *build* test checkpoints (shipped ready-made to the GPU machine), never at serving time; tenacity
#: (webhook retries, pure Python, tested on CPU) was added after the last GPU run and is pinned in both
#: image sets at the version the resolver picks with them (constraints/gpu.txt, image-cpu.txt).
UNTESTED_DIRECT = {"dashscope", "tenacity"}


def pins_of(path: Path) -> dict[str, gen.Pin]:
    return gen.parse_freeze(path.read_text())


needs_freeze = pytest.mark.skipif(
    not FREEZE.exists(), reason=f"{gen.DEFAULT_FREEZE} (pip freeze of a passing tests/gpu run) is not recorded yet"
)


@needs_freeze
def test_gpu_constraints_are_the_tested_set():
    freeze, gpu = pins_of(FREEZE), pins_of(ROOT / gen.GPU_OUT)
    text = (ROOT / gen.GPU_OUT).read_text()
    assert text.startswith(f"# GENERATED by `python -m cosmos_tools.constraints {gen.DEFAULT_FREEZE}`")
    untested = {gen.canonical(m) for m in re.findall(rf"^(\S+)==\S+  # {gen.UNTESTED}$", text, re.M)}
    assert {k: p.version for k, p in gpu.items() if k not in untested} == {
        k: freeze[k].version for k in gpu if k not in untested
    }
    assert not untested & set(freeze)
    requirements = [
        Requirement(r)
        for r in PYPROJECT["project"]["dependencies"] + PYPROJECT["project"]["optional-dependencies"]["gpu"]
    ]
    for req in requirements:
        name = gen.canonical(req.name)
        assert name in gpu, f"{req} is not pinned in {gen.GPU_OUT}"
        assert req.specifier.contains(gen.public(gpu[name].version), prereleases=True), (str(req), gpu[name])
        if name not in UNTESTED_DIRECT:
            assert name not in untested and name in freeze, f"{req} did not run in the GPU tests"
    assert untested & UNTESTED_DIRECT == UNTESTED_DIRECT - set(freeze)
    # The base image's CUDA and Python are the GPU run's: CUDA 13.0 wheels, CPython 3.12.
    cuda = gpu["nvidia-cuda-runtime"].version.split(".")
    assert f"cu{cuda[0]}{cuda[1]}" == args()["CUDA_TAG"]
    python = re.match(r"# python (\d+)\.(\d+)\.", FREEZE.read_text())
    assert python and f"py{python[1]}{python[2]}" == args()["PYTHON_TAG"]


@needs_freeze
def test_cpu_image_constraints_match_the_gpu_set():
    gpu, cpu = pins_of(ROOT / gen.GPU_OUT), pins_of(ROOT / gen.CPU_OUT)
    assert "vllm" in gpu and "vllm" not in cpu
    assert not [k for k in cpu if gen.CUDA_ONLY.match(k)]
    for key, pin in cpu.items():
        expected = f"{gen.public(gpu[key].version)}+cpu" if key in gen.TORCH_BUILDS else gpu[key].version
        assert pin.version == expected, key
    for key in ("ray", "transformers", "av", "numpy", "pydantic", "starlette"):
        assert cpu[key].version == gpu[key].version
