"""``python jobs/torture ...``: Python runs this file of the folder, with the folder itself
first on ``sys.path``; the parent folder (``jobs/``) takes its place, so the package imports
as ``torture``, and the repository root follows it (``refcodec``, the reference decoder, is
not installed)."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if sys.path and Path(sys.path[0] or ".").resolve() == HERE:
    sys.path.pop(0)  # else `import messages` would load a second copy of a package module
for path in (HERE.parents[1], HERE.parent):  # the repository root, then jobs/ ahead of it
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from torture.cli import main  # noqa: E402

sys.exit(main())
