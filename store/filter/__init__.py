"""Message filters evaluated by the store: RocketMQ's SQL92 property selector
(:mod:`rmqlog.filter.sql92` the grammar and the scalar reference,
:mod:`rmqlog.filter.vectorized` its evaluation over whole Arrow columns)."""

from .sql92 import FilterParseError, parse
from .vectorized import Sql92Filter, compile_filter

__all__ = ["FilterParseError", "Sql92Filter", "compile_filter", "parse"]
