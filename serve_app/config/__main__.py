"""``python -m serve_app.config override CONFIG key=value ... [-o OUT]``: writes a derived Serve config."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml
from pydantic import ValidationError

from serve_app.config.files import load_serve_config, override, validation_message


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m serve_app.config override CONFIG key=value ... [-o OUT]`` writes a derived Serve config."""
    p = argparse.ArgumentParser(description="derive a Serve config with overridden args (validated)")
    sub = p.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("override", help="apply dotted.key=value overrides to an application's args")
    o.add_argument("config")
    o.add_argument("assignments", nargs="*")
    o.add_argument("-o", "--out", help="output file (default: stdout)")
    o.add_argument("--app", type=int, default=0, help="application index")
    args = p.parse_args(argv)
    try:
        doc = override(load_serve_config(args.config), args.assignments, args.app)
    except ValidationError as e:  # a bad value: say which and why, no traceback
        print(f"config: {args.config}: {validation_message(e)}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"config: {e}", file=sys.stderr)
        return 2
    text = yaml.safe_dump(doc, sort_keys=False)
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
