"""Real PostgreSQL and Redis servers for the tests, and a TCP proxy that slows, drops and counts.

Each server runs on 127.0.0.1 on a free port, with its files in a temporary folder, started
straight from the Debian binaries (``initdb``/``postgres``, ``redis-server``): no system service.
PostgreSQL refuses to run as root, so when the tests run as root both servers run as an
unprivileged user (``postgres`` when it exists, else ``nobody``). Both ask for a password, so the
tests can check that it is never written anywhere.

``.ci/run`` starts both before the suite (``python tests/servers.py start FILE``) and stops them
after (``... stop FILE``); ``FILE`` (a JSON description) is passed to the tests in
``COMPACTOR_TEST_SERVERS``. Without it, the session fixtures start their own servers when the
binaries are installed. A test that needs a server that is not there is skipped with the reason,
unless ``COMPACTOR_REQUIRE_SERVERS=1`` (set by ``.ci/run``): then it fails.

Usable as a pytest plugin (the fixtures below) and as a module (``benchmarks/fleet.py``).
"""

from __future__ import annotations

import glob
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

SERVERS_ENV = "COMPACTOR_TEST_SERVERS"
REQUIRE_ENV = "COMPACTOR_REQUIRE_SERVERS"


# --- finding things ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def postgres_bindir() -> Path | None:
    """The folder of ``initdb`` and ``postgres``: on PATH, else Debian's newest version."""
    found = shutil.which("initdb")
    if found and shutil.which("postgres"):
        return Path(os.path.realpath(found)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(candidates[-1]).parent if candidates else None


def server_user() -> tuple[int, int] | None:
    """``(uid, gid)`` to run servers as when we are root (PostgreSQL refuses root), else None."""
    if os.geteuid() != 0:
        return None
    import pwd

    for name in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return entry.pw_uid, entry.pw_gid
    raise RuntimeError("running as root and no unprivileged user (postgres, nobody) to run the servers as")


def _own(path: Path, user: tuple[int, int] | None) -> None:
    if user is not None:
        os.chown(path, *user)


def _popen(cmd: list[str], log: Path, user: tuple[int, int] | None, **kw: Any) -> subprocess.Popen[bytes]:
    out = open(log, "ab")  # noqa: SIM115 - handed to the child
    extra: dict[str, Any] = {}
    if user is not None:
        extra = {"user": user[0], "group": user[1], "extra_groups": []}
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    try:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            **extra,
            **kw,
        )
    finally:
        out.close()


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # our own child: reap it
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.02)
    return False


# --- PostgreSQL -------------------------------------------------------------------------------


class PostgresServer:
    """A PostgreSQL cluster in ``base``: ``start()``, ``stop()``, ``restart()``; ``dsn``."""

    kind = "postgres"

    def __init__(self, base: Path, port: int, password: str, bindir: Path, user: tuple[int, int] | None):
        self.base, self.port, self.password, self.bindir, self.user = base, port, password, bindir, user
        self.data = base / "data"

    @classmethod
    def create(cls, base: Path) -> PostgresServer:
        bindir = postgres_bindir()
        if bindir is None:
            raise FileNotFoundError("PostgreSQL is not installed (no initdb): apt-get install postgresql")
        user = server_user()
        base.mkdir(parents=True, exist_ok=True)
        os.chmod(base, 0o755)
        server = cls(base, free_port(), secrets.token_hex(12), bindir, user)
        server.data.mkdir(mode=0o700)
        _own(server.data, user)
        pwfile = base / "pwfile"
        pwfile.write_text(server.password + "\n")
        os.chmod(pwfile, 0o644)  # read by initdb as the server's user; removed right after
        try:
            done = subprocess.run(
                [str(bindir / "initdb"), "-D", str(server.data), "-U", "compactor", "--pwfile", str(pwfile),
                 "--auth", "scram-sha-256", "-E", "UTF8", "--locale", "C", "--no-sync"],
                capture_output=True, text=True, env={"PATH": os.environ.get("PATH", ""), "LC_ALL": "C"},
                **({"user": user[0], "group": user[1], "extra_groups": []} if user else {}),
            )  # fmt: skip
        finally:
            pwfile.unlink()
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stdout}{done.stderr}")
        return server

    @property
    def dsn(self) -> str:
        return f"postgresql://compactor:{self.password}@127.0.0.1:{self.port}/postgres"

    def dsn_via(self, port: int) -> str:
        return f"postgresql://compactor:{self.password}@127.0.0.1:{port}/postgres"

    def pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def start(self, timeout: float = 30.0) -> None:
        sockets = self.base / "sock"
        sockets.mkdir(exist_ok=True)
        _own(sockets, self.user)
        _popen(
            [str(self.bindir / "postgres"), "-D", str(self.data), "-p", str(self.port),
             "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={sockets}",
             "-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_connections=300",
             "-c", "shared_buffers=32MB", "-c", "log_min_messages=warning"],
            self.base / "postgres.log", self.user,
        )  # fmt: skip
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 30.0) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.dsn, connect_timeout=2).close()
                return
            except psycopg.Error as exc:
                if time.monotonic() > deadline:
                    log = (self.base / "postgres.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"PostgreSQL did not start: {exc}\n{log}") from exc
                time.sleep(0.05)

    def stop(self, immediate: bool = False) -> None:
        """``fast`` shutdown (clients disconnected, data flushed) or ``immediate`` (a crash)."""
        pid = self.pid()
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGQUIT if immediate else signal.SIGINT)
        except ProcessLookupError:
            return
        if not _wait_gone(pid, 30):
            raise RuntimeError(f"PostgreSQL (pid {pid}) did not stop")
        if immediate:
            (self.data / "postmaster.pid").unlink(missing_ok=True)

    def restart(self, immediate: bool = False) -> None:
        self.stop(immediate)
        self.start()

    def to_dict(self) -> dict[str, Any]:
        return {"base": str(self.base), "port": self.port, "password": self.password, "bindir": str(self.bindir),
                "user": list(self.user) if self.user else None}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PostgresServer:
        user = tuple(data["user"]) if data.get("user") else None
        return cls(Path(data["base"]), data["port"], data["password"], Path(data["bindir"]), user)  # type: ignore[arg-type]


# --- Redis ------------------------------------------------------------------------------------


class RedisServer:
    """A Redis server in ``base`` with an append-only file (its data survive a restart)."""

    kind = "redis"

    def __init__(self, base: Path, port: int, password: str, user: tuple[int, int] | None):
        self.base, self.port, self.password, self.user = base, port, password, user

    @classmethod
    def create(cls, base: Path) -> RedisServer:
        if shutil.which("redis-server") is None:
            raise FileNotFoundError("Redis is not installed (no redis-server): apt-get install redis-server")
        user = server_user()
        base.mkdir(parents=True, exist_ok=True)
        os.chmod(base, 0o755)
        (base / "data").mkdir(mode=0o700, exist_ok=True)
        _own(base / "data", user)
        return cls(base, free_port(), secrets.token_hex(12), user)

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    def url_via(self, port: int) -> str:
        return f"redis://:{self.password}@127.0.0.1:{port}/0"

    def pid(self) -> int | None:
        try:
            return int((self.base / "data" / "redis.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def start(self, timeout: float = 30.0) -> None:
        data = self.base / "data"
        conf = data / "redis.conf"  # the password stays out of the process list
        conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {data}\nrequirepass {self.password}\n"
            'appendonly yes\nappendfsync always\nsave ""\nenable-debug-command local\n'
            f"pidfile {data / 'redis.pid'}\ndaemonize no\n"
        )
        os.chmod(conf, 0o600)
        _own(conf, self.user)
        _popen(["redis-server", str(conf)], self.base / "redis.log", self.user)
        self.wait_ready(timeout)

    def client(self, **kw: Any) -> Any:
        import redis

        return redis.Redis.from_url(self.url, **kw)

    def wait_ready(self, timeout: float = 30.0) -> None:
        import redis

        deadline = time.monotonic() + timeout
        while True:
            try:
                client = self.client(socket_timeout=2)
                client.ping()
                client.close()
                if self.pid() is not None:
                    return
            except redis.RedisError as exc:
                if time.monotonic() > deadline:
                    log = (self.base / "redis.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"Redis did not start: {exc}\n{log}") from exc
            time.sleep(0.05)

    def stop(self, immediate: bool = False) -> None:
        """SIGTERM (the append-only file flushed) or SIGKILL (a crash; ``appendfsync always``
        keeps every acknowledged write)."""
        pid = self.pid()
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGKILL if immediate else signal.SIGTERM)
        except ProcessLookupError:
            return
        if not _wait_gone(pid, 30):
            raise RuntimeError(f"Redis (pid {pid}) did not stop")
        (self.base / "data" / "redis.pid").unlink(missing_ok=True)

    def restart(self, immediate: bool = False) -> None:
        self.stop(immediate)
        self.start()

    def to_dict(self) -> dict[str, Any]:
        return {"base": str(self.base), "port": self.port, "password": self.password,
                "user": list(self.user) if self.user else None}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RedisServer:
        user = tuple(data["user"]) if data.get("user") else None
        return cls(Path(data["base"]), data["port"], data["password"], user)  # type: ignore[arg-type]


# --- a proxy that slows, drops and counts -----------------------------------------------------


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to a server's port, and can misbehave.

    ``round_trips`` counts requests: a chunk from a client that follows the server's answer (or
    opens the connection). ``delay`` holds every answer back that many seconds (a slow server).
    ``trickle`` passes answers on a byte at a time, that many seconds apart (a network that loses
    most packets, a choking proxy): every read of the client gets something, so no socket
    timeout fires, and the answer takes as long as its size makes it. ``hold_after = n`` holds
    back, while it is set, the answers to every request of a connection after its first ``n``
    (a server that let a client log in, then stopped answering).
    ``drop()`` closes every connection now. ``lose_every = n`` closes a connection instead of
    passing on the server's answer to every n-th request (the server did the work, the client
    never hears of it). The first ``spare`` requests of each connection (its login) are never
    lost, nor the ``rest`` requests that follow a loss or a drop: the connection fails now and
    then, it does not stay down (that is a server that is down, tested as such).
    """

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = int(self.listener.getsockname()[1])
        self.delay = 0.0
        self.trickle = 0.0
        self.hold_after = 0
        self.lose_every = 0
        self.spare = 6
        self.rest = 12
        self.round_trips = 0
        self.lost = 0
        self._requests = 0
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            state = {"last": "server", "requests": 0}
            with self._lock:
                self._pairs.append((client, server))
            threading.Thread(target=self._pump, args=(client, server, state, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, state, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, state: dict[str, Any], upstream: bool) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                with self._lock:
                    lose = False
                    if upstream:
                        if state["last"] != "client":
                            self.round_trips += 1
                            state["requests"] += 1
                        state["last"] = "client"
                    else:
                        if state["last"] != "server" and state["requests"] > self.spare and self.lose_every:
                            self._requests += 1
                            lose = self._requests >= self.lose_every
                            if lose:
                                self._requests = -self.rest
                        state["last"] = "server"
                    delay = 0.0 if upstream else self.delay
                if lose:
                    self.lost += 1
                    break
                if delay:
                    time.sleep(delay)
                while not upstream and self.hold_after and state["requests"] > self.hold_after and not self._closed:
                    time.sleep(0.01)
                sent = 0
                while not upstream and self.trickle and sent < len(data):
                    sink.sendall(data[sent : sent + 1])
                    sent += 1
                    time.sleep(self.trickle)
                sink.sendall(data[sent:])
        except OSError:
            pass
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def drop(self) -> None:
        """Close every open connection (both sides) at once."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
            self._requests = min(self._requests, -self.rest)  # what follows a drop is spared too
        for pair in pairs:
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        self._closed = True
        self.listener.close()
        self.drop()


# --- starting, stopping and describing both servers -------------------------------------------


def start_servers(base: Path, kinds: tuple[str, ...] = ("postgres", "redis")) -> dict[str, Any]:
    started: dict[str, Any] = {}
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o755)  # the servers' user must reach its folder (and the folders above it)
    if "postgres" in kinds:
        pg = PostgresServer.create(base / "postgres")
        pg.start()
        started["postgres"] = pg
    if "redis" in kinds:
        rd = RedisServer.create(base / "redis")
        rd.start()
        started["redis"] = rd
    return started


def load_servers(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    found: dict[str, Any] = {}
    if data.get("postgres"):
        found["postgres"] = PostgresServer.from_dict(data["postgres"])
    if data.get("redis"):
        found["redis"] = RedisServer.from_dict(data["redis"])
    return found


def main(argv: list[str]) -> int:
    """``start FILE``: start both servers, describe them in FILE; ``stop FILE``: stop them."""
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: python tests/servers.py start|stop FILE", file=sys.stderr)
        return 2
    command, path = argv[0], Path(argv[1])
    if command == "start":
        base = Path(tempfile.mkdtemp(prefix="compactor-servers-"))
        started = start_servers(base)
        path.write_text(json.dumps({"base": str(base), **{k: s.to_dict() for k, s in started.items()}}))
        for kind, server in started.items():
            print(f"{kind} on 127.0.0.1:{server.port} (files in {server.base})")
        return 0
    data = json.loads(path.read_text())
    for server in load_servers(path).values():
        server.stop()
    shutil.rmtree(data["base"], ignore_errors=True)
    return 0


# --- pytest fixtures --------------------------------------------------------------------------


def unavailable(reason: str) -> None:
    """Skip (on a developer's machine) or fail (in CI, ``COMPACTOR_REQUIRE_SERVERS=1``)."""
    import pytest

    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} (and {REQUIRE_ENV}=1: the servers must be there)", pytrace=False)
    pytest.skip(reason)


try:
    import pytest
except ImportError:  # used as a script by .ci/run before the test dependencies matter
    pytest = None  # type: ignore[assignment]

if pytest is not None:
    _started: dict[str, Any] = {}

    def _server(kind: str, module: str, extra: str) -> Any:
        try:
            __import__(module)
        except ImportError:
            unavailable(f"{module} is not installed: pip install -e '.[{extra}]'")
        path = os.environ.get(SERVERS_ENV)
        if path:
            found = load_servers(Path(path)).get(kind)
            if found is None:
                unavailable(f"{SERVERS_ENV}={path} describes no {kind} server")
            return found
        if kind not in _started:
            base = Path(tempfile.mkdtemp(prefix=f"compactor-{kind}-"))  # not under pytest's 0700 folders
            try:
                _started[kind] = start_servers(base, (kind,))[kind]
            except FileNotFoundError as exc:
                shutil.rmtree(base, ignore_errors=True)
                unavailable(str(exc))
        return _started[kind]

    def _stop_started(kind: str, server: Any) -> None:
        if _started.get(kind) is server:
            server.stop()
            shutil.rmtree(server.base.parent, ignore_errors=True)
            del _started[kind]

    @pytest.fixture(scope="session")
    def postgres_server() -> Iterator[PostgresServer]:
        """A running PostgreSQL server (skipped, or failed in CI, when there is none)."""
        server = _server("postgres", "psycopg", "postgres")
        yield server
        _stop_started("postgres", server)

    @pytest.fixture(scope="session")
    def redis_server() -> Iterator[RedisServer]:
        """A running Redis server (skipped, or failed in CI, when there is none)."""
        server = _server("redis", "redis", "redis")
        yield server
        _stop_started("redis", server)

    @pytest.fixture
    def postgres_dsn(postgres_server: PostgresServer) -> str:
        """The server's DSN, after making sure it is up (a fault test may have stopped it)."""
        if postgres_server.pid() is None:
            postgres_server.start()
        return postgres_server.dsn

    @pytest.fixture
    def redis_url(redis_server: RedisServer) -> str:
        if redis_server.pid() is None:
            redis_server.start()
        return redis_server.url

    @pytest.fixture
    def unique_name() -> str:
        """A name for this test's schema (PostgreSQL) or key prefix (Redis): tests never share data."""
        return f"t_{uuid.uuid4().hex[:12]}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
