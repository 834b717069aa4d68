"""The fake server's state: the scripted answers, the request log, and the routing rules.

No sockets here; :class:`Script` is thread-safe and the HTTP handler calls
:meth:`Script.record` then :meth:`Script.answer` for every request.

Routing:

- ``POST /v1/messages`` takes the next scripted response, first in first out. With nothing
  scripted the answer is a 500 whose message says the script was empty, with
  ``x-should-retry: false`` so the SDK fails at once instead of retrying. A
  :class:`StreamResponse` reached by a request without ``"stream": true`` gets a 500 saying so.
  A request the real API refuses whatever it holds gets its 400 ``invalid_request_error``,
  and the script is not consumed: messages holding ``tool_use`` or ``tool_result`` blocks
  without ``tools``, two ``tool_use`` blocks with one id, a ``tool_use`` id the API's
  pattern refuses.
- ``POST /v1/messages/count_tokens`` takes the next answer from its own queue; unscripted, it
  counts ``len(json.dumps(body)) // 4``. A request carrying ``context_management`` (the beta
  form with edits) also gets ``context_management.original_input_tokens``.
- Anything else is a 404 ``not_found_error`` (``x-should-retry: false``).
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from liteagent.eventlog.errors import InvalidArgumentError

from ._failures import error_response
from ._responses import JSONResponse, MessageResponse, Response, StreamResponse

__all__ = ["COUNT_TOKENS_PATH", "MESSAGES_PATH", "RecordedRequest", "Script"]

MESSAGES_PATH = "/v1/messages"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"

_Count = tuple[int, int | None] | JSONResponse


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it.

    ``headers`` has lower-cased names (repeated headers joined with ``", "``); ``body`` is the
    parsed JSON (``None`` when the body was empty or not JSON; ``raw_body`` has the bytes);
    ``time`` is ``time.monotonic()`` at arrival; ``request_id`` is the ``request-id`` header
    the answer carried.
    """

    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    body: Any
    time: float
    request_id: str
    raw_body: bytes = field(default=b"", repr=False)

    @property
    def stream(self) -> bool:
        """Whether the body asked for a stream (``"stream": true``)."""
        return isinstance(self.body, dict) and self.body.get("stream") is True

    @property
    def retry_count(self) -> int | None:
        """The SDK's attempt index from ``x-stainless-retry-count`` (``None`` if absent)."""
        value = self.headers.get("x-stainless-retry-count")
        return int(value) if value is not None and value.isdigit() else None


class Script:
    """The queues of scripted answers and the log of requests, behind one lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._messages: deque[Response] = deque()
        self._counts: deque[_Count] = deque()
        self._requests: list[RecordedRequest] = []
        self._ids = itertools.count(1)

    def add(self, responses: Iterable[Response | Mapping[str, Any]]) -> None:
        """Queue answers for ``/v1/messages``; a mapping is a message (anything else:
        ``InvalidArgumentError``)."""
        queued: list[Response] = []
        for response in responses:
            if isinstance(response, MessageResponse | StreamResponse | JSONResponse):
                queued.append(response)
            elif isinstance(response, Mapping):
                queued.append(MessageResponse(dict(response)))
            else:
                raise InvalidArgumentError(f"cannot script {type(response).__name__}: {response!r}")
        with self._lock:
            self._messages.extend(queued)

    def add_count(self, input_tokens: int | JSONResponse, original: int | None) -> None:
        """Queue one answer for ``/v1/messages/count_tokens``."""
        item: _Count = (
            input_tokens if isinstance(input_tokens, JSONResponse) else (input_tokens, original)
        )
        with self._lock:
            self._counts.append(item)

    @property
    def pending(self) -> int:
        """How many scripted ``/v1/messages`` answers are left."""
        with self._lock:
            return len(self._messages)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of the request log, oldest first."""
        with self._lock:
            return list(self._requests)

    def record(
        self, method: str, target: str, headers: Iterable[tuple[str, str]], raw: bytes
    ) -> RecordedRequest:
        """Log a request (``target`` is the path with its query) and give it a request id."""
        path, _, query = target.partition("?")
        lowered: dict[str, str] = {}
        for name, value in headers:
            key = name.lower()
            lowered[key] = f"{lowered[key]}, {value}" if key in lowered else value
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        with self._lock:
            request = RecordedRequest(
                method=method,
                path=path,
                query=query,
                headers=MappingProxyType(lowered),
                body=body,
                time=time.monotonic(),
                request_id=f"req_fake_{next(self._ids):04d}",
                raw_body=raw,
            )
            self._requests.append(request)
        return request

    def answer(self, request: RecordedRequest) -> Response:
        """The response for ``request``: the next scripted one, a default, or a loud error."""
        route = (request.method, request.path)
        if route == ("POST", MESSAGES_PATH):
            refusal = _refused(request)
            if refusal is not None:
                return refusal  # as the API does: the script is not consumed
            with self._lock:
                scripted = self._messages.popleft() if self._messages else None
            if scripted is None:
                return error_response(
                    500,
                    "api_error",
                    "FakeMessagesServer: the script was empty: nothing was scripted for this "
                    "POST /v1/messages (queue responses with server.add(...))",
                    should_retry=False,
                )
            if isinstance(scripted, StreamResponse) and not request.stream:
                return error_response(
                    500,
                    "api_error",
                    "FakeMessagesServer: a stream was scripted, but this request did not ask "
                    'for one ("stream": true)',
                    should_retry=False,
                )
            return scripted
        if route == ("POST", COUNT_TOKENS_PATH):
            with self._lock:
                counted = self._counts.popleft() if self._counts else None
            return _count_tokens(request, counted)
        return error_response(
            404,
            "not_found_error",
            f"FakeMessagesServer: no route for {request.method} {request.path}",
            should_retry=False,
        )


def _refused(request: RecordedRequest) -> JSONResponse | None:
    """The 400 the Messages API answers a request it refuses whatever was scripted: one whose
    messages hold ``tool_use`` or ``tool_result`` blocks without defining ``tools``, two
    ``tool_use`` blocks with one id, or a ``tool_use`` id of other characters than letters,
    digits, ``_`` and ``-``."""
    body = request.body
    if not isinstance(body, dict):
        return None
    seen: set[str] = set()
    for i, message in enumerate(body.get("messages") or ()):
        content = message.get("content") if isinstance(message, dict) else None
        for j, b in enumerate(content if isinstance(content, list) else ()):
            kind = b.get("type") if isinstance(b, dict) else None
            if kind in ("tool_use", "tool_result") and not body.get("tools"):
                return _invalid(
                    "Requests which include `tool_use` or `tool_result` blocks must define tools."
                )
            if kind != "tool_use":
                continue
            ident = b.get("id")
            if not isinstance(ident, str) or not _TOOL_ID.fullmatch(ident):
                return _invalid(
                    f"messages.{i}.content.{j}.tool_use.id: String should match pattern "
                    "'^[a-zA-Z0-9_-]+$'"
                )
            if ident in seen:
                return _invalid(f"messages.{i}.content.{j}: `tool_use` ids must be unique")
            seen.add(ident)
    return None


_TOOL_ID = re.compile(r"[a-zA-Z0-9_-]+")


def _invalid(message: str) -> JSONResponse:
    return error_response(400, "invalid_request_error", message, should_retry=False)


def _count_tokens(request: RecordedRequest, scripted: _Count | None) -> JSONResponse:
    """The count_tokens answer: scripted, or estimated from the request body."""
    if isinstance(scripted, JSONResponse):
        return scripted
    if scripted is None:
        source = json.dumps(request.body) if request.body is not None else request.raw_body
        tokens, original = len(source) // 4, None
    else:
        tokens, original = scripted
    body: dict[str, Any] = {"input_tokens": tokens}
    asked = isinstance(request.body, dict) and "context_management" in request.body
    if original is not None or asked:
        body["context_management"] = {
            "original_input_tokens": original if original is not None else tokens
        }
    return JSONResponse(body)
