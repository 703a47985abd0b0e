"""CLI: ``python -m cosmos_tools.k8s render|check`` (see :mod:`cosmos_tools.k8s`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cosmos_tools.k8s import check as checks
from cosmos_tools.k8s import kustomize, render, schema

#: How to install what ``render --write`` and ``check`` import beyond the runtime's packages (the ``k8s`` extra).
K8S_EXTRA_INSTALL = '.venv/bin/pip install -c constraints/cpu.txt -e ".[k8s]"'


def main(argv: list[str] | None = None) -> int:
    """``render`` prints (or writes) serveConfigV2; ``check`` validates k8s/.

    Returns:
        The exit code: 0 ok, 1 a check failed, 2 a config that cannot be rendered, no kubectl, or a
        package of the ``k8s`` extra missing (the message says how to install it).
    """
    parser = argparse.ArgumentParser(
        prog="python -m cosmos_tools.k8s", description=(checks.__doc__ or "").split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    rend = sub.add_parser("render", help="render serveConfigV2 from a Serve config file")
    rend.add_argument("config", help="Serve config file, e.g. configs/a100.yaml")
    rend.add_argument(
        "--write", metavar="MANIFEST", help="replace the serveConfigV2 of this manifest (or patch) in place"
    )
    chk = sub.add_parser("check", help="build k8s/base and k8s/overlays/* with kubectl and validate them offline")
    chk.add_argument(
        "--k8s-dir", default=checks.DEFAULT_K8S_DIR, help=f"manifest folder (default {checks.DEFAULT_K8S_DIR})"
    )
    chk.add_argument(
        "--crd", default=str(schema.CRD_PATH), help="RayService CRD file (default: k8s/crd/, KubeRay v1.7.0)"
    )
    chk.add_argument(
        "--k8s-version", default=schema.K8S_VERSION, help=f"Kubernetes schema version (default {schema.K8S_VERSION})"
    )
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except ModuleNotFoundError as exc:
        print(f"error: `{args.command}` needs the k8s extra (no module {exc.name!r}): {K8S_EXTRA_INSTALL}",
              file=sys.stderr)  # fmt: skip
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.command == "render":
        try:
            text = render.render_file(args.config)
        except render.RenderError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if args.write:
            path = Path(args.write)
            path.write_text(render.replace_serve_config(path.read_text(), text))
            print(f"wrote serveConfigV2 of {args.config} into {path}", file=sys.stderr)
        else:
            sys.stdout.write(text)
        return 0
    try:
        results = checks.check_builds(args.k8s_dir, args.crd, args.k8s_version)
    except kustomize.KustomizeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for directory, report in results.items():
        print(f"{'ok  ' if not report.problems else 'FAIL'} {directory}")
        for problem in report.problems:
            print(f"     - {problem}")
        for warning in report.warnings:
            print(f"     warning: {warning}")
    examples = sorted({e for r in results.values() for e in r.examples_used})
    if examples:
        print(
            f"note: built with the committed examples of {', '.join(examples)}; `kubectl apply -k` needs the real files"
        )
    return 1 if any(r.problems for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
