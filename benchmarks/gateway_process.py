"""A gateway under measurement: started by the bench under a memory cap, or one already running; its CPU and RSS.

Reads ``/proc/<pid>/stat`` (utime + stime) and ``/proc/<pid>/status`` (VmRSS) of the gateway's
processes: the pid given, or the started one, and their children (``esrr serve --processes N``
forks N). ``/proc/<pid>/stat`` counts CPU in clock ticks (10 ms); ``threads_cpu_ns`` reads each
thread's ``schedstat`` instead, exact to the nanosecond, for the CPU of one request. The process
serving a port is found from ``/proc/net/tcp`` and the processes' open sockets. Linux only.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ESRR = [sys.executable, "-c", "from es_rerank.cli import main; main()"]  # the command, run, never imported here
MIB = 1 << 20


def children(pid: int) -> set[int]:
    """The pids whose parent is ``pid``."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


def running(pid: int) -> bool:
    """Whether ``pid`` exists and has not exited (a zombie, not yet waited for, has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def process_tree(pid: int) -> set[int]:
    """``pid`` and its running children (empty when ``pid`` has exited)."""
    if not running(pid):
        return set()
    return {pid} | {child for child in children(pid) if running(child)}


def cpu_s(pids: set[int]) -> float:
    """User + system CPU seconds of the live ``pids`` so far (all their threads); a pid gone counts 0."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def threads_cpu_ns(pids: set[int]) -> int:
    """CPU nanoseconds the live threads of ``pids`` have run so far (``/proc/<pid>/task/*/schedstat``): exact where
    ``cpu_s`` counts 10 ms ticks, but a thread that has exited counts no more; a pid gone counts 0."""
    total = 0
    for pid in pids:
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for thread in threads:
            try:
                total += int(Path(f"/proc/{pid}/task/{thread}/schedstat").read_text().split()[0])
            except (OSError, IndexError, ValueError):
                continue
    return total


def parent(pid: int) -> int | None:
    """The parent pid of ``pid`` (None when it has exited)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def listening_pids(port: int) -> set[int]:
    """The pids holding a listening TCP socket (IPv4 or IPv6) on ``port``, among those this user may look into."""
    sockets = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                sockets.add(f"socket:[{fields[9]}]")
    found: set[int] = set()
    if not sockets:
        return found
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            descriptors = os.listdir(entry / "fd")
        except OSError:  # gone, or another user's
            continue
        for descriptor in descriptors:
            try:
                if os.readlink(entry / "fd" / descriptor) in sockets:
                    found.add(int(entry.name))
                    break
            except OSError:
                continue
    return found


def serving_pid(port: int) -> int | None:
    """The process that serves ``port``: the one holding its listening socket whose parent does not (``esrr serve
    --processes N`` forks N children on the socket of one parent); None when no such process is seen, or several."""
    holders = listening_pids(port)
    roots = [pid for pid in holders if parent(pid) not in holders]
    return roots[0] if len(roots) == 1 else None


def rss_bytes(pids: set[int]) -> int:
    """Resident memory of the live ``pids`` summed (VmRSS)."""
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
    return total


class PeakSampler:
    """The highest summed RSS of a process tree, sampled every ``interval_s`` while in the ``with``."""

    def __init__(self, pid: int, interval_s: float = 0.02) -> None:
        self.pid, self.interval_s, self.peak = pid, interval_s, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakSampler:
        self.peak = rss_bytes(process_tree(self.pid))
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak = max(self.peak, rss_bytes(process_tree(self.pid)))


class ProcessCpu:
    """The CPU of a gateway's processes, ``pid`` and its children as they are when made (``--processes N``)."""

    def __init__(self, pid: int) -> None:
        self.pids = frozenset(process_tree(pid))
        if not self.pids:
            raise GatewayError(f"no running process has pid {pid}; name the gateway's pid (esrr serve prints it)")

    def seconds(self) -> float:
        """User + system CPU seconds of the processes so far (``cpu_s``: every thread, in 10 ms ticks)."""
        return cpu_s(set(self.pids))

    def thread_ns(self) -> int:
        """CPU nanoseconds of their live threads so far (``threads_cpu_ns``: exact, for one request)."""
        return threads_cpu_ns(set(self.pids))


@dataclass
class Snapshot:
    """What the gateway's processes were at one moment."""

    pids: frozenset[int]
    cpu_s: float
    rss: int


def snapshot(pid: int) -> Snapshot:
    """The process tree of ``pid`` now: its running pids, CPU seconds so far and summed RSS. A process that has
    exited but not been waited for still shows its CPU; one already waited for shows none."""
    every = ({pid} | children(pid)) if Path(f"/proc/{pid}").exists() else set()
    return Snapshot(frozenset(p for p in every if running(p)), cpu_s(every), rss_bytes(every))


def _cap_memory(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


class GatewayError(RuntimeError):
    """The gateway did not start, or the one named is not there; the message says which and where its log is."""


class Gateway:
    """A gateway the bench talks to: ``url`` and the ``pid`` whose process tree is measured."""

    def __init__(self, url: str, pid: int) -> None:
        self.url, self.pid = url, pid

    def alive(self) -> bool:
        """Whether the measured process still runs."""
        return bool(process_tree(self.pid))

    def restart(self) -> bool:
        """Start it again after a death or a stuck request; False when the bench cannot (a gateway not its own)."""
        return False

    def stop(self) -> None:
        """Stop it, if the bench started it."""

    def describe(self) -> str:
        """How it runs, for the report."""
        return f"running gateway at {self.url}, pid {self.pid} measured (with its children)"


class StartedGateway(Gateway):
    """``esrr serve --processes 1`` started by the bench with ``RLIMIT_AS`` capped; started again on demand."""

    def __init__(
        self,
        home: Path,
        port: int,
        memory_cap: int,
        env: dict[str, str],
        log_path: Path,
        ready_timeout_s: float = 120.0,
    ) -> None:
        super().__init__(f"http://127.0.0.1:{port}", 0)
        self.home, self.port, self.memory_cap, self.log_path = home, port, memory_cap, log_path
        self.env = {**env, "ESRR_HOME": str(home.resolve())}
        self.ready_timeout_s = ready_timeout_s
        self.popen: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> StartedGateway:
        """Start the process and wait until ``GET /`` answers (any status)."""
        import urllib3

        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                [*ESRR, "serve", "--port", str(self.port), "--processes", "1"],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_cap_memory(self.memory_cap),
            )
        self.pid, self.starts = self.popen.pid, self.starts + 1
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            if self.popen.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise GatewayError(f"esrr serve exited with {self.popen.returncode} (log {self.log_path}):\n{tail}")
            try:
                urllib3.request("GET", f"{self.url}/", timeout=2.0, retries=False)
                return self
            except urllib3.exceptions.HTTPError:
                if time.monotonic() > deadline:
                    raise GatewayError(
                        f"esrr serve did not answer within {self.ready_timeout_s:g} s (log {self.log_path})"
                    ) from None
                time.sleep(0.1)

    def exit_status(self) -> str | None:
        """How the process ended (``signal SIGKILL``, ``exit 1``), None while it runs."""
        code = None if self.popen is None else self.popen.poll()
        if code is None:
            return None
        return f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"

    def restart(self) -> bool:
        self.stop()
        self.start()
        return True

    def stop(self) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.kill()  # a gateway stuck in a request would finish it first on SIGTERM
        self.popen.wait(30)

    def describe(self) -> str:
        return (
            f"esrr serve --processes 1 started by the bench on {self.home} under RLIMIT_AS "
            f"{self.memory_cap / (1 << 30):g} GiB (log {self.log_path})"
        )
