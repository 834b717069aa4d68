"""The PostgreSQL backend under faults: a connection cut after the server ran a statement (or
before it got it), backends killed with ``pg_terminate_backend`` while appends, truncates and
followers run, and the server itself restarted. Nothing acknowledged is lost, nothing is
duplicated, a follower delivers every event exactly once and in order."""

# ruff: noqa: S608 -- the SQL names the tests' own throwaway schemas

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

pytest.importorskip("psycopg", reason="the postgres extra (psycopg) is not installed")

import psycopg
from _pg_proxy import CutProxy
from _postgres_server import Server, start_server
from structlog.testing import capture_logs

from liteagent.eventlog import Checkpointer, StoredEvent, _postgres_lease, postgres_checkpointer
from liteagent.eventlog.conformance import prompts, texts
from liteagent.eventlog.errors import CheckpointConflictError, SessionLeasedError

_WAIT = 60.0


@pytest.fixture
def schema(postgres_server: Server) -> Iterator[str]:
    """A fresh schema, dropped afterwards."""
    name = "f_" + uuid.uuid4().hex[:16]
    yield name
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def proxy(postgres_server: Server) -> Iterator[CutProxy]:
    """A proxy in front of the server that can cut a connection."""
    p = CutProxy(postgres_server.dsn)
    yield p
    p.close()


def _count(dsn: str, schema: str, sid: str, text: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            f'SELECT count(*) FROM "{schema}".events'
            " WHERE session_id = %s AND position(%s in body) > 0",
            (sid, text.encode()),
        ).fetchone()
    assert row is not None
    return int(row[0])


def _until(check: object, what: str) -> None:
    deadline = time.monotonic() + _WAIT
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


# -- exactly once across a lost connection ------------------------------------------------------


@pytest.mark.parametrize("expected", [True, False], ids=["expected_head", "blind"])
def test_append_whose_answer_was_lost_is_not_repeated(
    postgres_server: Server, proxy: CutProxy, schema: str, expected: bool
) -> None:
    """The server committed the append, the connection died before the answer came back:
    the retry finds its batch id and returns that head; the event is stored once."""
    dsn = postgres_server.dsn
    with postgres_checkpointer(proxy.dsn, schema=schema) as cp:
        assert 1 == cp.append("s", prompts("before"))
        proxy.cut_on(
            b"CUT-after",
            "after",
            lambda: _until(lambda: _count(dsn, schema, "s", "CUT-after") == 1, "the commit"),
        )
        head = cp.append("s", prompts("CUT-after"), expected_head=1 if expected else None)
        assert (1, 2) == (proxy.cuts, head)
        assert ["before", "CUT-after"] == texts(cp.read("s"))
        assert 3 == cp.append("s", prompts("next"), expected_head=2)


def test_append_cut_before_it_reached_the_server_is_written_once(
    proxy: CutProxy, schema: str
) -> None:
    """The connection died before the statement reached the server: the retry writes it."""
    with postgres_checkpointer(proxy.dsn, schema=schema) as cp:
        cp.append("s", prompts("before"))
        proxy.cut_on(b"CUT-before", "before")
        assert 2 == cp.append("s", prompts("CUT-before"), expected_head=1)
        assert 1 == proxy.cuts
        assert ["before", "CUT-before"] == texts(cp.read("s"))


def test_truncate_whose_commit_answer_was_lost_is_applied_once(
    postgres_server: Server, proxy: CutProxy, schema: str
) -> None:
    """The server committed the truncate, the answer to COMMIT was lost: the retry finds the
    truncate's id in the session's record and does not truncate again (one new generation)."""
    dsn = postgres_server.dsn
    with postgres_checkpointer(proxy.dsn, schema=schema) as cp:
        cp.append("s", prompts("a", "b", "c"))
        before = cp.position("s").generation

        def truncated() -> bool:
            with psycopg.connect(dsn, autocommit=True) as conn:
                row = conn.execute(
                    f'SELECT head FROM "{schema}".sessions WHERE id = %s',
                    ("s",),
                ).fetchone()
            return row is not None and row[0] == 1

        proxy.cut_on(b"COMMIT", "after", lambda: _until(truncated, "the truncate's commit"))
        assert 1 == cp.truncate("s", 1, expected_head=3)
        assert 1 == proxy.cuts
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(f'SELECT last_value FROM "{schema}".generations').fetchone()
        assert row is not None
        assert (1, row[0]) == tuple(cp.position("s"))
        assert row[0] > before
        assert ["a"] == texts(cp.read("s"))


def test_a_delete_whose_commit_answer_was_lost_spares_the_session_created_since(
    postgres_server: Server, proxy: CutProxy, schema: str
) -> None:
    """The server committed a delete, the answer was lost, and before the retry another writer
    created the session again (acknowledged): the retry finds its id and deletes nothing more
    (it used to delete the new session)."""
    with (
        postgres_checkpointer(proxy.dsn, schema=schema) as deleter,
        postgres_checkpointer(postgres_server.dsn, schema=schema) as other,
    ):
        deleter.append("s", prompts("old 1", "old 2"))
        acked: list[int] = []

        def recreate() -> None:
            _until(lambda: other.position("s").generation == 0, "the delete's commit")
            acked.append(other.append("s", prompts("new 1", "new 2", "new 3")))

        proxy.cut_on(b"COMMIT", "after", recreate)
        deleter.delete("s")
        assert (1, [3]) == (proxy.cuts, acked)
        assert ["new 1", "new 2", "new 3"] == texts(other.read("s"))


@pytest.mark.parametrize("expected", [True, False], ids=["expected_head", "blind"])
def test_a_truncate_retried_after_other_writers_is_not_applied_again(
    postgres_server: Server, proxy: CutProxy, schema: str, expected: bool
) -> None:
    """The server committed a truncate, the answer was lost, and before the retry another writer
    truncated and appended (acknowledged): the retry finds its id in ``ops`` (the session's
    ``truncated_by`` holds the other truncate's) and truncates nothing more."""
    with (
        postgres_checkpointer(proxy.dsn, schema=schema) as cp,
        postgres_checkpointer(postgres_server.dsn, schema=schema) as other,
    ):
        cp.append("s", prompts("a", "b", "c", "d", "e"))
        acked: list[int] = []

        def move_on() -> None:
            _until(lambda: other.head("s") == 3, "the truncate's commit")
            other.truncate("s", 1)
            acked.append(other.append("s", prompts(*"BCDEF")))

        proxy.cut_on(b"COMMIT", "after", move_on)
        assert 3 == cp.truncate("s", 3, expected_head=5 if expected else None)
        assert (1, [6]) == (proxy.cuts, acked)
        assert ["a", *"BCDEF"] == texts(other.read("s"))


def test_a_first_append_delivered_late_does_not_bring_a_deleted_session_back(
    postgres_server: Server, proxy: CutProxy, schema: str
) -> None:
    """The first append of a new session is cut off and reaches the server only a second
    later; its retry commits meanwhile and the session is deleted: the late copy finds its try
    fenced and commits nothing (it used to create the session again)."""
    with (
        postgres_checkpointer(proxy.dsn, schema=schema) as cp,
        postgres_checkpointer(postgres_server.dsn, schema=schema) as other,
    ):
        cp.position("warm")  # a pooled connection through the proxy
        arrived = threading.Event()
        proxy.cut_on(b"INSERT INTO", "late", arrived.set, delay=1.0, linger=0.5)
        assert 1 == cp.append("s", prompts("hello"))
        assert 1 == proxy.cuts
        other.delete("s")
        assert arrived.wait(_WAIT)
        time.sleep(0.3)  # the late statement has run
        assert (0, 0) == tuple(other.position("s"))
        assert [] == list(other.read("s"))


def test_truncate_whose_commit_arrives_late_is_applied_once_and_reported_done(
    postgres_server: Server, proxy: CutProxy, schema: str
) -> None:
    """The client gave up on a truncate's COMMIT, which reached the server only later: the
    retry, waiting for the row lock the late try held, finds its own id and reports the
    truncate done (it used to raise a false CheckpointConflictError)."""
    with postgres_checkpointer(proxy.dsn, schema=schema) as cp:
        cp.append("s", prompts("a", "b", "c", "d", "e"))
        proxy.cut_on(b"COMMIT", "late", delay=0.3, linger=0.5)
        assert 2 == cp.truncate("s", 2, expected_head=5)
        assert 1 == proxy.cuts
        assert ["a", "b"] == texts(cp.read("s"))


def test_a_lease_whose_commit_answer_was_lost_is_held_by_its_acquirer(
    postgres_server: Server, proxy: CutProxy, schema: str
) -> None:
    """acquire_lease() whose COMMIT reached the server but whose answer was lost (the server's
    backend lingering): the retry takes the lease it took before instead of refusing it as
    another holder's, and nobody else can take it."""
    with (
        postgres_checkpointer(proxy.dsn, schema=schema) as cp,
        postgres_checkpointer(postgres_server.dsn, schema=schema) as other,
    ):
        proxy.cut_on(b"COMMIT", "late", linger=3.0)
        lease = cp.acquire_lease("s", owner="me", ttl=30)
        assert 1 == proxy.cuts
        holder = other.lease_holder("s")
        assert holder is not None
        assert (lease.info.owner, lease.info.token) == (holder.owner, holder.token)
        with pytest.raises(SessionLeasedError):
            other.acquire_lease("s")
        lease.release()
        other.acquire_lease("s").release()


def test_a_renewal_retried_after_a_release_does_not_revive_the_lease(
    postgres_server: Server, proxy: CutProxy, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A renewal cut off on the lease connection is retried after a pause (made 0.5 s here);
    a release in that pause takes the lease out first, so the retry leaves it released (it
    used to push its expiry forward again: the session stayed leased for the whole ttl)."""
    monkeypatch.setattr(_postgres_lease, "_FIRST_DELAY", 0.5)
    with (
        postgres_checkpointer(proxy.dsn, schema=schema) as cp,
        postgres_checkpointer(postgres_server.dsn, schema=schema) as other,
    ):
        lease = cp.acquire_lease("s", ttl=3.0)  # renewed every second
        proxy.cut_on(b"UPDATE", "before")
        _until(lambda: proxy.cuts == 1, "a renewal cut off")
        lease.release()
        assert other.lease_holder("s") is None
        time.sleep(1.0)  # the renewal's retry has run
        assert other.lease_holder("s") is None
        other.acquire_lease("s").release()


# -- backends killed mid-run ---------------------------------------------------------------------


class _Killer:
    """Terminates the server backends of one schema's checkpointers every ``every`` seconds."""

    def __init__(self, dsn: str, schema: str, every: float = 0.02) -> None:
        self._dsn, self._schema, self._every = dsn, schema, every
        self._stop = threading.Event()
        self.killed = 0
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        with psycopg.connect(self._dsn, autocommit=True) as conn:
            while not self._stop.wait(self._every):
                rows = conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name LIKE 'liteagent/%%' AND pid <> pg_backend_pid()"
                    " AND query LIKE %s",
                    (f"%{self._schema}%",),
                ).fetchall()
                self.killed += sum(1 for (ok,) in rows if ok)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(_WAIT)


def _follow_into(
    cp: Checkpointer, sid: str, n: int, out: list[StoredEvent], errors: list[BaseException]
) -> threading.Thread:
    def run() -> None:
        try:
            with cp.follow(sid) as f:
                while len(out) < n:
                    event = f.get(timeout=_WAIT)
                    assert event is not None, f"the follower stalled after {len(out)} events"
                    out.append(event)
        except BaseException as e:  # noqa: BLE001 -- reported by the test
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    return t


def test_backends_killed_during_appends_truncates_and_follows(
    postgres_server: Server, schema: str
) -> None:
    """With every backend of the store terminated every 20 ms, 200 appends and 20 truncates
    keep the log exactly as acknowledged, and a follower on another checkpointer delivers all
    200 events once, in order."""
    _killed_run(postgres_server.dsn, schema, 200)


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_backends_killed_soak(postgres_server: Server, schema: str) -> None:
    """The same with 5,000 appends and 500 truncates."""
    _killed_run(postgres_server.dsn, schema, 5000)


def _killed_run(dsn: str, schema: str, count: int) -> None:
    with (
        postgres_checkpointer(dsn, schema=schema) as writer,
        postgres_checkpointer(dsn, schema=schema) as reader,
    ):
        writer.append("trunc", prompts("seed"))
        got: list[StoredEvent] = []
        errors: list[BaseException] = []
        follower = _follow_into(reader, "log", count, got, errors)
        killer = _Killer(dsn, schema)
        model: list[str] = ["seed"]
        try:
            head = 0
            for i in range(count):
                head = writer.append("log", prompts(f"log{i}"), expected_head=head)
                if i % 10 == 5:
                    to = len(model) // 2
                    assert to == writer.truncate("trunc", to, expected_head=len(model))
                    del model[to:]
                new = [f"t{i}a", f"t{i}b"]
                assert len(model) + 2 == writer.append("trunc", prompts(*new))
                model += new
            follower.join(_WAIT)
        finally:
            killer.stop()
        assert [] == errors
        assert killer.killed > 10, "too few backends were terminated to test anything"
        assert [f"log{i}" for i in range(count)] == texts(writer.read("log"))
        assert list(range(1, count + 1)) == [e.seq for e in got]
        assert [f"log{i}" for i in range(count)] == texts(got)
        assert model == texts(reader.read("trunc"))
        assert writer.check_integrity().ok


@pytest.fixture
def own_server() -> Iterator[Server]:
    """A throwaway server of this test's own (it is restarted)."""
    server = start_server(own=True)
    if isinstance(server, str):
        pytest.skip(server)
    try:
        yield server
    finally:
        server.stop()


def test_lease_lookups_are_retried_across_a_server_restart(own_server: Server) -> None:
    """lease_holder() on a pooled connection the restart killed is retried like every other
    statement (it raised psycopg's AdminShutdown, not a LiteAgentError)."""
    with postgres_checkpointer(own_server.dsn, schema="leases") as cp:
        assert cp.lease_holder("s") is None  # a pooled connection now exists
        assert own_server.folder is not None
        log = str(own_server.folder / "log")
        own_server.pg_ctl("-m", "fast", "-w", "-l", log, "restart")
        assert cp.lease_holder("s") is None
        with cp.acquire_lease("s") as lease:
            assert lease.info.token == cp.lease_holder("s").token  # type: ignore[union-attr]


def test_server_restart_during_appends_and_follows(own_server: Server) -> None:
    """The server is restarted (an immediate shutdown: a crash) while a writer appends and
    another checkpointer follows: every acknowledged append survives exactly once and the
    follower delivers them in order, reconnecting by itself."""
    dsn = own_server.dsn
    total = 300
    with (
        postgres_checkpointer(dsn, schema="restart") as writer,
        postgres_checkpointer(dsn, schema="restart") as reader,
    ):
        got: list[StoredEvent] = []
        errors: list[BaseException] = []
        follower = _follow_into(reader, "s", total, got, errors)
        restarted = threading.Event()

        def restart() -> None:
            time.sleep(0.3)
            assert own_server.folder is not None
            log = str(own_server.folder / "log")  # the server must not keep pg_ctl's pipes
            own_server.pg_ctl("-m", "immediate", "-w", "-l", log, "restart")
            restarted.set()

        t = threading.Thread(target=restart)
        t.start()
        for i in range(total):
            assert i + 1 == writer.append("s", prompts(f"e{i}"), expected_head=i)
            if i == total // 2:
                restarted.wait(_WAIT)  # the second half runs after the restart
        t.join(_WAIT)
        follower.join(_WAIT)
        assert [] == errors
        assert restarted.is_set()
        assert [f"e{i}" for i in range(total)] == texts(writer.read("s"))
        assert [f"e{i}" for i in range(total)] == texts(got)
        assert list(range(1, total + 1)) == [e.seq for e in got]


def test_a_conflict_is_not_retried(postgres_server: Server, schema: str) -> None:
    """A real conflict (another writer moved the head) is raised, not retried away."""
    with (
        postgres_checkpointer(postgres_server.dsn, schema=schema) as a,
        postgres_checkpointer(postgres_server.dsn, schema=schema) as b,
    ):
        a.append("s", prompts("a"))
        b.append("s", prompts("b"))
        with pytest.raises(CheckpointConflictError):
            a.append("s", prompts("stale"), expected_head=1)
        assert ["a", "b"] == texts(a.read("s"))


def test_closing_with_the_server_gone_retries_one_release_not_each(own_server: Server) -> None:
    """Closing a checkpointer that holds several leases while the server is down: the first
    release is retried for the retry time, the ones right after it are tried once (each
    used to be retried for the whole retry time: a daemon holding a hundred leases took
    fifty minutes to close). Every lease is released when the server is back."""
    dsn = own_server.dsn
    assert own_server.folder is not None
    log = str(own_server.folder / "log")
    cp = postgres_checkpointer(dsn, schema="closing", retry_timeout=1)
    for n in range(4):
        cp.acquire_lease(f"s{n}")
    own_server.pg_ctl("-m", "immediate", "-w", "stop")
    try:
        with capture_logs() as logs:
            cp.close()
    finally:
        own_server.pg_ctl("-w", "-l", log, "restart")  # restart: with the first start's options
    failed = [e for e in logs if e["event"] == "lease_release_failed"]
    assert [True, False, False, False] == [e["retried"] for e in failed]
    with postgres_checkpointer(dsn, schema="closing") as again:
        for n in range(4):
            with again.acquire_lease(f"s{n}"):  # free: the closed holder's backend is gone
                pass
