"""The README and docs/ as a new user reads them: short, commands that run as written, links that resolve.

What runs against a live server (the README's curls and its ``openai`` example) is in
``tests/integration/repo/test_readme_commands.py``; this file checks the text itself.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest
from readme_text import README, code_blocks, commands, programs, section

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]

#: The sections a laptop user runs on CPU (the GPU and KubeRay sections run elsewhere).
CPU_SECTIONS = ("Quick start", "Ask about a clip", "Watch cameras", "OpenAI-compatible API")
#: Programs that the venv installs: typed bare, they are "command not found" until it is activated.
VENV_PROGRAMS = {"serve", "ray", "python", "pip", "pytest", "ruff", "mypy"}


def test_the_readme_is_short():
    assert len(README.splitlines()) <= 300, "the README is for users: move reference text to docs/"


def test_the_readme_states_python_and_the_install_size():
    quick = section(README, "Quick start")
    assert "Python ≥ 3.11" in quick
    assert re.search(r"\d+(\.\d+)? GB", quick), "the install size"
    assert 'requires-python = ">=3.11"' in (ROOT / "pyproject.toml").read_text()


def test_cpu_commands_use_the_venv_programs_by_path():
    for title in CPU_SECTIONS:
        for block in code_blocks(section(README, title), "bash"):
            for cmd in commands(block):
                for prog in programs(cmd):
                    assert prog not in VENV_PROGRAMS, f"{title}: `{cmd}` runs bare `{prog}` (not on PATH)"


def test_the_test_command_is_what_ci_runs():
    block = code_blocks(section(README, "Quick start"), "bash")[1]
    (cmd,) = commands(block)
    ci = (ROOT / ".ci" / "run").read_text()
    steps = [s.strip() for s in cmd.split("&&")]
    assert steps[0].startswith("python3 -m venv .venv")
    verbatim = ci[ci.index("the README's test command, verbatim") :]
    pos = 0
    for step in steps[1:] if steps[0] == "python3 -m venv .venv" else steps:
        found = verbatim.find(step, pos)
        assert found >= 0, f".ci/run does not run `{step}` (in the README's order)"
        pos = found


def test_files_and_modules_the_readme_names_exist():
    text = "\n".join(code_blocks(README, "bash") + code_blocks(README, "python"))
    for rel in set(re.findall(r"\b((?:tests/data|configs|constraints|k8s)/[\w./-]+\.\w+)", text)):
        assert (ROOT / rel).exists(), rel
    for name in set(re.findall(r"python3? -m ([\w.]+)", text)) - {"venv"}:
        assert importlib.util.find_spec(name) is not None, name
    for name in re.findall(r'for f in ([^;]+);', text):
        for clip in shlex.split(name):
            assert (ROOT / "tests" / "data" / clip).exists(), clip  # the cameras' allowed root in configs/cpu.yaml


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())  # underscores stay (in code spans they are text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        rel, _, anchor = target.partition("#")
        path = (page.parent / rel).resolve() if rel else page
        assert path.exists(), f"{page.name}: link to a missing {target}"
        if anchor and path.suffix == ".md":
            assert anchor in anchors(path), f"{page.name}: {target} names no heading of {path.name}"


def test_the_slug_rule_on_known_headings():
    assert slug("Cameras (`/v1/streams`)") == "cameras-v1streams"
    assert slug("OpenAI-compatible (`/v1/chat/completions`)") == "openai-compatible-v1chatcompletions"
    assert slug("Before exposing the service") == "before-exposing-the-service"
    assert slug("Quiet scenes (`skip_unchanged`)") == "quiet-scenes-skip_unchanged"
