"""Build the memory-bound target (issue 14, item 4): the shipped tiny target widened function-preservingly.

    python experiments/build_membound_pair.py                 # width 8, 4 pass-through layers (~337M params)
    python experiments/build_membound_pair.py --width 4 --extra-layers 0

Writes ``build/membound_pair/w<width>_x<extra>_<key>/target`` (not committed: ~1.35 GB in float32; the key
hashes the tiny target's files, the settings and harness/speedup/membound/widen.py, so a rebuild happens only when one of
them changes, and a reuse is announced).  The draft of the pair is the shipped tiny draft
(specimpl/assets/tiny_pair/draft) or any of its variants: the widened target's output law is the tiny
target's, so acceptance is the tiny pair's.  The construction is documented in harness/speedup/membound/widen.py; the sweep
suite ``membound`` (harness/configs/sweep/membound.toml) builds it on demand the same way.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.speedup.membound.widen import DEFAULT_EXTRA_LAYERS, DEFAULT_WIDTH, build_widened  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=DEFAULT_WIDTH, help="width factor, a power of two (default 8)")
    ap.add_argument("--extra-layers", type=int, default=DEFAULT_EXTRA_LAYERS,
                    help="pass-through layers appended (default 4)")
    args = ap.parse_args(argv)
    try:
        path = build_widened(args.width, args.extra_layers)
    except ValueError as e:
        print(f"build_membound_pair: {e}", file=sys.stderr)
        return 2
    info = json.loads((path / "build_info.json").read_text())
    print(f"{path}  ({info['parameters'] / 1e6:.0f}M parameters, "
          f"{(path / 'model.safetensors').stat().st_size / 2**30:.2f} GiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
