"""Statements compiled once per process, for hot read paths (issue 36).

Building a queryset and compiling it to SQL cost more than PostgreSQL takes to answer the small
queries of ``GET /api/v1/tenants/`` and a tenant's quotas. ``prepared_rows`` remembers, per
``key``, the SQL that ``build()`` compiles to and the converters of its columns; later calls send
only their parameters. The key must name everything that changes the statement's text (the
caller's role, a filter that is on or off); the parameters are everything else. A statement is
remembered only when its compiled parameters are exactly ``params``, in order, so a value the
key does not cover can never be reused by mistake: such a statement runs through the ORM every
time, with the same answer."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import Model, QuerySet
from django.db.models.query import ModelIterable, get_related_populators  # type: ignore[attr-defined]
from django.db.models.sql import UpdateQuery

MAX_STATEMENTS = 512  # bounded: keys may name a caller


@dataclass(frozen=True)
class _Statement:
    sql: str
    names: tuple[str, ...] | None  # column names of a values() queryset; None: tuples
    converters: list[tuple[int, tuple[list[Any], Any]]]


@dataclass(frozen=True)
class _Objects:
    """A model-instance statement: its SQL and what ``ModelIterable`` makes of its rows (the
    compiler only converts them; it is not compiled again)."""

    sql: str
    compiler: Any
    model: type[Model]
    fields: tuple[int, int]  # the model's own columns: start, end
    init_list: list[str]
    populators: list[Any]  # select_related's
    annotations: dict[str, int]


_STATEMENTS: dict[tuple[str, Hashable], _Statement | _Objects | str | None] = {}


def _compile(qs: QuerySet[Any, Any], params: tuple[Any, ...]) -> _Statement | None:
    query = qs.query
    if query.low_mark or query.high_mark is not None:
        return None  # slices are the caller's: limit and offset
    compiler = query.get_compiler(qs.db)
    sql, compiled = compiler.as_sql()
    if tuple(compiled) != params or compiler.has_composite_fields(
        [s[0] for s in compiler.select[: compiler.col_count]]
    ):
        return None
    fields = [s[0] for s in compiler.select[: compiler.col_count]]
    names = None
    if qs._iterable_class.__name__ == "ValuesIterable":
        names = (*query.extra_select, *query.values_select, *query.annotation_select)
    elif qs._iterable_class.__name__ != "ValuesListIterable":
        return None  # model instances and flat lists: not prepared
    return _Statement(sql, names, list(compiler.get_converters(fields).items()))


def prepared_rows(
    key: Hashable,
    build: Callable[[], QuerySet[Any, Any]],
    params: Sequence[Any] = (),
    *,
    limit: int | None = None,
    offset: int = 0,
) -> list[Any]:
    """The rows of ``build()`` (a ``values()`` queryset: dicts; ``values_list()``: tuples),
    ``offset`` and ``limit`` applied, without building or compiling it again once ``key`` was
    seen on this connection's vendor."""
    params = tuple(params)
    connection = connections[DEFAULT_DB_ALIAS]
    full_key = (connection.vendor, key)
    if full_key not in _STATEMENTS:
        if len(_STATEMENTS) >= MAX_STATEMENTS:
            del _STATEMENTS[next(iter(_STATEMENTS))]
        _STATEMENTS[full_key] = _compile(build(), params)
    statement = _STATEMENTS[full_key]
    if not isinstance(statement, _Statement):
        qs = build()
        return list(qs[offset : offset + limit] if limit is not None else qs[offset:])
    sql = statement.sql
    if limit is not None:
        sql, params = f"{sql} LIMIT %s OFFSET %s", (*params, limit, offset)
    elif offset:
        sql, params = f"{sql} OFFSET %s", (*params, offset)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows: list[Any] = cursor.fetchall()
    if statement.converters:
        rows = [_converted(row, statement.converters, connection) for row in rows]
    if statement.names is None:
        return [tuple(row) for row in rows]
    names = statement.names
    return [dict(zip(names, row, strict=True)) for row in rows]


def _converted(row: Sequence[Any], converters: list[Any], connection: Any) -> list[Any]:
    """What the ORM's compiler does to a row (``SQLCompiler.apply_converters``)."""
    values = list(row)
    for pos, (convs, expression) in converters:
        value = values[pos]
        for converter in convs:
            value = converter(value, expression, connection)
        values[pos] = value
    return values


def _compile_objects(qs: QuerySet[Any, Any], params: tuple[Any, ...]) -> _Objects | None:
    """``qs`` compiled once, or None where it cannot be reused as it is: other than model
    instances, with prefetches or known related objects, or compiled parameters that are
    not exactly ``params``."""
    if (
        qs._iterable_class is not ModelIterable
        or getattr(qs, "_prefetch_related_lookups", None)
        or getattr(qs, "_known_related_objects", None)
        or qs.db != DEFAULT_DB_ALIAS
    ):
        return None
    compiler = qs.query.get_compiler(qs.db)
    sql, compiled = compiler.as_sql()
    fields = [s[0] for s in compiler.select[: compiler.col_count]]
    if tuple(compiled) != params or compiler.has_composite_fields(fields):
        return None
    klass_info, select = compiler.klass_info, compiler.select
    start, end = klass_info["select_fields"][0], klass_info["select_fields"][-1] + 1
    return _Objects(
        sql=sql,
        compiler=compiler,
        model=klass_info["model"],
        fields=(start, end),
        init_list=[f[0].target.attname for f in select[start:end]],
        populators=get_related_populators(klass_info, select, qs.db),
        annotations=dict(compiler.annotation_col_map or {}),
    )


def prepared_objects(
    key: Hashable, build: Callable[[], QuerySet[Any, Any]], params: Sequence[Any] = ()
) -> list[Any]:
    """The model instances of ``build()`` (with its ``select_related`` objects and
    annotations), as iterating it gives them, without building or compiling it again once
    ``key`` was seen: the same contract as ``prepared_rows`` (the key names everything that
    changes the statement's text; ``params`` are its compiled parameters, in order). A
    statement that locks rows must run inside the caller's transaction, as through the ORM."""
    params = tuple(params)
    connection = connections[DEFAULT_DB_ALIAS]
    full_key = (connection.vendor, ("objects", key))
    if full_key not in _STATEMENTS:
        if len(_STATEMENTS) >= MAX_STATEMENTS:
            del _STATEMENTS[next(iter(_STATEMENTS))]
        _STATEMENTS[full_key] = _compile_objects(build(), params)
    statement = _STATEMENTS[full_key]
    if not isinstance(statement, _Objects):
        return list(build())
    with connection.cursor() as cursor:
        cursor.execute(statement.sql, params)
        rows = cursor.fetchall()
    start, end = statement.fields
    found = []
    for row in statement.compiler.results_iter([rows]):
        obj = statement.model.from_db(DEFAULT_DB_ALIAS, statement.init_list, row[start:end])
        for populator in statement.populators:
            populator.populate(row, obj)
        for name, pos in statement.annotations.items():
            setattr(obj, name, row[pos])
        found.append(obj)
    return found


def _compile_update(
    qs: QuerySet[Any, Any], values: dict[str, Any], params: tuple[Any, ...]
) -> str | None:
    """``qs.update(**values)``'s SQL, or None where it cannot be reused as it is: another
    database, a parent model's rows too, or compiled parameters that are not ``params``."""
    if qs.db != DEFAULT_DB_ALIAS or qs.query.is_sliced:
        return None
    query = cast("UpdateQuery", qs.query.chain(UpdateQuery))
    query.add_update_values(values)
    query.clear_select_clause()
    if query.related_updates:
        return None
    sql, compiled = query.get_compiler(qs.db).as_sql()
    return sql if tuple(compiled) == params else None


def prepared_update(
    key: Hashable,
    build: Callable[[], tuple[QuerySet[Any, Any], dict[str, Any]]],
    params: Sequence[Any],
) -> int:
    """``qs.update(**values)`` for ``(qs, values) = build()``, the number of rows it changed,
    without building or compiling it again once ``key`` was seen: the contract of
    ``prepared_rows`` (``params``: the statement's compiled parameters, in order)."""
    params = tuple(params)
    connection = connections[DEFAULT_DB_ALIAS]
    full_key = (connection.vendor, ("update", key))
    if full_key not in _STATEMENTS:
        if len(_STATEMENTS) >= MAX_STATEMENTS:
            del _STATEMENTS[next(iter(_STATEMENTS))]
        _STATEMENTS[full_key] = _compile_update(*build(), params)
    sql = _STATEMENTS[full_key]
    if not isinstance(sql, str):
        qs, values = build()
        return int(qs.update(**values))
    with (
        transaction.mark_for_rollback_on_error(using=DEFAULT_DB_ALIAS),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql, params)
        return int(cursor.rowcount)
