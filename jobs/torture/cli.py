"""The command line: ``python jobs/torture [options]`` runs the trials; ``--child ROLE SPEC``
(what the parent spawns) runs one child of the workload."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from .messages import MAX_WRITERS
from .runner import Torture
from .workload import CHILDREN, child_setup

DESCRIPTION = "Kill -9 torture of the store: writers, dispatchers and recovering processes killed at random moments."


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child_setup()
        CHILDREN[argv[1]](json.loads(argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=DESCRIPTION)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--flush",
        choices=("sync", "async", "both"),
        default="both",
        help="flush mode of the trials (both: SYNC_FLUSH and ASYNC_FLUSH alternate)",
    )
    ap.add_argument("--max-writers", type=int, default=4)
    ap.add_argument("--root", type=Path, default=None, help="work directory (default: a new temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep every store (failing stores are always kept)")
    ap.add_argument("--small", action="store_true", help="small batches, short runs: the CI round")
    ap.add_argument("--trials-per-store", type=int, default=12, help="a store lives for 2..N trials")
    ap.add_argument("--max-failed-stores", type=int, default=3, help="stop after this many failing stores")
    args = ap.parse_args(argv)
    if not 1 <= args.max_writers <= MAX_WRITERS:
        ap.error(f"--max-writers must be in 1..{MAX_WRITERS}")
    if args.trials_per_store < 2:
        ap.error("--trials-per-store must be at least 2")
    root = args.root or Path(tempfile.mkdtemp(prefix="torture-"))
    root.mkdir(parents=True, exist_ok=True)
    print(
        f"torture: {args.trials} trials, seed {args.seed}, flush {args.flush}, up to {args.max_writers} writers, "
        f"work directory {root}",
        flush=True,
    )
    code = Torture(args, root).run()
    if code == 0 and not args.keep and args.root is None:
        shutil.rmtree(root, ignore_errors=True)
    return code
