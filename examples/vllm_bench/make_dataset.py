"""Writes a ShareGPT-format dataset of video questions for ``vllm bench serve`` (standard library only).

``vllm bench serve --dataset-name sharegpt`` reads a JSON list of entries with ``conversations``
(a human turn, the prompt; a gpt turn, whose token count is the expected output length unless
``--sharegpt-output-len`` is given) and an optional ``"video"`` string. For the ``openai-chat``
backend it sends each entry as one user message: the prompt as a text part, then the video as a
``video_url`` part whose URL is the ``"video"`` string, with ``file://`` put in front unless it
already starts with ``http://``, ``https://`` or ``file://`` (vLLM's ``process_video``). A relative
path would become ``file://tests/…``, a URL naming the host ``tests``: so this script writes
absolute paths, which the server reads when they lie under its ``sources.allowed_roots``.

Usage (from the project root; see README.md, "OpenAI-compatible API")::

    python examples/vllm_bench/make_dataset.py tests/data/*.mp4 --out /tmp/sharegpt_video.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

#: The question of every entry (the Cosmos-Reason1 style of the project's benches).
QUESTION = "Is anyone in this scene in danger? Answer with reasoning."
#: The gpt turn: only its length is read by vllm bench, and only without --sharegpt-output-len.
REFERENCE_ANSWER = "a b c d e f g h"


def entries(clips: list[Path], question: str, repeat: int) -> list[dict]:
    """One entry per clip (× ``repeat``), its ``"video"`` the clip's absolute path."""
    out = []
    for r in range(repeat):
        for i, clip in enumerate(clips):
            out.append({
                "id": f"clip{r}-{i}",
                "conversations": [{"from": "human", "value": question}, {"from": "gpt", "value": REFERENCE_ANSWER}],
                "video": str(clip.resolve()),
            })  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("clips", nargs="+", type=Path, help="video files (under the server's sources.allowed_roots)")
    p.add_argument("--out", type=Path, required=True, help="the dataset file to write (JSON)")
    p.add_argument("--question", default=QUESTION, help="the question asked about every clip")
    p.add_argument("--repeat", type=int, default=1, help="entries per clip (distinct ids)")
    a = p.parse_args(argv)
    missing = [str(c) for c in a.clips if not c.is_file()]
    if missing:
        print(f"not files: {', '.join(missing)}", file=sys.stderr)
        return 2
    data = entries(a.clips, a.question, max(1, a.repeat))
    a.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{len(data)} entries written to {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
