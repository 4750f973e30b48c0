"""notebooks/explore_store.ipynb, executed headless in a real kernel (nbclient + ipykernel).

The notebook is committed with its outputs; each test executes a copy of it again and checks:
every code cell ran without error, each of its five plots is an image output, no cell printed
to stderr (Spark's start-up WARN lines, Python warnings), no ``rmq-notebook-*`` scratch folder
is left behind, and a user's store (``RMQ_STORE``) is byte for byte what it was, with no file
added or removed.

Needs the ``notebook`` extra (``pip install -e '.[notebook]'``; ``make test`` installs it).
The kernel is this interpreter (a kernelspec written for the test), with the checkout first on
its ``PYTHONPATH`` and ``TMPDIR`` pointed at an empty folder of the test's own.

**One kernel for the runs that reach Spark** (:func:`kernel`): a kernel's first Spark session
starts a JVM (~20 s of the ~30 s a run takes on 2 busy cores); the notebook stops its session
in its last cell, and a session started again in the same kernel runs in the same JVM, as
when a user runs the notebook again. The four runs against a store (the sample store, a
closed store, a store a writer holds, a crashed store) execute the whole notebook, every
cell in order, in one kernel, the first run starting the JVM (its start-up output is checked
there); each run is given its store and its own empty temporary folder by a first cell the
test inserts (``RMQ_STORE`` and ``tempfile.tempdir``, what the variables set when each run
had a kernel of its own), and the checks are those of a run in a kernel of its own. The
module is one xdist group, so one worker runs these tests and starts the kernel once. The
run that fails in its open cell has a kernel of its own: that the scratch folder goes when
the kernel ends is its point.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import subprocess_env

import rmqlog

try:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
except ImportError as exc:  # a suite that silently skipped the notebook would prove nothing
    raise ImportError(f"{exc}: the notebook test needs the notebook extra: pip install -e '.[notebook]'") from exc

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "explore_store.ipynb"
#: The titles of the plot sections: each must be followed by a code cell with an image output.
PLOTS = ("1. Message rate", "2. Queue sizes", "3. Consumer lag", "4. Message sizes", "5. Tag mix")

#: one worker runs the module (under ``-n 2 --dist loadgroup``): its runs share one kernel
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("notebook")]


def _kernel_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_root: Path | None) -> Path:
    """Environment for the kernel: this Python, this checkout, a private TMPDIR; returns it."""
    spec = tmp_path / "jupyter" / "kernels" / "rmq-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "spark-rmq tests",
                "language": "python",
            }
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    scratch = tmp_path / "tmpdir"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    if store_root is None:
        monkeypatch.delenv("RMQ_STORE", raising=False)
    else:
        monkeypatch.setenv("RMQ_STORE", str(store_root))
    return scratch


def _execute(tmp_path: Path) -> Any:
    """Execute a copy of the committed notebook (in a folder of its own); returns it with outputs."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    run = copy.deepcopy(nb)
    workdir = tmp_path / "run"
    workdir.mkdir()
    NotebookClient(run, timeout=600, kernel_name="rmq-test", resources={"metadata": {"path": str(workdir)}}).execute()
    nbformat.write(run, workdir / NOTEBOOK.name)
    return run


class Kernel:
    """A kernel that executes the notebook again and again (:func:`kernel`); after a run that
    failed, the next run gets a new kernel (a half-run notebook could leave a session open)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.client: NotebookClient | None = None
        self._kernel: Any = None

    def _start(self) -> NotebookClient:
        if self.client is None:
            client = NotebookClient(
                nbformat.v4.new_notebook(),
                timeout=600,
                kernel_name="rmq-test",
                resources={"metadata": {"path": str(self.folder)}},
            )
            self._kernel = client.setup_kernel()
            self._kernel.__enter__()
            self.client = client
        return self.client

    def execute(self, tmp_path: Path, store_root: Path | None) -> tuple[Any, Path]:
        """Execute a copy of the committed notebook against ``store_root`` (None: the
        notebook's sample store) with an empty temporary folder of the test's own; returns the
        notebook with outputs (also saved in a folder of its own) and that folder."""
        scratch = tmp_path / "tmpdir"
        scratch.mkdir()
        store = (
            "os.environ.pop('RMQ_STORE', None)"
            if store_root is None
            else f"os.environ['RMQ_STORE'] = {str(store_root)!r}"
        )
        run = copy.deepcopy(nbformat.read(NOTEBOOK, as_version=4))
        run.cells.insert(
            0, nbformat.v4.new_code_cell(f"import os, tempfile\n{store}\ntempfile.tempdir = {str(scratch)!r}")
        )
        client = self._start()
        client.nb = run
        client.reset_execution_trackers()
        try:
            for index, cell in enumerate(run.cells):
                client.execute_cell(cell, index, execution_count=client.code_cells_executed + 1)
        except BaseException:
            self.close()
            raise
        workdir = tmp_path / "run"
        workdir.mkdir()
        nbformat.write(run, workdir / NOTEBOOK.name)
        return run, scratch

    def close(self) -> None:
        if self._kernel is not None:
            kernel, self._kernel, self.client = self._kernel, None, None
            kernel.__exit__(None, None, None)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    """The module's kernel (started by its first run): the kernelspec and the environment of
    :func:`_kernel_env`, ``RMQ_STORE`` unset (each run sets its own)."""
    folder = tmp_path_factory.mktemp("notebook-kernel")
    with pytest.MonkeyPatch.context() as mp:
        _kernel_env(folder, mp, None)
        k = Kernel(folder)
        try:
            yield k
        finally:
            k.close()


def _check_outputs(nb: Any) -> None:
    """Every code cell ran, none errored or wrote to stderr, and every plot section drew an image."""
    cells = nb.cells
    for i, cell in enumerate(cells):
        if cell.cell_type != "code":
            continue
        assert cell.execution_count is not None, f"cell {i} did not run"
        for out in cell.outputs:
            assert out.output_type != "error", f"cell {i} failed: {out.get('ename')}: {out.get('evalue')}"
            text = "".join(out.get("text", ""))
            assert not (out.output_type == "stream" and out.name == "stderr"), f"cell {i} wrote to stderr:\n{text}"
            assert "WARN" not in text, f"cell {i} printed a warning:\n{text}"
    for title in PLOTS:
        at = next((i for i, c in enumerate(cells) if c.cell_type == "markdown" and title in c.source), None)
        assert at is not None, f"no section {title!r}"
        plot = next(c for c in cells[at + 1 :] if c.cell_type == "code")
        images = [o for o in plot.outputs if "image/png" in o.get("data", {})]
        assert images, f"section {title!r} drew no image; its outputs: {[o.output_type for o in plot.outputs]}"


def _files(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (folders too, as entries), by relative path."""
    out: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = "<dir>" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def test_committed_notebook_has_its_plots() -> None:
    """The notebook in the repository is saved executed, with its plots (GitHub shows them)."""
    _check_outputs(nbformat.read(NOTEBOOK, as_version=4))


def test_notebook_on_a_sample_store_leaves_nothing(tmp_path: Path, kernel: Kernel) -> None:
    nb, scratch = kernel.execute(tmp_path, None)
    _check_outputs(nb)
    printed = "".join("".join(o.get("text", "")) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert f"store: {scratch}" in printed, "the sample store was not made under TMPDIR"
    assert "orders" in printed and "messages read by Spark" in printed
    assert list(scratch.glob("rmq-notebook-*")) == []


def _user_store(root: Path, n: int) -> rmqlog.MessageStore:
    """A store with ``n`` dispatched messages in topic ``clicks`` and a group's offset (left open)."""
    ms = rmqlog.MessageStore.open(root, rmqlog.StoreConfig(flush_disk_type="SYNC_FLUSH"))  # no flusher thread
    ms.create_topic("clicks", 3)
    ms.put_batch(
        pa.table(
            {
                "topic": ["clicks"] * n,
                "body": [b"c" * (i % 700 + 1) for i in range(n)],
                "tags": [("view", "buy")[i % 2] for i in range(n)],
            }
        )
    )
    ms.dispatch()
    ms.commit_offset("web", "clicks", 1, 10)
    return ms


def _printed(nb: Any) -> str:
    return "".join("".join(o.get("text", "")) for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def _assert_unchanged(root: Path, before: dict[str, str]) -> None:
    after = _files(root)
    assert after.keys() == before.keys(), (
        f"files added {after.keys() - before.keys()}, removed {before.keys() - after.keys()}"
    )
    changed = [k for k in before if before[k] != after[k]]
    assert changed == [], f"the notebook changed the user's store: {changed}"


def test_notebook_leaves_a_closed_store_as_it_was(tmp_path: Path, kernel: Kernel) -> None:
    """The usual case: a store closed with everything dispatched; the notebook is its first
    opener and last closer, and its Spark read runs."""
    root, n = tmp_path / "user-store", 3_000
    _user_store(root, n).close()
    before = _files(root)
    nb, scratch = kernel.execute(tmp_path, root)
    _check_outputs(nb)
    _assert_unchanged(root, before)
    printed = _printed(nb)
    assert f"{'clicks':<24}{3:>7}{n:>12,}" in printed  # the overview: topic, queues, messages
    assert f"{'clicks':<24}{n:>12,} messages read by Spark" in printed
    assert list(scratch.glob("rmq-notebook-*")) == []


#: A writer that holds the store open with one record not yet dispatched, until its stdin closes.
#: It runs in a process of its own: reading the store's files here (the hashes) would close
#: descriptors of files this process holds POSIX locks on, and so drop those locks.
HOLDER = """
import sys, pyarrow as pa, rmqlog
ms = rmqlog.MessageStore.open(sys.argv[1], rmqlog.StoreConfig(flush_disk_type="SYNC_FLUSH"))
ms.put_batch(pa.table({"topic": ["clicks"], "body": [b"late"]}))
print("holding", flush=True)
sys.stdin.read()
print(sum(ms.max_offset("clicks", q) for q in range(3)), flush=True)
ms.close()
"""


def test_notebook_dispatches_nothing_in_a_store_a_writer_holds(tmp_path: Path, kernel: Kernel) -> None:
    """A writer holds the store open with a record not yet dispatched: the notebook reads
    (read-only, its Spark read too) what is dispatched, and writes nothing."""
    root, n = tmp_path / "user-store", 2_000
    _user_store(root, n).close()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        before = _files(root)
        nb, scratch = kernel.execute(tmp_path, root)
        _check_outputs(nb)
        _assert_unchanged(root, before)
        printed = _printed(nb)
        behind = re.search(r"([\d,]+) bytes not dispatched yet", printed)
        assert behind and int(behind.group(1).replace(",", "")) > 0, printed
        assert f"{'clicks':<24}{n:>12,} messages read by Spark" in printed
        assert list(scratch.glob("rmq-notebook-*")) == []
        out, _ = holder.communicate("", timeout=60)
        assert out.strip() == str(n)  # the late record still waits for dispatch
        assert holder.returncode == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_notebook_on_a_folder_without_a_store_creates_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong RMQ_STORE fails in the open cell (StoreNotFoundError), creates nothing there, and
    the scratch folder still goes when the kernel ends."""
    empty = tmp_path / "not-a-store"
    empty.mkdir()
    scratch = _kernel_env(tmp_path, monkeypatch, empty)
    with pytest.raises(CellExecutionError, match="StoreNotFoundError"):
        _execute(tmp_path)
    assert list(empty.iterdir()) == []
    assert list(scratch.glob("rmq-notebook-*")) == []


#: A writer killed -9 with records not yet dispatched: the store is left for crash recovery.
CRASHER = """
import os, signal, sys, pyarrow as pa, rmqlog
ms = rmqlog.MessageStore.open(sys.argv[1], rmqlog.StoreConfig(flush_disk_type="SYNC_FLUSH"))
ms.put_batch(pa.table({"topic": ["clicks"] * 5, "body": [b"late"] * 5}))
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_notebook_does_not_recover_a_crashed_store(tmp_path: Path, kernel: Kernel) -> None:
    """No process holds a store a writer left by crashing, records waiting: a normal open would
    recover it (dispatch, a new abort file, a checkpoint); the notebook's read-only open
    changes nothing, and draws what was dispatched."""
    root, n = tmp_path / "user-store", 1_000
    _user_store(root, n).close()
    crashed = subprocess.run([sys.executable, "-c", CRASHER, str(root)], env=subprocess_env(), timeout=120)
    assert crashed.returncode == -9 and (root / "abort").exists()
    before = _files(root)
    nb, scratch = kernel.execute(tmp_path, root)
    _check_outputs(nb)
    _assert_unchanged(root, before)
    printed = _printed(nb)
    assert f"{'clicks':<24}{3:>7}{n:>12,}" in printed
    assert f"{'clicks':<24}{n:>12,} messages read by Spark" in printed
    assert list(scratch.glob("rmq-notebook-*")) == []
    with rmqlog.MessageStore.open(root) as ms:  # the next normal open recovers it, as always
        assert ms.recovery is not None and sum(ms.max_offset("clicks", q) for q in range(3)) == n + 5
