"""RocketMQ 4.9.8's SQL92 message selector: the grammar (``filter/.../SelectorParser.jj``), the
expression tree and a scalar evaluator that is the reference for the vectorized one
(:mod:`rmqlog.filter.vectorized`).

Grammar (keywords and names case-insensitive; ``--`` comments end at a line break, ``/* */``)::

    expr       := and (OR and)*
    and        := equality (AND equality)*
    equality   := comparison ( '=' comparison | '<>' comparison | IS NULL | IS NOT NULL )*
    comparison := unary ( ('>'|'>='|'<'|'<=') unary | [NOT] BETWEEN unary AND unary
                          | [NOT] IN '(' string (',' string)* ')' )*
    unary      := '+' unary | '-' unary | NOT unary | primary
    primary    := string | integer | float | TRUE | FALSE | NULL | name | '(' expr ')'

So ``NOT`` binds tighter than any comparison (``NOT a = 1`` is ``(NOT a) = 1``), as in Java.
Literals: ``'it''s'``; integers ``0`` or ``[1-9][0-9]*`` with an optional ``L`` (Integer when
in int range, else Long; past Long: refused); floats ``1.5``, ``1.``, ``.5``, ``5E10`` (Double;
Java refuses one that is infinite *or below Double.MIN_VALUE*, so ``0.0`` is refused). There is
no LIKE, no arithmetic but unary minus, no ``!=`` in 4.9.8.

Java's checks when it builds the tree, each a parse failure here too: ``>``/``>=``/``<``/``<=``
take no string, boolean or NULL constant and no boolean expression; ``=``/``<>`` take no NULL
constant, and a TRUE/FALSE/NULL constant on the left of ``=`` needs one on the right; ``IN``
needs a property on its left; ``BETWEEN`` bounds that are both constants must not be NULL and
must be in order; ``AND``/``OR``/``NOT`` and the whole expression must be boolean (a bare
property is cast: null when missing, else FALSE, since property values are strings).

Evaluation (:func:`evaluate`), Java's: every property value is a string or missing (null).
A comparison with a missing operand is null (unknown), except ``=``: both missing is TRUE, a
missing left is null, a missing right FALSE (so ``'x' <> a`` is TRUE when ``a`` is missing,
``a <> 'x'`` null). A string compared with a number is converted to the number's type
(``Integer.valueOf``/``Long.valueOf``/``Double.valueOf``); two strings compared by order are
both read as doubles; a conversion that fails *throws*, and a throw anywhere makes the whole
expression not match that message (the broker catches it), unless ``AND``/``OR`` already
decided without evaluating that side. ``AND``/``OR``/``NOT`` are Kleene's three-valued logic.
A message matches when the expression is TRUE.

Deviations from Java, on purpose (docs/decisions.md, "Reading and dispatch"): tokens left after a complete
expression are refused (Java stops reading there and filters by the first part, so
``a = 1 b = 2`` filters by ``a = 1``); an expression is bounded (:data:`MAX_EXPRESSION_CHARS`,
:data:`MAX_DEPTH`, :data:`MAX_NODES`), Java's only bound is the request's frame.

Time: linear in the text. The tokens (:mod:`rmqlog.filter.tokens`) are read on demand, each
character examined a bounded number of times; the parser takes each token once and builds each
node once; an expression refused early (a run of 60,000 ``-`` is refused at the 101st, too
deep) is not read further.

Errors: :class:`FilterParseError` (an :class:`rmqlog.errors.InvalidArgumentError`) naming the
position (0-based character) and the token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

from .tokens import FilterParseError, Scanner, Token
from .tokens import tokenize as tokenize  # the module's names before the tokenizer moved
from .values import (
    BOOLEAN,
    DOUBLE,
    DOUBLE_MIN_VALUE,
    INT,
    INT_MAX,
    LONG,
    LONG_MAX,
    NUMERIC,
    STRING,
    EvaluationError,
    Value,
    cmp,
    double_key,
    java_compare,
    java_double,
    java_equals,
)

#: An expression longer than this is refused (characters).
MAX_EXPRESSION_CHARS = 65536
#: A tree deeper than this is refused (parentheses, unary operators, chains of comparisons;
#: a chain of one of AND or OR counts once, the evaluators walk it without recursing).
MAX_DEPTH = 100
#: Nodes in the tree at most (each costs one vectorized pass over a batch).
MAX_NODES = 4096


# ------------------------------------------------------------------------------- tree


@dataclass(frozen=True, slots=True)
class Const:
    """A literal: ``kind`` one of S, B, I, L, D, or ``None`` with ``value`` None (NULL)."""

    kind: str | None
    value: object


@dataclass(frozen=True, slots=True)
class Prop:
    name: str


@dataclass(frozen=True, slots=True)
class Negate:
    operand: Node


@dataclass(frozen=True, slots=True)
class Not:
    operand: Node


@dataclass(frozen=True, slots=True)
class BoolCast:
    """A bare property used as a boolean."""

    operand: Prop


@dataclass(frozen=True, slots=True)
class And:
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Or:
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Compare:
    """``op`` one of ``=`` (Java's ``doCreateEqual``, also IS NULL against a NULL constant),
    ``>``, ``>=``, ``<``, ``<=``."""

    op: str
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class In:
    operand: Prop
    values: frozenset[str]
    negated: bool


Node = Union[Const, Prop, Negate, Not, BoolCast, And, Or, Compare, In]  # noqa: UP007 (a runtime alias)

TRUE, FALSE, NULL = Const(BOOLEAN, True), Const(BOOLEAN, False), Const(None, None)


def is_boolean(node: Node) -> bool:
    """Java's ``instanceof BooleanExpression`` (the TRUE, FALSE and NULL constants are)."""
    return isinstance(node, Not | BoolCast | And | Or | Compare | In) or (
        isinstance(node, Const) and node.kind in (BOOLEAN, None)
    )


def properties(node: Node) -> tuple[str, ...]:
    """The property names the expression reads, in first-use order."""
    out: dict[str, None] = {}
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Prop):
            out[n.name] = None
        elif isinstance(n, Negate | Not | BoolCast | In):
            stack.append(n.operand)
        elif isinstance(n, And | Or | Compare):
            stack.extend((n.right, n.left))
    return tuple(out)


# ----------------------------------------------------------------------------- parser
def parse(text: object) -> Node:
    """The expression tree of a SQL92 selector (see the module docstring); raises
    :class:`FilterParseError` naming position and token, or for a non-string."""
    if not isinstance(text, str):
        raise FilterParseError(f"the expression must be a string, got {type(text).__name__}")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise FilterParseError(f"the expression has {len(text)} characters, more than {MAX_EXPRESSION_CHARS}")
    if not text.strip():
        raise FilterParseError("the expression is empty")  # Java: "Expression can't be null!"
    return Parser(text).parse()


class Parser:
    """The recursive-descent parser over a :class:`~rmqlog.filter.tokens.Scanner` read on
    demand (JavaCC's parser asks its token manager so too): an expression refused early is
    not scanned further. Work: one pass over the tokens, each node built once; recursion at
    most :data:`MAX_DEPTH` levels deep (a few Python frames each), refused beyond."""

    def __init__(self, text: str) -> None:
        self.scanner = Scanner(text)
        self.ahead: list[Token] = []  # tokens read and not taken yet (at most 2)
        self.depth = 0
        self.nodes = 0
        self.depths: dict[int, int] = {}  # id(node) -> depth of its tree

    # -- helpers
    def peek(self, k: int = 0) -> Token:
        ahead = self.ahead
        if k < len(ahead):
            return ahead[k]
        while len(self.ahead) <= k:
            if self.ahead and self.ahead[-1].kind == "EOF":
                return self.ahead[-1]
            self.ahead.append(self.scanner.next())
        return self.ahead[k]

    def take(self) -> Token:
        t = self.peek()
        if t.kind != "EOF":
            del self.ahead[0]
        return t

    def expect(self, kind: str, text: str | None = None) -> Token:
        t = self.peek()
        if t.kind != kind or (text is not None and t.text != text):
            self.fail(f"expected {text or kind}", t)
        return self.take()

    def fail(self, reason: str, t: Token | None = None) -> None:
        t = t or self.peek()
        raise FilterParseError(reason, position=t.pos, token=t.text or "<end>")

    def is_op(self, text: str, k: int = 0) -> bool:
        t = self.peek(k)
        return t.kind == "OP" and t.text == text

    def node(self, n: Node, at: Token) -> Node:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            self.fail(f"the expression has more than {MAX_NODES} nodes", at)
        d = self.depths.get
        if isinstance(n, And | Or) and type(n.left) is type(n):  # a chain: walked, not recursed
            depth = max(d(id(n.left), 1), d(id(n.right), 1) + 1)
        elif isinstance(n, And | Or | Compare):
            depth = 1 + max(d(id(n.left), 1), d(id(n.right), 1))
        elif isinstance(n, Negate | Not | BoolCast | In):
            depth = 1 + d(id(n.operand), 1)
        else:
            depth = 1
        if depth > MAX_DEPTH:
            self.fail(f"the expression nests deeper than {MAX_DEPTH}", at)
        self.depths[id(n)] = depth
        return n

    def enter(self, at: Token) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            self.fail(f"the expression nests deeper than {MAX_DEPTH}", at)

    def boolean(self, n: Node, at: Token) -> Node:
        """Java's ``asBooleanExpression``."""
        if is_boolean(n):
            return n
        if isinstance(n, Prop):
            return self.node(BoolCast(n), at)
        self.fail(f"expression will not result in a boolean value: {describe(n)}", at)
        raise AssertionError  # unreachable

    # -- grammar
    def parse(self) -> Node:
        start = self.peek()
        tree = self.boolean(self.or_expr(), start)
        if self.peek().kind != "EOF":
            self.fail("unexpected token after the expression")
        return tree

    def or_expr(self) -> Node:
        self.enter(self.peek())
        left = self.and_expr()
        while self.peek().kind == "OR":
            t = self.take()
            right = self.and_expr()
            left = self.node(Or(self.boolean(left, t), self.boolean(right, t)), t)
        self.depth -= 1
        return left

    def and_expr(self) -> Node:
        left = self.equality()
        while self.peek().kind == "AND":
            t = self.take()
            right = self.equality()
            left = self.node(And(self.boolean(left, t), self.boolean(right, t)), t)
        return left

    def equality(self) -> Node:
        left = self.comparison()
        while True:
            t = self.peek()
            if self.is_op("=") or self.is_op("<>"):
                self.take()
                right = self.comparison()
                left = self.equal(left, right, t)
                if t.text == "<>":
                    left = self.node(Not(left), t)
            elif t.kind == "IS" and self.peek(1).kind == "NULL":
                self.take(), self.take()
                left = self.node(Compare("=", left, NULL), t)
            elif t.kind == "IS":
                self.take()
                self.expect("NOT")
                self.expect("NULL")
                left = self.node(Not(self.node(Compare("=", left, NULL), t)), t)
            else:
                return left

    def equal(self, left: Node, right: Node, t: Token) -> Node:
        for side in (left, right):  # checkEqualOperand
            if isinstance(side, Const) and side.kind is None:
                self.fail("NULL cannot be compared with '=' or '<>' (use IS [NOT] NULL)", t)
        if isinstance(left, Const) and isinstance(right, Const) and is_boolean(left) and not is_boolean(right):
            self.fail(f"{describe(left)} cannot be compared with {describe(right)}", t)
        return self.node(Compare("=", left, right), t)

    def order(self, op: str, left: Node, right: Node, t: Token) -> Node:
        for side in (left, right):  # checkLessThanOperand
            if (isinstance(side, Const) and side.kind not in NUMERIC) or (
                not isinstance(side, Const) and is_boolean(side)
            ):
                self.fail(f"value {describe(side)} cannot be compared with {op!r}", t)
        return self.node(Compare(op, left, right), t)

    def comparison(self) -> Node:
        left = self.unary()
        while True:
            t = self.peek()
            if t.kind == "OP" and t.text in (">", ">=", "<", "<="):
                self.take()
                left = self.order(t.text, left, self.unary(), t)
            elif t.kind == "BETWEEN" or (t.kind == "NOT" and self.peek(1).kind == "BETWEEN"):
                negated = t.kind == "NOT"
                self.take()
                if negated:
                    self.take()
                low = self.unary()
                self.expect("AND")
                high = self.unary()
                if negated:
                    left = self.node(Or(self.order("<", left, low, t), self.order(">", left, high, t)), t)
                else:
                    self.between_bounds(low, high, t)
                    left = self.node(And(self.order(">=", left, low, t), self.order("<=", left, high, t)), t)
            elif t.kind == "IN" or (t.kind == "NOT" and self.peek(1).kind == "IN"):
                negated = t.kind == "NOT"
                self.take()
                if negated:
                    self.take()
                self.expect("OP", "(")
                values = [unquote(self.expect("STRING").text)]
                while self.is_op(","):
                    self.take()
                    values.append(unquote(self.expect("STRING").text))
                self.expect("OP", ")")
                if not isinstance(left, Prop):
                    self.fail(f"expected a property for IN, got {describe(left)}", t)
                    raise AssertionError  # unreachable
                left = self.node(In(left, frozenset(values), negated), t)
            elif t.kind == "NOT":
                self.fail("expected BETWEEN or IN after NOT", self.peek(1))
            else:
                return left

    def between_bounds(self, low: Node, high: Node, t: Token) -> None:
        if isinstance(low, Const) and isinstance(high, Const):
            if low.kind is None or high.kind is None:
                self.fail("illegal values of BETWEEN: the values cannot be NULL", t)
            try:
                ordered = java_compare(as_value(high), as_value(low)) >= 0
            except EvaluationError as exc:
                self.fail(f"illegal values of BETWEEN: {exc}", t)
            if not ordered:
                self.fail(
                    f"illegal values of BETWEEN: {describe(low)} must be less than or equal to {describe(high)}", t
                )

    def unary(self) -> Node:
        t = self.peek()
        self.enter(t)
        try:
            if self.is_op("+"):
                self.take()
                return self.unary()
            if self.is_op("-"):
                self.take()
                return self.node(Negate(self.unary()), t)
            if t.kind == "NOT":
                self.take()
                operand = self.unary()
                return self.node(Not(self.boolean(operand, t)), t)
            return self.primary()
        finally:
            self.depth -= 1

    def primary(self) -> Node:
        t = self.take()
        if t.kind == "STRING":
            return self.node(Const(STRING, unquote(t.text)), t)
        if t.kind == "DECIMAL":
            digits = t.text[:-1] if t.text[-1] in "lL" else t.text
            value = int(digits)
            if value > LONG_MAX:
                self.fail(f"{t.text} is out of the range of a long", t)
            return self.node(Const(INT if value <= INT_MAX else LONG, value), t)
        if t.kind == "FLOAT":
            f = float(t.text)
            if math.isinf(f):
                self.fail(f"{t.text} is greater than Double.MAX_VALUE", t)
            if f < DOUBLE_MIN_VALUE:
                self.fail(f"{t.text} is less than Double.MIN_VALUE (RocketMQ refuses 0.0 and underflows)", t)
            return self.node(Const(DOUBLE, f), t)
        if t.kind in ("TRUE", "FALSE", "NULL"):
            return self.node({"TRUE": TRUE, "FALSE": FALSE, "NULL": NULL}[t.kind], t)
        if t.kind == "ID":
            return self.node(Prop(t.text), t)
        if t.kind == "OP" and t.text == "(":
            inner = self.or_expr()
            self.expect("OP", ")")
            return inner
        self.fail("expected a literal, a property or '('", t)
        raise AssertionError  # unreachable


def unquote(text: str) -> str:
    return text[1:-1].replace("''", "'")


def describe(n: Node) -> str:
    """A short text of a node for error messages."""
    if isinstance(n, Const):
        if n.kind is None:
            return "NULL"
        if n.kind == BOOLEAN:
            return "TRUE" if n.value else "FALSE"
        if n.kind == STRING:
            return "'" + str(n.value).replace("'", "''") + "'"
        return repr(n.value)
    if isinstance(n, Prop):
        return n.name
    return type(n).__name__.upper()


def chain(node: And | Or) -> tuple[Node, list[Node]]:
    """A left-deep chain of one operator as its operands: ``((a AND b) AND c)`` -> a, [b, c]."""
    rest: list[Node] = []
    n: Node = node
    while type(n) is type(node):
        assert isinstance(n, And | Or)
        rest.append(n.right)
        n = n.left
    return n, rest[::-1]


# ------------------------------------------------------------------ scalar evaluation


def as_value(c: Const) -> Value:
    return None if c.kind is None else (c.kind, c.value)


def evaluate(node: Node, props: dict[str, str]) -> Value:
    """The value of ``node`` for one message's properties, as Java computes it; raises
    :class:`EvaluationError` where Java throws (the message then does not match)."""
    if isinstance(node, Const):
        return as_value(node)
    if isinstance(node, Prop):
        text = props.get(node.name)
        return None if text is None else (STRING, text)
    if isinstance(node, Negate):
        v = evaluate(node.operand, props)
        if v is None or v[0] not in NUMERIC:
            return None
        return (v[0], -v[1])  # type: ignore[operator]
    if isinstance(node, Not):
        v = evaluate(node.operand, props)
        return None if v is None else (BOOLEAN, not v[1])
    if isinstance(node, BoolCast):
        v = evaluate(node.operand, props)
        return None if v is None else (BOOLEAN, v[0] == BOOLEAN and bool(v[1]))
    if isinstance(node, In):
        v = evaluate(node.operand, props)
        return None if v is None else (BOOLEAN, (v[1] in node.values) != node.negated)
    if isinstance(node, And | Or):
        decisive = isinstance(node, Or)  # the value that decides without the other side
        first, rest = chain(node)
        acc = evaluate(first, props)
        for right in rest:  # ((a AND b) AND c): Java's nested calls, in order
            if acc is not None and acc[1] is decisive:
                return (BOOLEAN, decisive)
            rv = evaluate(right, props)
            if rv is not None and rv[1] is decisive:
                acc = (BOOLEAN, decisive)
            else:
                acc = None if acc is None or rv is None else (BOOLEAN, not decisive)
        return acc
    assert isinstance(node, Compare)
    if node.op == "=":
        lv, rv = evaluate(node.left, props), evaluate(node.right, props)
        if (lv is None) != (rv is None):
            return None if lv is None else (BOOLEAN, False)
        if lv is None or rv is None:
            return (BOOLEAN, True)
        return (BOOLEAN, java_equals(lv, rv) or java_compare(lv, rv) == 0)
    lv = evaluate(node.left, props)
    if lv is None:
        return None
    rv = evaluate(node.right, props)
    if rv is None:
        return None
    if lv[0] == STRING and rv[0] == STRING:
        c = cmp(double_key(java_double(str(lv[1]))), double_key(java_double(str(rv[1]))))
    else:
        c = java_compare(lv, rv)
    return (BOOLEAN, {">": c > 0, ">=": c >= 0, "<": c < 0, "<=": c <= 0}[node.op])


def matches(node: Node, props: dict[str, str]) -> bool:
    """Whether a message with these properties passes (``ExpressionMessageFilter``: TRUE only;
    null, FALSE or a throw do not)."""
    try:
        v = evaluate(node, props)
    except EvaluationError:
        return False
    return v is not None and v[0] == BOOLEAN and v[1] is True
