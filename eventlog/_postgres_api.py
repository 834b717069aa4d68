"""``postgres_checkpointer``: the entry point of the PostgreSQL backend.

Its arguments are checked here, before psycopg is imported: ``import liteagent.eventlog``
never needs the ``postgres`` extra, and a missing extra is a clear :class:`CheckpointerError`
when the backend is asked for.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal

from ._codec import Codec, check_codec
from ._errors import CheckpointerError, InvalidArgumentError
from ._shown import shown

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

    from ._contract import Checkpointer

__all__ = ["SCHEMA_PATTERN", "check_schema_name", "postgres_checkpointer"]

Durability = Literal["normal", "full"]

SCHEMA_PATTERN = r"[a-z_][a-z0-9_]{0,62}"
_SCHEMA = re.compile(SCHEMA_PATTERN)


def check_schema_name(schema: object) -> str:
    """``schema`` if it is a plain lower-case identifier, else :class:`InvalidArgumentError`."""
    if type(schema) is not str or _SCHEMA.fullmatch(schema) is None or schema.startswith("pg_"):
        raise InvalidArgumentError(
            f"schema must be a lower-case identifier matching {SCHEMA_PATTERN} (not pg_*), "
            f"got {shown(schema)}"
        )
    return schema


def _seconds(name: str, value: object, top: float) -> float:
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not 0 < value <= top  # NaN fails it; no float() of a huge int
    ):
        raise InvalidArgumentError(
            f"{name} must be a number of seconds in (0, {top}], got {shown(value)}"
        )
    return float(value)


def _flag(name: str, value: object) -> bool:
    if type(value) is not bool:
        raise InvalidArgumentError(f"{name} must be a bool, got {shown(value)}")
    return value


def postgres_checkpointer(
    target: str | ConnectionPool[Any],
    *,
    schema: str = "liteagent",
    durability: Durability = "full",
    codec: Codec | None = None,
    notify: bool = True,
    pgbouncer: bool = False,
    listen_dsn: str | None = None,
    max_connections: int = 8,
    retry_timeout: float = 30.0,
    poll_interval: float = 0.25,
) -> Checkpointer:
    """Return a checkpointer on a PostgreSQL database, shared by processes on many hosts.

    ``target`` is a libpq connection string or URI (``"host=db dbname=app"``,
    ``"postgresql://user@db/app"``) or a ``psycopg_pool.ConnectionPool`` of your own (it is not
    closed by :meth:`~Checkpointer.close`; its connections get this checkpointer's settings,
    timeouts and durability, when it first uses them). Needs the ``postgres`` extra (``pip install
    'liteagent[postgres]'``: psycopg 3 and psycopg_pool).

    - ``schema``: the schema holding the store's tables (created under an advisory lock on
      open; one store per schema); a schema of another version (a newer liteagent's, or an
      older one written before the first release) is refused with :class:`SchemaVersionError`.
    - ``durability``: ``"full"`` (the server's ``synchronous_commit = on``: an append that
      returned survives a crash of the server) or ``"normal"`` (``synchronous_commit = off``:
      it survives a crash of the client; a server crash may lose the last fraction of a
      second of commits, never their consistency).
    - ``codec``: transforms every stored event body and blob (e.g. :func:`zlib_codec`).
    - ``notify``: writes send ``pg_notify`` so that :meth:`~Checkpointer.follow` wakes at once;
      without it followers poll their position every ``poll_interval`` seconds.
    - ``pgbouncer``: for PgBouncer in transaction mode (no prepared statements, no session
      settings, leases without the connection check); ``listen_dsn`` then names a direct
      connection for ``follow``'s LISTEN (without one, followers poll).
    - ``max_connections``: the size of the pool this checkpointer opens.
    - ``retry_timeout``: how long an operation retries lost connections and transient errors
      (serialization failures, lock timeouts) before it raises :class:`StorageIOError`.
    """
    given: object = target
    if isinstance(given, str):
        if not given or "\x00" in given:
            raise InvalidArgumentError(
                f"the DSN must be a non-empty str without NUL, got {shown(target)}"
            )
    elif not _is_pool(given):
        raise InvalidArgumentError(
            f"target must be a DSN str or a psycopg_pool.ConnectionPool, got {shown(target)}"
        )
    schema = check_schema_name(schema)
    mode: object = durability
    if type(mode) is not str or mode not in ("normal", "full"):
        raise InvalidArgumentError(
            f"durability must be 'normal' or 'full', got {shown(durability)}"
        )
    codec = check_codec(codec)
    notify = _flag("notify", notify)
    pgbouncer = _flag("pgbouncer", pgbouncer)
    if listen_dsn is not None and (
        type(listen_dsn) is not str or not listen_dsn or "\x00" in listen_dsn
    ):
        raise InvalidArgumentError(
            f"listen_dsn must be None or a non-empty str without NUL, got {shown(listen_dsn)}"
        )
    if type(max_connections) is not int or not 1 <= max_connections <= 1000:
        raise InvalidArgumentError(
            f"max_connections must be an int in 1..1000, got {shown(max_connections)}"
        )
    retry_timeout = _seconds("retry_timeout", retry_timeout, 3600.0)
    poll_interval = _seconds("poll_interval", poll_interval, 60.0)
    # LISTEN needs a direct connection: behind PgBouncer without one, followers poll.
    notify_listen = False if pgbouncer and listen_dsn is None else notify
    try:
        from ._postgres import PostgresCheckpointer  # noqa: PLC0415 -- the optional extra
    except ImportError as e:
        raise CheckpointerError(
            "postgres_checkpointer needs the postgres extra: pip install 'liteagent[postgres]' "
            f"({e})"
        ) from e
    return PostgresCheckpointer(
        target,
        schema=schema,
        durability=durability,
        codec=codec,
        notify=notify_listen,
        pgbouncer=pgbouncer,
        listen_dsn=listen_dsn,
        max_connections=max_connections,
        retry_timeout=retry_timeout,
        poll_interval=poll_interval,
    )


def _is_pool(value: object) -> bool:
    """Whether ``value`` is a ``psycopg_pool.ConnectionPool`` (a subclass too). psycopg_pool is
    imported only when the value's class comes from it: this module imports without it."""
    if not any(c.__module__.startswith("psycopg_pool") for c in type(value).__mro__):
        return False
    from psycopg_pool import ConnectionPool  # noqa: PLC0415 -- the optional extra

    return isinstance(value, ConnectionPool)
