"""The two packages as one zip for ``spark-submit --py-files`` (docs/spark.md, "On a cluster").

    python -m spark_rmq.shipping dist/spark_rmq.zip

The zip holds ``rmqlog/`` (the store; its source folder is ``store/``) and ``spark_rmq/``, the
``.py`` files and ``py.typed`` only: the C helper is an extension module, which Python cannot
import from a zip, so executors given the zip run the pure-Python paths. It is made from the
packages this Python imports, so it works from an installed copy as well as a checkout.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path


def zip_packages(dest: str | Path) -> Path:
    """Write ``rmqlog`` and ``spark_rmq`` into the zip ``dest`` (replaced if present); returns it."""
    import rmqlog
    import spark_rmq

    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        for pkg in (rmqlog, spark_rmq):
            # an editable install's package folder is a tree of links: name entries by the
            # package's own path, read the files they point at
            if pkg.__file__ is None:  # a namespace package: neither is installed as one
                raise RuntimeError(f"{pkg.__name__} has no package folder to ship")
            top = Path(pkg.__file__).parent
            for path in sorted(top.rglob("*")):
                if path.suffix in (".py", ".typed") and "__pycache__" not in path.parts:
                    zf.write(path.resolve(), f"{pkg.__name__}/{path.relative_to(top).as_posix()}")
    return dest


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m spark_rmq.shipping DEST.zip")
    print(zip_packages(sys.argv[1]))
