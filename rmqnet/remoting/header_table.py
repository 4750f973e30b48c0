"""Request headers declared as field tables (RocketMQ's ``CommandCustomHeader`` classes).

A header is a slotted, keyword-only dataclass whose fields are declared with :func:`java`: the
Java field name, the type (:data:`STR`, :data:`INT`, :data:`LONG`, :data:`BOOL`) and either
required (``@CFNotNull``) or a default. :func:`header` turns the declaration into a
:class:`HeaderTable` and derives from it, once at import, both directions:

- ``read(ext)``: the lenient readers of :mod:`.fields` field by field, generated as one
  straight-line function (the same calls a hand-written reader makes, each reader's common
  case answered inline), so a hot-path header costs no loop over its table per request;
  a missing required field or a value of the wrong type raises
  :class:`~rmqnet.remoting.errors.FieldError` naming the Java field.
- ``to_ext()``: extFields as Java writes them (every value a string, booleans ``true``/``false``),
  fields that are ``None`` left out.

A class that defines ``read`` or ``to_ext`` itself (a check Java's ``checkFields`` makes, two
name sets) keeps its own and calls the table's (``TABLE.read``, ``TABLE.to_ext``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Self, TypeVar

from .fields import ext_bool, ext_int, ext_long, ext_str

#: the field types, by RocketMQ's Java types
STR, INT, LONG, BOOL = "String", "int", "long", "boolean"
_READERS = {STR: ext_str, INT: ext_int, LONG: ext_long, BOOL: ext_bool}
_RANGES = {INT: (-(1 << 31), (1 << 31) - 1), LONG: (-(1 << 63), (1 << 63) - 1)}
_REQUIRED = dataclasses.MISSING

H = TypeVar("H", bound="Header")


def java(name: str, kind: str, default: Any = _REQUIRED) -> Any:
    """One row of a header's table: the dataclass field read from and written to extFields as
    ``name``, of Java type ``kind``; required unless a ``default`` is given."""
    if kind not in _READERS:
        raise ValueError(f"{name}: unknown field type {kind!r}")
    return dataclasses.field(default=default, metadata={"java": name, "kind": kind})


@dataclasses.dataclass(frozen=True, slots=True)
class Field:
    java: str
    attr: str
    kind: str
    default: Any  # dataclasses.MISSING: required

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED


def _java_text(v: Any) -> str:
    """A value as Java's ``String.valueOf`` writes it (booleans lower-case)."""
    if v is True:
        return "true"
    if v is False:
        return "false"
    return v if type(v) is str else str(v)


class HeaderTable:
    """The fields of one request header, in declaration order, and the reader and writer
    derived from them."""

    def __init__(self, cls: type, fields: tuple[Field, ...]) -> None:
        self.cls = cls
        self.fields = fields
        self.read: Callable[[Mapping[str, Any]], Any] = _compile_reader(cls, fields)

    def renamed(self, names: Mapping[str, str]) -> HeaderTable:
        """The same header under other Java names (``names``: by the declared name), e.g.
        SEND_MESSAGE_V2's one-letter names."""
        return HeaderTable(self.cls, tuple(dataclasses.replace(f, java=names.get(f.java, f.java)) for f in self.fields))

    def to_ext(self, obj: Any) -> dict[str, str]:
        out = {}
        for f in self.fields:
            v = getattr(obj, f.attr)
            if v is not None:
                out[f.java] = _java_text(v)
        return out


def _compile_reader(cls: type, fields: tuple[Field, ...]) -> Callable[[Mapping[str, Any]], Any]:
    """``read(ext)`` for ``fields`` as one generated function: per field, the common case of
    its reader inline (a string for a string, a JSON boolean for a boolean, a decimal string
    or an int in range for a number: the first steps of :mod:`.fields`' readers, which answer
    exactly what their general path would), anything else to the reader itself."""
    env: dict[str, Any] = {"_cls": cls, **{r.__name__: r for r in _READERS.values()}}
    lines = ["def read(ext):", "    get = ext.get"]
    args = []
    for i, f in enumerate(fields):
        reader = _READERS[f.kind].__name__
        key = f"_k{i}"
        env[key] = f.java
        call = f"{reader}(ext, {key})"
        if not f.required:
            env[f"_d{i}"] = f.default
            call = f"{reader}(ext, {key}, _d{i})"
        v = f"v{i}"
        lines.append(f"    {v} = get({key})")
        if f.kind == STR:
            lines.append(f"    if type({v}) is not str: {v} = {call}")
        elif f.kind == BOOL:
            lines.append(f"    if type({v}) is not bool: {v} = {call}")
        else:  # a decimal string or an int in range (``_common_number``), else the reader
            lo, hi = _RANGES[f.kind]
            lines += [
                f"    if type({v}) is str:",
                "        try:",
                f"            {v} = int({v})",
                "        except ValueError:",
                f"            {v} = None",
                f"    elif type({v}) is not int: {v} = None",
                f"    if {v} is None or not {lo} <= {v} <= {hi}: {v} = {call}",
            ]
        args.append(f"{f.attr}={v}")
    lines.append(f"    return _cls({', '.join(args)})")
    exec("\n".join(lines), env)  # noqa: S102 - text built above from the declared table only
    read: Callable[[Mapping[str, Any]], Any] = env["read"]
    read.__qualname__ = f"{cls.__qualname__}.read"
    return read


class Header:
    """The base of the declared headers: ``read`` and ``to_ext`` by the class's table."""

    __slots__ = ()
    TABLE: ClassVar[HeaderTable]

    @classmethod
    def read(cls, ext: Mapping[str, Any]) -> Self:
        """The header of a request's extFields (replaced by the table's generated reader)."""
        return cls.TABLE.read(ext)

    def to_ext(self) -> dict[str, str]:
        """extFields as Java writes them: strings, ``None`` fields left out."""
        return self.TABLE.to_ext(self)


def header(cls: type[H]) -> type[H]:
    """Builds ``cls.TABLE`` from the :func:`java` fields of the dataclass ``cls`` (applied over
    ``@dataclass(slots=True, kw_only=True)``) and makes its generated reader ``cls.read``
    unless the class defines its own."""
    rows = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if "java" not in f.metadata:
            raise TypeError(f"{cls.__name__}.{f.name} is not declared with java()")
        rows.append(Field(f.metadata["java"], f.name, f.metadata["kind"], f.default))
    cls.TABLE = HeaderTable(cls, tuple(rows))
    if "read" not in cls.__dict__:
        cls.read = staticmethod(cls.TABLE.read)  # type: ignore[assignment,method-assign]
    return cls
