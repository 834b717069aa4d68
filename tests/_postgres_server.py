"""A throwaway PostgreSQL server for the tests, and the DSN they use.

``$LITEAGENT_TEST_POSTGRES_DSN`` names a server to use (``.ci/run`` starts one and sets it).
Without it, :func:`start_server` starts its own when the server binaries (``initdb``,
``pg_ctl``) are on the PATH: a cluster in a temp folder, listening only on a Unix socket in that
folder, with fsync off (a throwaway cluster). PostgreSQL refuses to run as root: as root the
server runs as the ``postgres`` user (``runuser``), which must exist (Debian's server package
creates it). Otherwise the tests that need it are skipped with the reason.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ENV = "LITEAGENT_TEST_POSTGRES_DSN"


@dataclass
class Server:
    """A running throwaway server (``stop()`` it)."""

    dsn: str
    folder: Path | None
    as_user: list[str]

    def pg_ctl(self, *args: str) -> None:
        """Run ``pg_ctl`` on this cluster (``restart``, ``stop``, ...)."""
        assert self.folder is not None, "not a server these tests started"
        subprocess.run(
            [*self.as_user, _binary("pg_ctl"), "-D", str(self.folder / "data"), *args],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def stop(self) -> None:
        """Stop the server and remove its folder (only a server these tests started)."""
        if self.folder is None:
            return
        try:
            self.pg_ctl("-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(name)
    return found


def start_server(*, own: bool = False, fsync: bool = False) -> Server | str:
    """The server to test against: the one ``$LITEAGENT_TEST_POSTGRES_DSN`` names (unless
    ``own``: a test that restarts its server), or a new throwaway one; a str saying why there
    is none. ``fsync``: a cluster whose commits reach the disk (the benchmark's option)."""
    dsn = os.environ.get(ENV)
    if dsn and not own:
        return Server(dsn, None, [])
    if shutil.which("initdb") is None or shutil.which("pg_ctl") is None:
        return (
            f"no PostgreSQL server: set {ENV} to a libpq DSN (see README.md, Test), "
            "or put the server binaries initdb and pg_ctl on the PATH"
        )
    as_user: list[str] = []
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return f"running as root and there is no postgres user to run a server as; set {ENV}"
        as_user = ["runuser", "-u", "postgres", "--"]
    folder = Path(tempfile.mkdtemp(prefix="lapg-", dir="/tmp"))  # short: a socket path
    if as_user:
        shutil.chown(folder, "postgres", "postgres")
    data = folder / "data"
    try:
        subprocess.run(
            [
                *as_user,
                _binary("initdb"),
                *("-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        speed = "" if fsync else "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
        options = f"-c listen_addresses='' -k {folder} {speed}-c max_connections=300"
        subprocess.run(
            [
                *as_user,
                _binary("pg_ctl"),
                *("-D", str(data), "-l", str(folder / "log"), "-w", "start", "-o", options),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    except (subprocess.SubprocessError, OSError) as e:
        shutil.rmtree(folder, ignore_errors=True)
        return f"could not start a throwaway PostgreSQL server ({e}); set {ENV}"
    return Server(f"host={folder} user=postgres dbname=postgres", folder, as_user)


@dataclass
class Bouncer:
    """A running PgBouncer in transaction mode in front of a server (``stop()`` it)."""

    dsn: str
    folder: Path
    as_user: list[str]

    def stop(self) -> None:
        """Stop PgBouncer and remove its folder."""
        pid_file = self.folder / "pgbouncer.pid"
        try:
            if pid_file.exists():
                os.kill(int(pid_file.read_text().strip()), 15)
        except (OSError, ValueError):
            pass
        shutil.rmtree(self.folder, ignore_errors=True)


def start_pgbouncer(server: Server) -> Bouncer | str:
    """A PgBouncer (``pool_mode = transaction``) on a free 127.0.0.1 port in front of
    ``server``; a str saying why there is none (no ``pgbouncer`` binary, or no Unix-socket
    server to point it at)."""
    binary = shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None
    )
    if binary is None:
        return "PgBouncer is not installed (Debian: apt-get install pgbouncer)"
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(server.dsn)
    host, port = str(params.get("host") or ""), str(params.get("port") or "5432")
    user, dbname = str(params.get("user") or "postgres"), str(params.get("dbname") or "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    as_user: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="lapgb-", dir="/tmp"))
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres user to run PgBouncer as"
        shutil.chown(folder, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        f"[databases]\n{dbname} = host={host} port={port} dbname={dbname} user={user}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {free}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder}/users.txt\npool_mode = transaction\n"
        "max_client_conn = 1000\ndefault_pool_size = 40\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
        f"logfile = {folder}/pgbouncer.log\npidfile = {folder}/pgbouncer.pid\n"
    )
    if as_user:
        for p in folder.iterdir():
            shutil.chown(p, "postgres", "postgres")
    try:
        subprocess.run(
            [*as_user, binary, "-d", str(folder / "pgbouncer.ini")],
            check=True,
            capture_output=True,
            timeout=60,
        )
    except (subprocess.SubprocessError, OSError) as e:
        shutil.rmtree(folder, ignore_errors=True)
        return f"could not start PgBouncer ({e})"
    dsn = f"host=127.0.0.1 port={free} user={user} dbname={dbname}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", free), timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline:
                Bouncer(dsn, folder, as_user).stop()
                return "PgBouncer did not start listening"
            time.sleep(0.05)
    return Bouncer(dsn, folder, as_user)
