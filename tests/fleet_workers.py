"""A fleet of worker processes serving the turns of corpus sessions, for the fleet tests and
``benchmarks/fleet.py``.

Each worker is a process of its own (``spawn``: nothing is inherited) with its own compactor,
built from the same config; it reads the corpus files itself, so a turn travels as
``(session file, number of messages)`` and comes back as what the turn produced: a hash of the
view, the record's id, tier and errors, the offloads it made, and whether the view is a valid chat
history. A turn may carry a kill order: at a hook (``load_state``, ``offload``, ``save_state``,
``persist_record``) the worker arms a timer that sends itself SIGKILL a random fraction of a
millisecond later, somewhere in the middle of that write or of the rest of the turn.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import random
import signal
import threading
import time
from collections import deque
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

KILL_POINTS = ("load_state", "offload", "save_state", "persist_record")


def load_session(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def turn_points(messages: list[dict[str, Any]]) -> list[int]:
    """The history lengths an agent compacts at: before each assistant message (as the replay does)."""
    return [i for i, m in enumerate(messages) if m.get("role") == "assistant" and i > 0]


def view_hash(view: list[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(view, sort_keys=True, ensure_ascii=True).encode()).hexdigest()


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def turn_result(view: list[dict[str, Any]], record: Any) -> dict[str, Any]:
    from progressive_compactor.testing import problems

    return {
        "view": view_hash(view),
        "record": record.id,
        "tier": int(record.tier),
        "errors": list(record.errors),
        "offloaded": [(e.handle, e.sha256) for e in record.offloaded],
        "problems": problems(view),
    }


class Killer:
    """A plugin that, when told to, arms a SIGKILL at one hook of the next turn."""

    def __init__(self) -> None:
        self.point: str | None = None
        self.delay = 0.0

    def _maybe(self, point: str) -> None:
        if self.point == point:
            self.point = None
            timer = threading.Timer(self.delay, os.kill, (os.getpid(), signal.SIGKILL))
            timer.daemon = True
            timer.start()

    def load_state(self, session_id: str) -> None:
        self._maybe("load_state")

    def offload(self, message: Any, session_id: str, threshold: int) -> None:
        self._maybe("offload")

    def save_state(self, session_id: str, state: Any) -> None:
        self._maybe("save_state")

    def persist_record(self, record: Any) -> None:
        self._maybe("persist_record")


def _killer_plugin() -> Killer:
    from progressive_compactor.plugin import hookimpl

    class HookedKiller(Killer):
        load_state = hookimpl(tryfirst=True)(Killer.load_state)
        offload = hookimpl(tryfirst=True)(Killer.offload)
        save_state = hookimpl(tryfirst=True)(Killer.save_state)
        persist_record = hookimpl(tryfirst=True)(Killer.persist_record)

    return HookedKiller()


def serve(conn: Connection, overrides: dict[str, Any], corpus: str) -> None:
    """A worker: answer commands until ``stop`` (or until killed)."""
    from progressive_compactor import ProgressiveCompactor

    killer = _killer_plugin()
    compactor = ProgressiveCompactor("default", extra_plugins=[("killer", killer)], **overrides)
    sessions: dict[str, list[dict[str, Any]]] = {}
    conn.send("ready")
    while True:
        try:
            command, *args = conn.recv()
        except EOFError:
            break
        if command == "stop":
            break
        if command == "turn":
            session, upto, kill = args
            if session not in sessions:
                sessions[session] = load_session(Path(corpus) / f"{session}.jsonl")
            if kill is not None:
                killer.point, killer.delay = kill
            view, record = compactor.compact_with_record(sessions[session][:upto], session)
            killer.point = None
            conn.send({**turn_result(view, record), "pid": os.getpid()})
        elif command == "read":
            found = {}
            for handle in args[0]:
                try:
                    found[handle] = text_hash(compactor.read_tool_result(handle))
                except Exception as exc:  # noqa: BLE001 - reported to the test
                    found[handle] = f"error: {exc}"
            conn.send(found)
        elif command == "records":
            conn.send([r.id for r in compactor.records(args[0]) or []])
        elif command == "ping":
            conn.send("pong")
    compactor.close()


class Worker:
    def __init__(self, index: int, overrides: dict[str, Any], corpus: Path):
        ctx = multiprocessing.get_context("spawn")
        self.index = index
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=serve, args=(child, overrides, str(corpus)), daemon=True)
        self.process.start()
        child.close()
        self.ready = False

    def wait_ready(self, timeout: float = 60) -> None:
        if not self.ready:
            if not self.conn.poll(timeout):
                raise RuntimeError(f"worker {self.index} did not start")
            assert self.conn.recv() == "ready"
            self.ready = True

    def call(self, *command: Any) -> Any:
        self.wait_ready()
        self.conn.send(command)
        return self.conn.recv()

    def stop(self) -> None:
        try:
            self.conn.send(("stop",))
        except OSError:
            pass
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


class Fleet:
    """``size`` workers with one config; turns are sent to random idle workers."""

    def __init__(self, size: int, overrides: dict[str, Any], corpus: Path, seed: int = 0):
        self.overrides, self.corpus = overrides, corpus
        self.rng = random.Random(seed)
        self.workers = [Worker(i, overrides, corpus) for i in range(size)]
        for worker in self.workers:
            worker.wait_ready()
        self.spawned = size

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()

    def replace(self, worker: Worker) -> Worker:
        """A new worker in place of one that died."""
        worker.process.join(10)
        worker.conn.close()
        fresh = Worker(worker.index, self.overrides, self.corpus)
        self.workers[self.workers.index(worker)] = fresh
        self.spawned += 1
        return fresh

    def serve(self, turns: dict[str, list[int]]) -> tuple[dict[tuple[str, int], dict[str, Any]], float]:
        """Serve every session's turns in order, sessions side by side, each turn on a random idle
        worker. Returns ``{(session, upto): result}`` and the seconds it took."""
        pending = {sid: deque(points) for sid, points in turns.items() if points}
        busy: dict[Connection, tuple[Worker, str, int]] = {}
        results: dict[tuple[str, int], dict[str, Any]] = {}
        started = time.perf_counter()
        while pending or busy:
            idle = [w for w in self.workers if all(b[0] is not w for b in busy.values())]
            ready = [sid for sid in pending if all(b[1] != sid for b in busy.values())]
            while idle and ready:
                worker = idle.pop(self.rng.randrange(len(idle)))
                sid = ready.pop(self.rng.randrange(len(ready)))
                upto = pending[sid].popleft()
                if not pending[sid]:
                    del pending[sid]
                worker.conn.send(("turn", sid, upto, None))
                busy[worker.conn] = (worker, sid, upto)
            for conn in wait(list(busy)):
                worker, sid, upto = busy.pop(conn)  # type: ignore[call-overload]
                results[(sid, upto)] = conn.recv()  # type: ignore[union-attr]
        return results, time.perf_counter() - started

    def read_everywhere(self, handles: list[str]) -> list[dict[str, str]]:
        """Every worker's sha256 of every handle's text."""
        return [worker.call("read", handles) for worker in self.workers]


def reference(
    overrides: dict[str, Any], corpus: Path, turns: dict[str, list[int]]
) -> dict[tuple[str, int], dict[str, Any]]:
    """What one process with its state in memory (and results in files) produces for the turns."""
    from progressive_compactor import ProgressiveCompactor

    results = {}
    with ProgressiveCompactor("default", **overrides) as compactor:
        for sid, points in turns.items():
            messages = load_session(corpus / f"{sid}.jsonl")
            for upto in points:
                view, record = compactor.compact_with_record(messages[:upto], sid)
                result = turn_result(view, record)
                result["texts"] = {h: text_hash(compactor.read_tool_result(h)) for h, _ in result["offloaded"]}
                results[(sid, upto)] = result
    return results
