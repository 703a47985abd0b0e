"""The images' pinned package sets, generated from the ``pip freeze`` of the last passing GPU run.

``results/gpu/gpu-freeze.txt`` is ``pip freeze`` on the H200 where ``tests/gpu``
passed. This command keeps, from it, exactly the project's dependencies (with
the ``gpu`` extra) and everything they pull in, at the versions installed there:

* ``constraints/gpu.txt``: the GPU image (Dockerfile target ``gpu``) and the
  README's GPU install.
* ``constraints/image-cpu.txt``: the CPU image (target ``cpu``, head and decode
  pods): the same set without the ``gpu`` extra and without CUDA wheels,
  torch/torchvision as the ``+cpu`` builds of the same versions.

Which packages are "pulled in" comes from uv's resolver (``uv pip compile`` of
``pyproject.toml`` for CPython 3.12 on manylinux_2_28 x86_64; ``pip install
uv``) with the freeze's versions as **overrides**: the machine that passed ran
a set that the packages' declared requirements do not all allow (its image
kept a few older packages, e.g. aiohttp 3.14.3 where Ray 2.60.0 declares
``aiohttp>=3.14.4``), and the point is to reproduce what ran. The files are
therefore installed with ``pip install --no-deps -r``, and each names in its
header the conflicts pip's resolver would refuse. A package the freeze lacks
(the GPU machine's bundle leaves a few optional kernels out) is pinned at the
resolved version and marked ``# not installed on the GPU test machine``. Only
package metadata is read from the index; nothing is installed. Run it where
PyPI is reachable::

    python -m cosmos_tools.constraints results/gpu/gpu-freeze.txt
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_FREEZE = "results/gpu/gpu-freeze.txt"
GPU_OUT = "constraints/gpu.txt"
CPU_OUT = "constraints/image-cpu.txt"
#: The target interpreter and platform of the images (rayproject/ray:*-py312*, linux x86_64).
PLATFORM_ARGS = ("--python-version", "3.12", "--python-platform", "x86_64-manylinux_2_28")
#: Wheels that only a CUDA build of torch (or vLLM) needs; the CPU image has none of them.
CUDA_ONLY = re.compile(r"^(nvidia-.*|cuda-.*|cupy-cuda.*|triton)$")
#: Packages whose CUDA build carries a local version (``+cu130``) and has a ``+cpu`` twin.
TORCH_BUILDS = ("torch", "torchvision", "torchaudio")
PROJECT = "cosmos-serve"
UNTESTED = "not installed on the GPU test machine"
_FREEZE_LINE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==(?P<version>[^\s;]+)\s*(;.*)?$")


class ConstraintsError(ValueError):
    """The freeze and the resolved set disagree (message lists the packages)."""


def canonical(name: str) -> str:
    """PEP 503 normalised name: ``Ruamel.YAML`` → ``ruamel-yaml``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def public(version: str) -> str:
    """A version without its local part: ``2.11.0+cu130`` → ``2.11.0``."""
    return version.split("+", 1)[0]


@dataclass(frozen=True)
class Pin:
    """One pinned package: its name as the freeze spells it, its exact version (local part included).

    ``tested`` is False for a package the resolver needs that was not installed on
    the GPU test machine (its bundle leaves a few optional kernels out, e.g.
    FlashInfer): it is pinned at the resolved version and marked in the file.
    """

    name: str
    version: str
    tested: bool = True

    def line(self) -> str:
        """``name==version``, with a trailing comment when untested."""
        return f"{self.name}=={self.version}" + ("" if self.tested else "  # " + UNTESTED)


def parse_freeze(text: str) -> dict[str, Pin]:
    """``pip freeze`` output → pins by canonical name. Comments, ``-e`` and ``@ url`` lines are skipped."""
    pins: dict[str, Pin] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        match = _FREEZE_LINE.match(line)
        if match:
            pins[canonical(match["name"])] = Pin(match["name"], match["version"])
    return pins


def select(resolved: Iterable[tuple[str, str]], freeze: Mapping[str, Pin]) -> list[Pin]:
    """The freeze's pins of the resolved packages (the project itself left out), sorted by name.

    Args:
        resolved: ``(name, version)`` pairs from the resolver.
        freeze: :func:`parse_freeze` of the GPU run's freeze.

    Returns:
        The freeze's pin of every resolved package it holds; packages it lacks are
        pinned at the resolved version with ``tested=False``.

    Raises:
        ConstraintsError: a resolved package has another version than the freeze's.
    """
    pins, other = [], []
    for name, version in resolved:
        key = canonical(name)
        if key == PROJECT:
            continue
        pin = freeze.get(key)
        if pin is None:
            pins.append(Pin(name, version, tested=False))
        elif public(pin.version) != public(version):
            other.append(f"{name}: resolved {version}, freeze {pin.version}")
        else:
            pins.append(pin)
    if other:
        raise ConstraintsError(f"not the tested set: other versions than the freeze's: {other}")
    return sorted(pins, key=lambda p: canonical(p.name))


def cpu_variant(pins: Iterable[Pin]) -> list[Pin]:
    """The CPU image's pins: no CUDA-only wheels, torch builds as ``+cpu`` of the same version."""
    out = []
    for pin in pins:
        key = canonical(pin.name)
        if CUDA_ONLY.match(key):
            continue
        if key in TORCH_BUILDS:
            pin = Pin(pin.name, f"{public(pin.version)}+cpu", pin.tested)
        out.append(pin)
    return out


def render(pins: Iterable[Pin], freeze_path: str, what: str, refused: Iterable[str] = ()) -> str:
    """The constraints file's text: a generated header, then one ``name==version`` per line."""
    header = (
        f"# GENERATED by `python -m cosmos_tools.constraints {freeze_path}`: do not edit by hand.\n"
        f"# {what}\n"
        f"# Source: {freeze_path} (`pip freeze` of the H200 run where tests/gpu passed).\n"
        "# Install with `pip install --no-deps -r` (the exact set that ran there).\n"
    )
    refused = list(refused)
    if refused:
        header += "# pip's resolver would refuse this set as constraints (it is what ran, and it passed):\n"
        header += "".join(f"#   {line}\n" for line in refused)
    return header + "".join(f"{p.line()}\n" for p in pins)


def _compile(uv: str, extras: Iterable[str], pins_flag: str, pins: Iterable[Pin]) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="cosmos-constraints-") as tmp:
        pinned = Path(tmp) / "pins.txt"
        pinned.write_text("".join(f"{p.name}=={public(p.version)}\n" for p in pins))
        out = Path(tmp) / "resolved.txt"
        cmd = [uv, "pip", "compile", "--quiet", "--no-header", "--no-annotate", *PLATFORM_ARGS,
               pins_flag, str(pinned), "-o", str(out), "pyproject.toml"]  # fmt: skip
        for extra in extras:
            cmd += ["--extra", extra]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        done.stdout = out.read_text() if out.exists() else ""
    return done


def resolve(extras: Iterable[str], freeze: Mapping[str, Pin], uv: str = "uv") -> list[tuple[str, str]]:
    """``(name, version)`` of everything the project (with ``extras``) pulls in on the images' platform.

    ``uv pip compile`` of ``pyproject.toml`` for CPython 3.12 on manylinux_2_28
    x86_64 (markers evaluated for that target, not for this machine), with the
    freeze's public versions as overrides (local parts such as ``+cu130`` are not
    on PyPI). Reads metadata from the index; installs nothing.

    Raises:
        subprocess.CalledProcessError: uv could not resolve it (e.g. no network).
        FileNotFoundError: no ``uv`` (``pip install uv``).
    """
    done = _compile(uv, list(extras), "--override", freeze.values())
    done.check_returncode()
    lines = (ln.strip() for ln in done.stdout.splitlines())
    return [(m["name"], m["version"]) for m in map(_FREEZE_LINE.match, lines) if m]


def conflicts(extras: Iterable[str], pins: Iterable[Pin], uv: str = "uv") -> list[str]:
    """Why pip's resolver would refuse ``pins`` as constraints of the project (uv's words; empty: it would not)."""
    done = _compile(uv, list(extras), "-c", pins)
    if done.returncode == 0:
        return []
    lines = [re.sub(r"^(cause:|error:)\s*", "", ln.strip()) for ln in done.stderr.splitlines()]
    causes = [ln for ln in lines if ln.startswith(("Because", "And because"))]
    return causes or [ln for ln in lines if ln][-3:]


def main(argv: list[str] | None = None) -> int:
    """Writes constraints/gpu.txt and constraints/image-cpu.txt from a freeze. Returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m cosmos_tools.constraints", description=__doc__.split("\n")[0])
    parser.add_argument(
        "freeze", nargs="?", default=DEFAULT_FREEZE, help=f"pip freeze of the GPU run ({DEFAULT_FREEZE})"
    )
    args = parser.parse_args(argv)
    freeze = parse_freeze(Path(args.freeze).read_text())
    try:
        gpu = select(resolve(["gpu"], freeze), freeze)
        cpu_full = select(resolve([], freeze), freeze)
    except ConstraintsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    cpu = cpu_variant(cpu_full)
    what_gpu = "The GPU image (Dockerfile target gpu) and the GPU install: the project + vLLM and all they pull in."
    what_cpu = (
        "The CPU image (Dockerfile target cpu; head and decode pods): the same versions without the gpu extra "
        "and CUDA wheels; torch builds +cpu (PyTorch's CPU index)."
    )
    (ROOT / GPU_OUT).write_text(render(gpu, args.freeze, what_gpu, conflicts(["gpu"], gpu)))
    (ROOT / CPU_OUT).write_text(render(cpu, args.freeze, what_cpu, conflicts([], cpu_full)))
    print(f"wrote {GPU_OUT} ({len(gpu)} packages) and {CPU_OUT} ({len(cpu)} packages)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
