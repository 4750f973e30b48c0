"""How the package is installed and imported: the name users import cannot be shadowed.

The store's folder is ``store/`` but it is imported as ``rmqlog`` (setup.py), installed in
setuptools' strict editable mode (the Makefile): a regular package on a static path, which a
folder of the same name in a user's working directory (a store root, say) cannot shadow.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """\
import rmqlog
with rmqlog.MessageStore.open("{name}") as s:
    s.put("T", b"x", queue_id=0)
    s.dispatch()
    print(s.max_offset("T", 0))
"""


def _user_env() -> dict[str, str]:
    """A user's environment: nothing of the repository on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return env


def test_a_store_folder_named_like_the_package_does_not_shadow_it(tmp_path: Path) -> None:
    """`import store` found the user's data folder `store/` on a second run."""
    for name in ("rmqlog", "store", "spark_rmq"):
        work = tmp_path / name
        work.mkdir()
        (work / "run.py").write_text(SCRIPT.format(name=name))
        outs = []
        for _ in range(2):  # the first run makes the folder, the second runs beside it
            r = subprocess.run(
                [sys.executable, "run.py"], cwd=work, env=_user_env(), capture_output=True, text=True, timeout=120
            )
            assert r.returncode == 0, r.stderr
            outs.append(r.stdout.split())
        assert outs == [["1"], ["2"]]
        assert (work / name / "commitlog").is_dir()
        r = subprocess.run(
            [sys.executable, "-c", "import spark_rmq, rmqlog; print(rmqlog.MessageStore.__name__)"],
            cwd=work,
            env=_user_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0 and r.stdout.strip() == "MessageStore", r.stderr


def test_no_module_imports_the_old_name() -> None:
    """Nothing imports ``store`` (the folder's name): that would load a second copy of the package."""
    root = Path(__file__).resolve().parent.parent
    import re

    pat = re.compile(r"^\s*(from store[. ]|import\b.*[ ,]store\b(?!\.))", re.M)
    offenders = [
        str(p.relative_to(root))
        for d in ("store", "spark_rmq", "jobs", "tests", "refcodec", "notebooks")
        for p in sorted((root / d).rglob("*.py*"))
        if pat.search(p.read_text(errors="replace"))
    ]
    offenders += [
        d
        for d in ("README.md", *(f"docs/{p.name}" for p in (root / "docs").glob("*.md")))
        if pat.search((root / d).read_text())
    ]
    assert offenders == []
