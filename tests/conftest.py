"""Shared fixtures and helpers of the store test suite.

``refcodec`` (the top-level package ``refcodec/``, shared with ``jobs/``) is the independent,
stdlib-only decoder: the store's files are checked with it, never with the store's own decoder.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))
if str(REPO_ROOT) not in sys.path:  # refcodec/ (and jobs/ for the job tests)
    sys.path.insert(0, str(REPO_ROOT))

import refcodec as rc  # noqa: E402
import rmqlog  # noqa: E402

# Every JVM the suite starts (the shared session's, and those of the Spark applications, the
# notebook's kernel, the standalone cluster and Spark Connect that the end-to-end tests launch)
# lives seconds to a few minutes and spends most of them starting up: the C1 compiler alone and
# the serial collector start a local Spark about a fifth faster here (37 s to 30 s for a
# session and its first read on 2 busy cores). spark-submit passes SPARK_SUBMIT_OPTS to the
# driver's JVM without a word on its output. A value set outside the suite wins.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

# Hypothesis's timing checks are timing thresholds (a test may not fail for being slow on a busy
# machine): no per-example deadline, no "data generation too slow" health check, for every
# property test of the suite (a test's own @settings still sets its example count).
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

#: Real RocketMQ files, kept in the repository (copied from ``../shared/fixtures/rocketmq``,
#: see its README) so that no clone can run the suite without them.
FIXTURES = TESTS_DIR / "fixtures" / "rocketmq"
#: The workplace's shared copy, when a clone sits beside it: ours must be byte-identical.
SHARED_FIXTURES = REPO_ROOT.parent / "shared" / "fixtures" / "rocketmq"
FIXTURE_COMMITLOG = FIXTURES / "commitlog-8k-4.9" / "00000000000000000000"
FIXTURE_CONFIG_DIR = FIXTURES / "broker-4.4-store" / "config"

#: Tiny segments so that a few hundred messages roll the commitlog and the consume queues.
SMALL_COMMITLOG = 4096
SMALL_CQ = 20 * 50

UTC = dt.UTC


# --------------------------------------------------------------------------- pytest hooks


def _c_compiler() -> str | None:
    """The C compiler setup.py would use, if the machine has one."""
    import shlex
    import shutil
    import sysconfig

    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")[:1]
    return shutil.which(cc[0]) if cc else None


#: The project's Python sources: the packages (also as the editable install's tree of links,
#: the path ``rmqlog`` is imported by), the jobs and the tests' helpers.
SOURCE_TREES = ("store", "spark_rmq", "rmqnet", "refcodec", "jobs", "tests", "build")
#: not sources of ours: the RocketMQ fixtures and the real clients' installs
SKIP_COMPILING = re.compile("|".join(re.escape(str(TESTS_DIR / p)) for p in ("fixtures", "wire/clients")))


def _compile_sources() -> None:
    """Byte-compile the project's sources once for every process the suite starts.

    The suite starts many Python processes (brokers, name servers, agents, crash
    children, CLI runs, Spark's Python workers), and each imports the project, ~40,000 lines:
    where ``PYTHONDONTWRITEBYTECODE`` is set no import writes a cache, so each of them compiled
    all of it again (~0.3 s of CPU each, a fifth to a third of a subprocess-heavy test file's
    time). ``compileall`` writes the caches anyway (gitignored ``__pycache__`` folders beside
    the sources, checked by size and mtime as usual) and skips files whose cache is current.
    """
    import compileall

    for tree in SOURCE_TREES:
        folder = REPO_ROOT / tree
        if folder.is_dir():
            compileall.compile_dir(folder, quiet=2, rx=SKIP_COMPILING)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Refuse to run a suite that would pass by skipping; byte-compile the sources for the
    processes the suite starts (:func:`_compile_sources`, on the controller: before the workers
    start).

    The C helper's tests and the fixtures' tests skip nothing in a complete checkout: a
    machine with a C compiler must have built ``rmqlog._native`` (else ~80 tests of the fast
    paths would skip), and the RocketMQ fixtures ship in ``tests/fixtures``. Set
    ``RMQ_ALLOW_NO_NATIVE=1`` to run the pure-Python paths on purpose.
    """
    if not FIXTURES.is_dir():
        raise pytest.UsageError(f"the RocketMQ fixtures are missing from {FIXTURES}: the checkout is incomplete")
    if sys.dont_write_bytecode and not hasattr(session.config, "workerinput"):  # (not on an xdist worker)
        _compile_sources()
    if os.environ.get("RMQ_ALLOW_NO_NATIVE") == "1":
        return
    try:
        import rmqlog._native  # noqa: F401
    except ImportError as exc:
        if _c_compiler() is not None:
            raise pytest.UsageError(
                f"rmqlog._native is not built although a C compiler exists ({exc}); "
                "rebuild with `pip install -e .` (or set RMQ_ALLOW_NO_NATIVE=1 to test without it)"
            ) from exc


#: The xdist group of every test that uses the session's SparkSession (tests/spark/conftest.py).
SPARK_GROUP = "spark"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``optin`` tests run only with RMQ_OPTIN=1 (``slow`` ones always run); every test that
    uses the ``spark`` fixture joins the xdist group ``spark`` (a test that asks for it by
    name, ``request.getfixturevalue("spark")``, carries the mark itself).

    With ``-n 2 --dist loadgroup`` (``make test``) a group runs on one worker: that worker
    alone starts a JVM for the shared session (a second session would cost its start-up and
    ~1 GiB), and the other worker runs the rest of the suite meanwhile.
    """
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(SPARK_GROUP))
    if os.environ.get("RMQ_OPTIN") == "1":
        return
    skip = pytest.mark.skip(reason="opt-in heavy run: set RMQ_OPTIN=1")
    for item in items:
        if "optin" in item.keywords:
            item.add_marker(skip)


def pytest_collection_finish(session: pytest.Session) -> None:
    """On an xdist worker under ``--dist loadgroup``, refuse a collection whose groups xdist
    dropped: it marks a grouped test by a ``@group`` suffix on its node id, and a pytest that
    ignores the suffix (9.2 with xdist 3.8) would spread the Spark tests over both workers,
    each starting a JVM, without a word."""
    if not getattr(session.config.option, "loadgroup", False):  # set on the workers by xdist
        return
    lost = [
        item.nodeid
        for item in session.items
        if item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid
    ]
    if lost:
        raise pytest.UsageError(
            f"pytest-xdist ignored the xdist_group of {len(lost)} tests ({lost[0]}, ...): "
            "this pytest and pytest-xdist do not group tests (see pyproject.toml's dev extra)"
        )


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def fixture_dir() -> Path:
    """The folder of real RocketMQ files (always present: they ship with the tests)."""
    return FIXTURES


@pytest.fixture
def small_config() -> rmqlog.StoreConfig:
    """4 KiB commitlog segments and 50-unit consume-queue segments (everything rolls)."""
    return small_store_config()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def ms(root: Path, small_config: rmqlog.StoreConfig) -> Iterator[rmqlog.MessageStore]:
    """An open store with tiny segments, closed after the test."""
    s = rmqlog.MessageStore.open(root, small_config)
    try:
        yield s
    finally:
        s.close()


# --------------------------------------------------------------------------- helpers


#: index files of test stores: 80 KB each (a full-size one is 420 MB, ~20 MB of it touched)
SMALL_INDEX_SLOTS = 4_000
SMALL_INDEX_ENTRIES = 16_000


def small_store_config(**changes: Any) -> rmqlog.StoreConfig:
    values: dict[str, Any] = {
        "mapped_file_size_commit_log": SMALL_COMMITLOG,
        "mapped_file_size_consume_queue": SMALL_CQ,
        "max_hash_slot_num": SMALL_INDEX_SLOTS,
        "max_index_num": SMALL_INDEX_ENTRIES,
    }
    values.update(changes)
    return rmqlog.StoreConfig(**values)


def copy_file(src: Path, dst: Path) -> None:
    """Copy content only (the fixtures are read-only; the copies must be writable)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)


def batch(n: int | None = None, **cols: Any) -> pa.Table:
    """A put_batch table; scalar column values are repeated ``n`` times."""
    if n is None:
        n = max(len(v) for v in cols.values() if isinstance(v, list | tuple | pa.Array))
    out = {}
    for name, value in cols.items():
        if isinstance(value, pa.Array | pa.ChunkedArray):
            out[name] = value
        elif isinstance(value, list | tuple):
            out[name] = list(value)
        else:
            out[name] = [value] * n
    return pa.table(out)


def ms_to_dt(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=UTC)


def dt_to_ms(value: dt.datetime) -> int:
    return int(round(value.timestamp() * 1000))


def commitlog_dir(root: Path) -> str:
    return str(root / "commitlog")


def queue_dir(root: Path, topic: str, qid: int) -> str:
    return str(root / "consumequeue" / topic / str(qid))


def walk(root: Path) -> list[rc.RefRecord]:
    """Every record of the store's commitlog, read by the reference codec ([] if none)."""
    d = commitlog_dir(root)
    return rc.walk_commitlog(d) if os.path.isdir(d) else []


def units(root: Path, topic: str, qid: int) -> list[tuple[int, int, int]]:
    """The consume-queue units of a queue, read by the reference codec ([] if none)."""
    d = queue_dir(root, topic, qid)
    return rc.read_consume_queue(d) if os.path.isdir(d) else []


def snapshot_files(root: Path, *names: str) -> dict[str, bytes]:
    """Bytes of every commitlog/consume-queue segment plus the named files under ``root``."""
    out: dict[str, bytes] = {}
    for sub in ("commitlog", "consumequeue"):
        base = root / sub
        if base.is_dir():
            for p in sorted(base.rglob("*")):
                if p.is_file():
                    out[str(p.relative_to(root))] = p.read_bytes()
    for name in names:
        p = root / name
        out[name] = p.read_bytes() if p.exists() else b"<absent>"
    return out


def snapshot_tree(root: Path) -> dict[str, tuple[str, int, int]]:
    """Every path under ``root`` with its content hash, size and mtime (folders: "dir"): equal
    before and after means nothing under ``root`` was created, removed, written or touched."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.stat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        out[str(p.relative_to(root))] = (digest, st.st_size, st.st_mtime_ns)
    return out


def read_queue_all(
    s: rmqlog.MessageStore, topic: str, qid: int, *, max_count: int = 32, tags: str | None = "*", group: str = "g"
) -> list[dict[str, Any]]:
    """Every message of a queue through get_messages, following next_begin_offset."""
    rows: list[dict[str, Any]] = []
    offset = s.min_offset(topic, qid)
    for _ in range(100_000):
        res = s.get_messages(group, topic, qid, offset, max_count=max_count, tags=tags)
        if res.status in (rmqlog.GetMessageStatus.FOUND, rmqlog.GetMessageStatus.NO_MATCHED_MESSAGE):
            assert res.next_begin_offset > offset
            rows.extend(res.messages.to_pylist())
            offset = res.next_begin_offset
            continue
        assert res.status in (
            rmqlog.GetMessageStatus.OFFSET_OVERFLOW_ONE,
            rmqlog.GetMessageStatus.NO_MESSAGE_IN_QUEUE,
            rmqlog.GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
        ), res.status
        return rows
    raise AssertionError("get_messages did not reach the end of the queue")


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.005) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds pass; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return bool(predicate())
        time.sleep(interval)


def subprocess_env() -> dict[str, str]:
    """Environment for child Python processes: the repository importable from anywhere."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT), str(TESTS_DIR)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    return env


def kill_at_crash_point(args: list[str], point: str, n: int, *, tmp: Path, timeout: float = 120) -> list[str]:
    """Run ``python args...`` stopped at the ``n``-th time it reaches crash point ``point``
    (:mod:`rmqlog.crash_points`), kill it there (SIGKILL), and return the lines it printed
    before. The kill lands exactly there: the child waits at the point for it. Fails the test
    when the child ends without reaching the point (the kill would have tested nothing)."""
    env = {**subprocess_env(), "RMQLOG_CRASH_AT": f"{point}:{n}"}
    with open(tmp / f"crash-{point}-{n}.stderr", "w+b") as err:  # a file: a pipe could fill up and block the child
        child = subprocess.Popen([sys.executable, *args], env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        assert child.stdout is not None
        printed: list[str] = []
        try:
            for line in child.stdout:
                if line == f"crash point {point} {n}\n":
                    child.send_signal(signal.SIGKILL)
                    assert child.wait(timeout) == -signal.SIGKILL
                    return printed
                printed.append(line.rstrip("\n"))
            child.wait(timeout)
            err.seek(0)
            raise AssertionError(
                f"the child ended (exit {child.returncode}) without reaching crash point {point} {n}:"
                f" {printed} {err.read().decode(errors='replace')[-2000:]}"
            )
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()


def tree(root: Path, *, mtimes: bool = False) -> dict[str, tuple[str, int, int, str]]:
    """Every entry under ``root`` (links not followed): kind, size, mtime (``mtimes``; else 0,
    and always 0 for folders) and content hash: what a test compares to say nothing changed."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            kind = "link" if p.is_symlink() else "dir" if p.is_dir() else "file"
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if kind == "file" else ""
            out[str(p.relative_to(root))] = (
                kind,
                st.st_size,
                st.st_mtime_ns if mtimes and kind != "dir" else 0,
                digest,
            )
    return out


def cq_file(root: Path, topic: str, qid: int, logical: int) -> Path:
    """The consume-queue file of a store with ``SMALL_CQ`` files that holds unit ``logical``."""
    per = SMALL_CQ // 20
    return root / "consumequeue" / topic / str(qid) / f"{logical // per * per * 20:020d}"


def unit(root: Path, topic: str, qid: int, logical: int) -> tuple[int, int, int]:
    """Unit ``logical`` of a queue as (commitLogOffset, size, tagsCode), read from its file."""
    with open(cq_file(root, topic, qid, logical), "rb") as f:
        f.seek(logical % (SMALL_CQ // 20) * 20)
        return struct.unpack(">qiq", f.read(20))  # type: ignore[return-value]


def write_unit(root: Path, topic: str, qid: int, logical: int, offset: int, size: int) -> None:
    """Rewrite one unit in place, through the page cache the store's mapping shares (the tag
    hash kept, so tag filters still select it)."""
    tags = unit(root, topic, qid, logical)[2]
    with open(cq_file(root, topic, qid, logical), "r+b") as f:
        f.seek(logical % (SMALL_CQ // 20) * 20)
        f.write(struct.pack(">qiq", offset, size, tags))


@pytest.fixture
def namesrv() -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A name server process on a free port of 127.0.0.1: the process (its stderr logs
    registrations) and its address; killed after the test."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rmqnet", "namesrv", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on 127.0.0.1:"), line
        yield proc, line.split()[-1]
    finally:
        proc.kill()
        proc.wait()
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()
