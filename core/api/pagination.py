from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from django.db.models import Count, IntegerField, QuerySet, Subquery, Value, Window
from django.db.models.functions import Coalesce
from rest_framework.exceptions import NotFound
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

from core.errors import ValidationFailed
from core.numbers import MAX_DIGITS, ascii_whole
from core.prepared import prepared_rows


class PagePagination(PageNumberPagination):
    """Pages of 50 (``page_size`` above 200 is capped at 200). A page or size that is not a
    positive whole number is a 400 naming the parameter; a page past the end is a 404."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200

    def _check_params(self, request: Request) -> None:
        for name in (self.page_query_param, self.page_size_query_param):
            raw = request.query_params.get(name)
            if raw is None:
                continue
            number = ascii_whole(raw)
            if number is None or number < 1:
                raise ValidationFailed.for_field(
                    name,
                    f"{name} must be a whole number of 1 or more "
                    f"(digits 0-9, at most {MAX_DIGITS} of them).",
                )

    def paginate_queryset(
        self, queryset: Any, request: Request, view: Any = None
    ) -> list[Any] | None:
        self._check_params(request)
        return super().paginate_queryset(queryset, request, view)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            parameter["schema"]["minimum"] = 1
            if parameter["name"] == self.page_size_query_param:
                parameter["description"] = (
                    f"Results per page, at most {self.max_page_size} (larger values are capped)."
                )
        return parameters


TOTAL = "page_total_count"
MAX_OFFSET = 2**63 - 1


WINDOW_COUNT_MAX = 2000  # above this many rows a separate COUNT(*) costs less than the window
_LARGE_LISTS: dict[tuple[str, object], bool] = {}  # (view, caller): its list was long last time


def _count_of(queryset: QuerySet[Any, Any]) -> QuerySet[Any, Any]:
    """``SELECT COUNT(*)`` of ``queryset``'s rows, as a subquery (its order and columns left)."""
    one = Value(1, output_field=IntegerField())
    return queryset.order_by().values(one=one).annotate(n=Count("pk")).values("n")


class WindowCountPagination(PagePagination):
    """The same pages and response as ``PagePagination``, in one query instead of two: the
    total comes from ``COUNT(*) OVER ()`` on the page's own rows. For hot list endpoints.

    The window makes PostgreSQL build every row of the list (its subqueries included) to count
    them; past ``WINDOW_COUNT_MAX`` rows (10,000 tenants) a count of its own, a scalar subquery
    PostgreSQL runs once, and a page that builds only its own rows cost less. Which way a
    caller's list goes is remembered from its last total (per view and caller, so an admin's
    10,000 tenants and a lead's 3 each take theirs): one query either way, the same answer,
    only the cost differs."""

    def paginate_queryset(
        self, queryset: QuerySet[Any, Any], request: Request, view: Any = None
    ) -> list[Any]:
        return self.paginate_prepared(lambda: queryset, request, view)

    def paginate_prepared(
        self,
        build: Callable[[], QuerySet[Any, Any]],
        request: Request,
        view: Any = None,
        *,
        statement: Hashable = None,
        params: Sequence[Any] = (),
    ) -> list[Any]:
        """``paginate_queryset`` of the queryset ``build()`` returns. With a ``statement`` key
        (see ``core.prepared``: it names everything that changes the SQL, ``params`` the rest)
        the page's statement is compiled once per process instead of on every request."""
        self._check_params(request)
        self._request = request
        size = self.get_page_size(request) or self.page_size
        raw = request.query_params.get(self.page_query_param, "1")
        number = ascii_whole(raw) or 0
        if number < 1:
            raise NotFound("Invalid page.")
        offset = (number - 1) * size
        if offset + size > MAX_OFFSET:  # past any end; PostgreSQL's OFFSET is a bigint
            raise NotFound("Invalid page.")
        key = (type(view).__name__, getattr(request.user, "pk", None))
        large = bool(_LARGE_LISTS.get(key))

        def counted() -> QuerySet[Any, Any]:
            queryset = build()
            count: Any = Window(Count("pk"))
            if large:  # counted once, apart, in the same query
                count = Coalesce(Subquery(_count_of(queryset)), 0)
            return queryset.annotate(**{TOTAL: count})

        if statement is None:
            rows = list(counted()[offset : offset + size])
        else:
            rows = prepared_rows((statement, large), counted, params, limit=size, offset=offset)
        first = rows[0] if rows else None
        total = (
            0
            if first is None
            else first[TOTAL]
            if isinstance(first, dict)
            else getattr(first, TOTAL)
        )
        if not rows and number > 1:
            raise NotFound("Invalid page.")
        if total > WINDOW_COUNT_MAX or key in _LARGE_LISTS:
            if len(_LARGE_LISTS) >= 4096:  # bounded: forget the oldest callers
                del _LARGE_LISTS[next(iter(_LARGE_LISTS))]
            _LARGE_LISTS[key] = total > WINDOW_COUNT_MAX // 2  # some slack against flapping
        self.number, self.size, self.total = number, size, total
        return rows

    def get_paginated_response(self, data: Any) -> Response:
        return Response(
            {
                "count": self.total,
                "next": self._link(self.number + 1)
                if self.number * self.size < self.total
                else None,
                "previous": self._link(self.number - 1) if self.number > 1 else None,
                "results": data,
            }
        )

    def _link(self, number: int) -> str:
        url = self._request.build_absolute_uri()
        if number == 1:
            return remove_query_param(url, self.page_query_param)
        return replace_query_param(url, self.page_query_param, number)
