"""The C helper is loaded in one place (:mod:`rmqlog.native`): with it, every name there is
the helper's function; without it (not built, or refused at load), every name is ``None``,
each module that uses one runs its numpy/Arrow twin, and the store works the same."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import rmqlog.native as native

#: (module, its name for a helper function): every user of the helper
USERS = [
    ("rmqlog.log.commitlog", "_ChunkWriter"),
    ("rmqlog.log.decode", "_crc32_batch"),
    ("rmqlog.log.gather", "_native_gather"),
    ("rmqlog.log.msgid", "_hexlify"),
    ("rmqlog.log.msgid", "_offset_msg_ids"),
    ("rmqlog.log.properties", "_native_copy"),
    ("rmqlog.log.properties", "_native_parse"),
    ("rmqlog.log.scan", "_native_walk"),
    ("rmqlog.schedule.timeup", "_native_copy"),
    ("rmqlog.schedule.timer_wheel", "_native_walk_chains"),
    ("rmqlog.log.encode.native", "pack_records"),
    ("rmqlog.log.encode.native", "crc32_batch"),
    ("rmqlog.log.batch_body", "_native_walk_batch"),
    ("rmqlog.log.raw_check", "_native_check"),
]
FUNCTIONS = [
    "crc32_batch",
    "all_same",
    "longest_value",
    "pack_records",
    "patch_records",
    "pack_plain",
    "ChunkWriter",
    "hexlify",
    "offset_msg_ids",
    "parse_properties",
    "copy_properties",
    "walk_records",
    "gather",
    "walk_chains",
    "walk_batch",
    "check_stored",
]

# a store used end to end: put (properties, keys, tags), dispatch, read, look up, verify
SCRIPT = """
import json, sys
import pyarrow as pa
import rmqlog, rmqlog.native, importlib
users = json.loads(sys.argv[2])
SYSTEM = ("KEYS", "TAGS", "UNIQ_KEY")  # the store's own properties (UNIQ_KEY differs run to run)
with rmqlog.MessageStore.open(sys.argv[1]) as s:
    s.create_topic("T", 2)
    s.put_batch(pa.table({"topic": ["T"] * 3, "body": [b"a", b"bb", b"ccc"], "tags": ["x", "y", "x"],
                          "keys": [["k1"], ["k2"], ["k3"]],
                          "properties": pa.array([[("p", "1")], [], [("q", "2")]], pa.map_(pa.string(), pa.string()))}))
    s.dispatch()
    rows = s.read_queue("T", 0, 0, 10).to_pylist() + s.read_queue("T", 1, 0, 10).to_pylist()
    print(json.dumps({
        "available": rmqlog.native.AVAILABLE, "clmul": rmqlog.native.CLMUL,
        "error": type(rmqlog.native.LOAD_ERROR).__name__ if rmqlog.native.LOAD_ERROR else None,
        "none": sorted(f"{m}.{n}" for m, n in users if getattr(importlib.import_module(m), n) is None),
        "rows": sorted([r["body"].decode(), r["tags"], r["keys"], sorted(p for p in r["properties"] if p[0] not in
            SYSTEM)] for r in rows),
        "by_key": s.query_by_key("T", "k2").column("body").to_pylist()[0].decode(),
        "problems": s.verify().problems,
    }))
"""


def _run(tmp_path: Path, without_helper: bool) -> dict:
    # sys.modules[name] = None makes `import` of that name raise ImportError: a build without it
    prelude = "import sys; sys.modules['rmqlog._native'] = None\n" if without_helper else ""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            prelude + SCRIPT,
            str(tmp_path / ("pure" if without_helper else "c")),
            json.dumps(USERS),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def test_every_function_is_the_helpers_when_it_is_built() -> None:
    if not native.AVAILABLE:
        pytest.skip("rmqlog._native was not built here")
    import rmqlog._native as helper

    assert native.LOAD_ERROR is None
    assert {name: getattr(native, name) for name in FUNCTIONS} == {name: getattr(helper, name) for name in FUNCTIONS}
    assert bool(helper.CLMUL) == native.CLMUL


def test_without_the_helper_every_path_runs_its_twin_and_the_store_works_the_same(tmp_path: Path) -> None:
    pure = _run(tmp_path, without_helper=True)
    assert (pure["available"], pure["clmul"], pure["error"]) == (False, False, "ModuleNotFoundError")
    assert pure["none"] == sorted(f"{m}.{n}" for m, n in USERS)  # every user holds None: its twin runs
    assert pure["rows"] == [
        ["a", "x", ["k1"], [["p", "1"]]],
        ["bb", "y", ["k2"], []],
        ["ccc", "x", ["k3"], [["q", "2"]]],
    ]
    assert (pure["by_key"], pure["problems"]) == ("bb", [])
    if native.AVAILABLE:
        with_helper = _run(tmp_path, without_helper=False)
        assert (with_helper["available"], with_helper["none"]) == (True, [])
        assert {k: with_helper[k] for k in ("rows", "by_key", "problems")} == {
            k: pure[k] for k in ("rows", "by_key", "problems")
        }
