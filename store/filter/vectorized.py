"""A SQL92 selector (:mod:`rmqlog.filter.sql92`) evaluated over a whole batch at once.

:func:`compile_filter` parses an expression; :meth:`Sql92Filter.mask` answers, for a batch of
messages, which ones match, from their properties (the stored properties string column, from
which only the names the expression reads are extracted, in one pass of the C helper:
:func:`rmqlog.log.properties.find_values`). Each node of the tree is one pass of numpy or
pyarrow.compute over the batch, never a Python loop over rows; the one exception is a
property value whose number syntax only Java knows (digits of other scripts, a hex float, a
``d``/``f`` suffix, surrounding blanks): those few values are converted one by one with the
scalar rules (:func:`rmqlog.filter.sql92.java_int`, :func:`~rmqlog.filter.sql92.java_double`).

A node's value over a batch is Java's per row: a value, null, or *thrown* (``err``: the
conversion of a string to a number failed, a Boolean met a String on the left of ``=``).
Throws propagate as Java's evaluation does: ``AND`` skips its right side where its left is
FALSE, ``OR`` where its left is TRUE, an order comparison where its left is null; the row then
does not match. The scalar evaluator (:func:`rmqlog.filter.sql92.matches`) is the reference:
the tests compare both on random expressions and properties.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..log.properties import ParsedProperties
from .sql92 import (
    And,
    BoolCast,
    Compare,
    Const,
    In,
    Negate,
    Node,
    Not,
    Or,
    Prop,
    as_value,
    chain,
    parse,
    properties,
)
from .values import (
    BOOLEAN,
    DOUBLE,
    INT,
    INT_MAX,
    INT_MIN,
    LONG,
    LONG_MAX,
    LONG_MIN,
    NUMERIC,
    STRING,
    EvaluationError,
    Value,
    double_key,
    java_compare,
    java_double,
    java_int,
)

_NAN_BITS = np.int64(0x7FF8000000000000)
_LOW63 = np.int64(0x7FFFFFFFFFFFFFFF)
_SIMPLE_INT = r"^[+-]?[0-9]{1,18}$"
_SIMPLE_DOUBLE = r"^[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)$"


@dataclass(slots=True)
class _V:
    """A node's value over ``n`` rows. ``kind``: ``S`` property strings (``arr``, null where
    missing), ``C`` one constant (``const``), ``B`` booleans (``val``, ``valid``), ``N`` null
    everywhere. ``err``: rows where Java threw (``None``: none)."""

    kind: str
    arr: pa.Array | None = None
    const: Value = None
    val: np.ndarray | None = None
    valid: np.ndarray | None = None
    err: np.ndarray | None = None

    def nulls(self, n: int) -> np.ndarray:
        if self.kind == "S":
            assert self.arr is not None
            return null_mask(self.arr)
        if self.kind == "B":
            assert self.valid is not None
            return ~self.valid
        return np.full(n, self.kind == "N" or self.const is None)

    def runtime_kind(self) -> str | None:
        """Java's class of the non-null values (``None``: always null)."""
        if self.kind == "S":
            return STRING
        if self.kind == "B":
            return BOOLEAN
        if self.kind == "C":
            return None if self.const is None else self.const[0]
        return None


def _np(a: pa.Array | pa.ChunkedArray) -> np.ndarray:
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    return (
        np.asarray(a.to_numpy(zero_copy_only=False), dtype=bool)
        if a.null_count == 0
        else np.asarray(pc.fill_null(a, False).to_numpy(zero_copy_only=False), dtype=bool)
    )


def null_mask(arr: pa.Array) -> np.ndarray:
    """Where ``arr`` is null, from its validity bitmap (no compute call: a pull's window is
    small enough that a kernel's fixed cost is most of it)."""
    n = len(arr)
    if arr.null_count == 0:
        return np.zeros(n, bool)
    if arr.null_count == n:
        return np.ones(n, bool)
    bits = np.unpackbits(np.frombuffer(arr.buffers()[0], np.uint8), bitorder="little")
    return bits[arr.offset : arr.offset + n] == 0


def _or(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    if a is None:
        return b
    if b is None:
        return a
    return a | b


def _and_mask(mask: np.ndarray, e: np.ndarray | None) -> np.ndarray | None:
    return None if e is None else (mask & e)


def _dkeys(x: np.ndarray) -> np.ndarray:
    """Double.compareTo's order as int64 keys (NaN above everything, -0.0 below 0.0)."""
    bits = np.asarray(x, np.float64).view(np.int64).copy()
    bits[np.isnan(x)] = _NAN_BITS
    return np.where(bits >= 0, bits, bits ^ _LOW63)


def to_numbers(arr: pa.Array, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Java's ``Integer.valueOf`` / ``Long.valueOf`` / ``Double.valueOf`` of each string
    (``kind`` I, L or D): (values: int64 or float64, ok). Null rows are not ok.

    First one cast of the whole column by Arrow (no regex: compiling one costs more than
    evaluating a pull's window): when it succeeds every value is in a syntax both accept
    (Arrow's integers are Java's without the ``+`` sign and other scripts' digits; its doubles
    Java's, except ``inf``/``nan`` spellings, which are checked one by one; a hex integer, which
    Arrow reads and Java does not, sends the column the careful way). Else the column
    goes the careful way (:func:`_to_numbers_checked`)."""
    valid = ~null_mask(arr)
    target = pa.float64() if kind == DOUBLE else pa.int64()
    if kind != DOUBLE and _has_x(arr):
        return _to_numbers_checked(arr, kind, valid)  # Arrow reads 0x10 as 16; Java refuses it
    try:
        cast = pc.cast(arr, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return _to_numbers_checked(arr, kind, valid)
    values = np.asarray((pc.fill_null(cast, 0) if cast.null_count else cast).to_numpy(zero_copy_only=False))
    ok = valid.copy()
    if kind == DOUBLE:
        for i in np.flatnonzero(valid & ~np.isfinite(values)):  # Java spells them NaN and Infinity only
            try:
                values[i] = java_double(arr[i].as_py())
            except EvaluationError:
                ok[i] = False
        return values.astype(np.float64, copy=False), ok
    values = values.astype(np.int64, copy=False)
    if kind == INT:
        ok &= (values >= INT_MIN) & (values <= INT_MAX)
    return values, ok


def _has_x(arr: pa.Array) -> bool:
    """Whether any value of a string column holds an ``x`` or ``X`` (its bytes, no compute call)."""
    data = arr.buffers()[2]
    if data is None or not len(arr):
        return False
    off = np.frombuffer(arr.buffers()[1], np.int32, len(arr) + 1, arr.offset * 4)
    raw = np.frombuffer(data, np.uint8)[off[0] : off[-1]]
    return bool(((raw | 0x20) == ord("x")).any())


def _to_numbers_checked(arr: pa.Array, kind: str, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`to_numbers` for a column Arrow's cast refuses (some value is no number to it)."""
    n = len(arr)
    if kind == DOUBLE:
        values = np.zeros(n, np.float64)
        simple = _np(pc.match_substring_regex(arr, _SIMPLE_DOUBLE))
        if simple.all():
            values = np.asarray(pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False), np.float64)
        elif simple.any():
            values[simple] = np.asarray(
                pc.cast(arr.filter(pa.array(simple)), pa.float64()).to_numpy(zero_copy_only=False)
            )
        ok = simple.copy()
        for i in np.flatnonzero(valid & ~simple):  # what only Java's syntax allows: one by one
            try:
                values[i] = java_double(arr[i].as_py())
                ok[i] = True
            except EvaluationError:
                pass
        return values, ok
    ivalues = np.zeros(n, np.int64)
    simple = _np(pc.match_substring_regex(arr, _SIMPLE_INT))
    if simple.any():
        picked = arr if simple.all() else arr.filter(pa.array(simple))
        picked = pc.replace_substring_regex(picked, r"^\+", "")
        cast = np.asarray(pc.cast(picked, pa.int64()).to_numpy(zero_copy_only=False), np.int64)
        if simple.all():
            ivalues = cast
        else:
            ivalues[simple] = cast
    ok = simple.copy()
    rest = valid & ~simple
    if rest.any():
        # longer digit runs or other scripts' digits: one by one (a plain non-number: refused here)
        maybe = _np(pc.or_(pc.match_substring_regex(arr, r"^[+-]?[0-9]{19,}$"), pc.invert(pc.string_is_ascii(arr))))
        lo, hi = (INT_MIN, INT_MAX) if kind == INT else (LONG_MIN, LONG_MAX)
        for i in np.flatnonzero(rest & maybe):
            try:
                ivalues[i] = java_int(arr[i].as_py(), lo, hi)
                ok[i] = True
            except EvaluationError:
                pass
    if kind == INT:
        ok &= (ivalues >= INT_MIN) & (ivalues <= INT_MAX)
    return ivalues, ok


def _keys_of(values: np.ndarray, kind: str) -> np.ndarray:
    return _dkeys(values) if kind == DOUBLE else values


def _const_key(v: object, kind: str) -> int:
    return double_key(float(v)) if kind == DOUBLE else int(v)  # type: ignore[arg-type,call-overload]


def _sign(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    return (a > b).astype(np.int8) - (a < b).astype(np.int8)


@dataclass(frozen=True)
class Sql92Filter:
    """A compiled SQL92 selector: its text, tree and the property names it reads.
    Picklable (the tree is plain frozen dataclasses)."""

    expression: str
    tree: Node
    names: tuple[str, ...]

    def mask_properties(self, props: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Which rows of a stored properties column (RocketMQ's ``name\\x01value\\x02`` string)
        match: a numpy bool array."""
        if isinstance(props, pa.ChunkedArray):
            props = props.combine_chunks()
        n = len(props)
        if not self.names or not n:
            return self.mask({}, n)
        parsed = ParsedProperties(props, names=self.names)
        return self.mask({name: parsed.column(name) for name in self.names}, n)

    def mask(self, columns: Mapping[str, pa.Array], n: int) -> np.ndarray:
        """Which of ``n`` rows match, given each read property's values (a string column,
        null where the message has no such property)."""
        v = _Eval(columns, n).ev(self.tree)
        if v.kind == "C":
            out = np.full(n, v.const == (BOOLEAN, True))
        elif v.kind == "B":
            assert v.val is not None and v.valid is not None
            out = v.val & v.valid
        else:  # a node that is not boolean cannot be the root (the parser casts or refuses it)
            out = np.zeros(n, bool)
        if v.err is not None:
            out &= ~v.err
        return out


#: compiled filters kept by text: at most this many (RocketMQ's broker keeps 100 by text)...
COMPILED_CACHE = 256
#: ...and at most this many characters of expression text in all (a tree's size follows its
#: text's: what the cache holds stays bounded whatever expressions clients send)
COMPILED_CACHE_CHARS = 1 << 20


class _Compiled:
    """The last filters compiled, by text, least recently used dropped first (a lock: the
    Spark side compiles from several threads)."""

    def __init__(self) -> None:
        self.entries: OrderedDict[str, Sql92Filter] = OrderedDict()
        self.chars = 0
        self.lock = threading.Lock()

    def get(self, expression: str) -> Sql92Filter:
        with self.lock:
            found = self.entries.get(expression)
            if found is not None:
                self.entries.move_to_end(expression)
                return found
        tree = parse(expression)  # raises: a refusal is not kept
        flt = Sql92Filter(expression, tree, properties(tree))
        with self.lock:
            if expression not in self.entries and len(expression) <= COMPILED_CACHE_CHARS:
                self.entries[expression] = flt
                self.chars += len(expression)
                while len(self.entries) > COMPILED_CACHE or self.chars > COMPILED_CACHE_CHARS:
                    old, _ = self.entries.popitem(last=False)
                    self.chars -= len(old)
        return flt


_COMPILED = _Compiled()


def compile_filter(expression: object) -> Sql92Filter:
    """Parse ``expression`` (:func:`rmqlog.filter.sql92.parse`: raises
    :class:`rmqlog.filter.FilterParseError` naming position and token) into a filter.

    Filters compiled are kept by text (a filter is immutable: :data:`COMPILED_CACHE` of them
    and :data:`COMPILED_CACHE_CHARS` characters of text at most): a consumer's pulls name the
    same expression each time. A refusal is not kept (it raises, after a parse linear in the
    text)."""
    if not isinstance(expression, str):
        parse(expression)  # raises the typed refusal
    return _COMPILED.get(str(expression))


class _Eval:
    def __init__(self, columns: Mapping[str, pa.Array], n: int) -> None:
        self.columns, self.n = columns, n

    def column(self, name: str) -> pa.Array:
        col = self.columns.get(name)
        if col is None:
            return pa.nulls(self.n, pa.string())
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        return col if pa.types.is_string(col.type) else col.cast(pa.string())

    def bools(self, val: np.ndarray, valid: np.ndarray, err: np.ndarray | None) -> _V:
        return _V("B", val=val, valid=valid, err=err if err is None or err.any() else None)

    def as_bool(self, v: _V) -> tuple[np.ndarray, np.ndarray]:
        """(value, valid) of a boolean node's value."""
        if v.kind == "B":
            assert v.val is not None and v.valid is not None
            return v.val, v.valid
        if v.kind == "C" and v.const is not None:
            return np.full(self.n, bool(v.const[1])), np.ones(self.n, bool)
        return np.zeros(self.n, bool), np.zeros(self.n, bool)

    def ev(self, node: Node) -> _V:
        n = self.n
        if isinstance(node, Const):
            return _V("C", const=as_value(node))
        if isinstance(node, Prop):
            return _V("S", arr=self.column(node.name))
        if isinstance(node, Negate):
            inner = self.ev(node.operand)
            if inner.kind == "C" and inner.const is not None and inner.const[0] in NUMERIC:
                return _V("C", const=(inner.const[0], -inner.const[1]))  # type: ignore[operator]
            return _V("N", err=inner.err)
        if isinstance(node, Not):
            inner = self.ev(node.operand)
            val, valid = self.as_bool(inner)
            return self.bools(~val, valid, inner.err)
        if isinstance(node, BoolCast):
            nulls = null_mask(self.column(node.operand.name))
            return self.bools(np.zeros(n, bool), ~nulls, None)
        if isinstance(node, In):
            arr = self.column(node.operand.name)
            hit = _np(pc.is_in(arr, pa.array(sorted(node.values), pa.string())))
            return self.bools(hit != node.negated, ~null_mask(arr), None)
        if isinstance(node, And | Or):
            return self.logic(node)
        assert isinstance(node, Compare)
        return self.compare(node)

    def logic(self, node: And | Or) -> _V:
        decisive = isinstance(node, Or)
        first, rest = chain(node)
        left = self.ev(first)
        lval, lvalid = self.as_bool(left)
        err = left.err
        for operand in rest:
            right = self.ev(operand)
            rval, rvalid = self.as_bool(right)
            l_decides = lvalid & (lval == decisive)
            if err is not None:
                l_decides &= ~err
            err = _or(err, _and_mask(~l_decides, right.err))
            r_decides = rvalid & (rval == decisive)
            decided = l_decides | r_decides
            lvalid = decided | (lvalid & rvalid)
            lval = np.where(decided, decisive, not decisive)
        return self.bools(lval, lvalid, err)

    def compare(self, node: Compare) -> _V:
        n = self.n
        left, right = self.ev(node.left), self.ev(node.right)
        ln, rn = left.nulls(n), right.nulls(n)
        both = ~ln & ~rn
        c, conv_err = self.compare_values(left, right, node.op != "=", both)
        conv_err = _and_mask(both, conv_err)
        if node.op == "=":
            err = _or(_or(left.err, right.err), conv_err)
            val = np.where(ln & rn, True, np.where(ln ^ rn, False, c == 0))
            return self.bools(val, ~(ln & ~rn), err)
        # an order comparison: the right side is evaluated only where the left is not null
        err = _or(_or(left.err, _and_mask(~ln, right.err)), conv_err)
        op = node.op
        val = c > 0 if op == ">" else c >= 0 if op == ">=" else c < 0 if op == "<" else c <= 0
        return self.bools(val, both, err)

    def compare_values(
        self, left: _V, right: _V, order: bool, both: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Java's compare of the two sides where ``both`` are not null: (-1/0/1 per row, rows
        that threw)."""
        n = self.n
        zero = np.zeros(n, np.int8)
        lk, rk = left.runtime_kind(), right.runtime_kind()
        if lk is None or rk is None or not both.any():
            return zero, None
        if left.kind == "C" and right.kind == "C":
            try:
                return np.full(n, java_compare(left.const, right.const), np.int8), None
            except EvaluationError:
                return zero, np.ones(n, bool)
        if order and lk == STRING and rk == STRING:  # two strings by order: both read as doubles
            lv, lok = self.numbers(left, DOUBLE)
            rv, rok = self.numbers(right, DOUBLE)
            return _sign(_dkeys(lv), _dkeys(rv)), ~(lok & rok)
        if lk == rk == STRING:  # equality of strings
            eq = pc.equal(self.strings(left), self.strings(right))
            return (~_np(eq)).astype(np.int8), None
        if lk == BOOLEAN and rk == STRING:
            return zero, np.ones(n, bool)  # Java: ClassCastException
        if BOOLEAN in (lk, rk) and STRING not in (lk, rk):
            if lk == rk:
                lb, rb = self.as_bool(left)[0], self.as_bool(right)[0]
                return _sign(lb.astype(np.int8), rb.astype(np.int8)), None
            return np.full(n, -1, np.int8), None  # a Boolean and a number
        if lk == STRING and rk == BOOLEAN:  # Boolean.valueOf(string)
            if left.kind == "C":
                assert left.const is not None
                lb = np.full(n, str(left.const[1]).lower() == "true")
            else:
                lb = _np(pc.equal(pc.utf8_lower(left.arr), "true"))
            return _sign(lb.astype(np.int8), self.as_bool(right)[0].astype(np.int8)), None
        # a number and a string: the string converted to the number's class
        if lk == STRING:
            kind = rk
            values, ok = self.numbers(left, kind)
            assert right.const is not None
            return _sign(_keys_of(values, kind), _const_key(right.const[1], kind)), ~ok
        assert rk == STRING and left.const is not None
        kind = lk
        values, ok = self.numbers(right, kind)
        return _sign(np.full(n, _const_key(left.const[1], kind), np.int64), _keys_of(values, kind)), ~ok

    def strings(self, v: _V) -> pa.Array | pa.Scalar:
        if v.kind == "S":
            return v.arr
        assert v.const is not None
        return pa.scalar(str(v.const[1]), pa.string())

    def numbers(self, v: _V, kind: str) -> tuple[np.ndarray, np.ndarray]:
        if v.kind == "S":
            assert v.arr is not None
            return to_numbers(v.arr, kind)
        assert v.const is not None
        c = v.const[1]
        if v.const[0] == STRING:  # a string constant read as a number: the same rules
            try:
                x = (
                    java_double(str(c))
                    if kind == DOUBLE
                    else java_int(str(c), *((INT_MIN, INT_MAX) if kind == INT else (LONG_MIN, LONG_MAX)))
                )
            except EvaluationError:
                return np.zeros(self.n, np.float64 if kind == DOUBLE else np.int64), np.zeros(self.n, bool)
            c = x
        dtype = np.float64 if kind == DOUBLE else np.int64
        return np.full(self.n, c, dtype), np.ones(self.n, bool)


__all__ = ["Sql92Filter", "compile_filter", "to_numbers", "LONG"]
