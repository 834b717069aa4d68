"""A TCP proxy on 127.0.0.1 in front of a PostgreSQL server that can cut one connection at a
chosen moment: the client's request forwarded and the server's answer never relayed (the
statement ran, the client cannot know), the request dropped before it reached the server, or
the request delivered late, after the client gave up (a server that has not noticed its client
is gone). For the exactly-once tests of the Postgres backend."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Callable

from psycopg.conninfo import conninfo_to_dict, make_conninfo


class CutProxy:
    """Relays connections to ``upstream_dsn``'s server; :attr:`dsn` connects through it."""

    def __init__(self, upstream_dsn: str) -> None:
        params = conninfo_to_dict(upstream_dsn)
        host = str(params.get("host") or "/var/run/postgresql")
        port = int(params.get("port") or 5432)
        if host.startswith("/"):
            self._upstream: tuple[int, object] = (socket.AF_UNIX, f"{host}/.s.PGSQL.{port}")
        else:
            self._upstream = (socket.AF_INET, (host, port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        port_here = self._listener.getsockname()[1]
        params.update(host="127.0.0.1", port=str(port_here), sslmode="disable")
        self.dsn = make_conninfo(**{k: str(v) for k, v in params.items()})
        self._armed: tuple[bytes, str, Callable[[], None], float, float] | None = None
        self._lock = threading.Lock()
        self.cuts = 0
        self._stopped = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def cut_on(
        self,
        marker: bytes,
        how: str,
        after_forward: Callable[[], None] = lambda: None,
        *,
        delay: float = 0.0,
        linger: float = 0.0,
    ) -> None:
        """Cut the next connection whose client sends ``marker``: ``how="after"`` forwards that
        request, calls ``after_forward()`` (e.g. waits until the server committed) and then
        closes both sides; ``how="before"`` closes them without forwarding it; ``how="late"``
        closes the client's side at once, forwards the request ``delay`` seconds later and
        keeps the server's side open ``linger`` seconds more."""
        with self._lock:
            self._armed = (marker, how, after_forward, delay, linger)

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            family, address = self._upstream
            server = socket.socket(family, socket.SOCK_STREAM)
            try:
                server.connect(address)  # type: ignore[arg-type]
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._relay, args=(client, server), daemon=True).start()

    def _relay(self, client: socket.socket, server: socket.socket) -> None:
        keep_server = False
        try:
            while True:
                ready, _, _ = select.select([client, server], [], [], 1.0)
                if self._stopped:
                    return
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is client:
                        cut = self._cut(data, server)
                        if cut:
                            keep_server = cut == "late"
                            return
                    (server if sock is client else client).sendall(data)
        except OSError:
            return
        finally:
            for sock in (client,) if keep_server else (client, server):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def _cut(self, data: bytes, server: socket.socket) -> str:
        """How the connection was cut on ``data`` ("" when it was not)."""
        with self._lock:
            armed = self._armed
            if armed is None or armed[0] not in data:
                return ""
            self._armed = None
            self.cuts += 1
        _marker, how, after_forward, delay, linger = armed
        if how == "after":
            server.sendall(data)
            after_forward()
        elif how == "late":

            def deliver() -> None:
                try:
                    time.sleep(delay)
                    server.sendall(data)
                    after_forward()
                    time.sleep(linger)
                finally:
                    with contextlib.suppress(OSError):
                        server.shutdown(socket.SHUT_RDWR)
                    server.close()

            threading.Thread(target=deliver, daemon=True).start()
        return how

    def close(self) -> None:
        """Stop accepting and relaying."""
        self._stopped = True
        # close() alone does not wake a thread blocked in accept(); shutdown() does (Linux).
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(5)
