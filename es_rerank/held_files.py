"""Files of a served version held open by this process, leased where it can, and checked around every read.

A mapped file that is cut short under a process kills it with SIGBUS the moment a page
past the new end is read, and one rewritten in place changes what the process serves
without a word. Neither can be caught once the read has started, so every array is
mapped from a descriptor opened here and kept (``HeldFile``), and a search reads only
inside ``FileGuard.reading``, which refuses it when a file changed before or during it.

Two ways to know a file changed:

- **A read lease** (Linux ``F_SETLEASE``), where the process watches for lease breaks
  (``watch_leases``: ``esrr serve`` does, in each gateway process). Another process's
  ``open`` for writing or ``truncate`` of a leased file then *blocks* (at most
  ``/proc/sys/fs/lease-break-time``, 45 s by default) and this process gets ``SIGIO``.
  The watch marks the version changing (new reads are refused; the reason names the
  file), waits for the reads under way to end, and only then gives the lease up, so the
  writer proceeds when nothing reads the file any more. No search reads a page that is
  being cut or rewritten, so none ends the process and none answers from mixed data. A
  lease costs nothing per search (a flag and a counter under a lock). It needs the owner
  of the file (or ``CAP_LEASE``) and a file system that grants leases; where a lease is
  refused the file is checked the second way, and the log says so once. Unlink and rename
  do not break a lease and need not: the held descriptor keeps the file that was
  verified.
- **Its fingerprint**, ``fstat``'s size, mtime and ctime, compared with what they were
  when the file was verified, before and after every read (~1 us a file). A change of
  size or mtime is a change. A change of ctime alone is also what ``chmod``, a hard link
  and a prune's unlink make, and what a rewrite that sets the mtime back makes
  (``rsync --inplace --times``); so then the file's content is verified (the statistics'
  checksum in their manifest, tantivy's own CRC in each segment file's footer) and
  accepted under its new ctime when it matches. What the fingerprints leave: a file cut
  short between a search's check and its read still ends the process (SIGBUS); a writer
  that changes a file and puts the same bytes back, mtime and all, within one search is
  not seen.

``pread`` instead of the map would close that gap without a lease, at an order of
magnitude more per search and a copy of the statistics in every process
(``esrr bench integrity`` measures both; docs/operations.md has the figures).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import mmap
import os
import queue
import signal
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

log = logging.getLogger(__name__)

F_SETLEASE = getattr(fcntl, "F_SETLEASE", 1024)  # Linux's values, for a Python whose fcntl lacks the names
F_GETLEASE = getattr(fcntl, "F_GETLEASE", 1025)
LEASE_BREAK_TIME = Path("/proc/sys/fs/lease-break-time")
Verifier = Callable[[int], bool]  # whether an open file's content is what was verified (a checksum)


class NotNumpyError(ValueError):
    """A file that is not a ``.npy`` array this module can map (says why; names no path)."""


class FileBeingWritten(OSError):
    """A file another process holds open for writing: not served until it is closed and verified."""


class FilesChanged(Exception):
    """Files of a served version changed on disk after they were verified (names the files, not their paths)."""


class Fingerprint(NamedTuple):
    """What ``fstat`` says of a file: a change of size or mtime is a change of content; of ctime, maybe one."""

    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, descriptor: int) -> Fingerprint:
        """The fingerprint of an open file (a tuple: made and compared at every read, cheaper than a dataclass)."""
        st = os.fstat(descriptor)
        return cls(st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class HeldFile:
    """An open, read-only descriptor of one file, leased when the process watches leases; closed when collected."""

    def __init__(self, path: Path, verify: Verifier | None = None) -> None:
        self.name = path.name
        self.descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        weakref.finalize(self, os.close, self.descriptor)  # closing it gives the lease up too
        self.guarded = False  # whether a FileGuard answers this file's lease breaks (else the watch gives it up)
        self.leased = False
        self.leased = _WATCH.lease(self)  # before the fingerprint: from here on no writer goes unnoticed
        self.opened = Fingerprint.of(self.descriptor)
        self.verify = verify  # set by the owner once it knows the checksum to compare with
        self._verified = self.opened
        self._refused: tuple[Fingerprint, str] | None = None  # a failed verification, not repeated per search
        self._lock = threading.Lock()

    def change(self) -> str | None:
        """How the file changed since it was verified (its name, no path), None when it did not."""
        now = Fingerprint.of(self.descriptor)
        verified = self._verified
        if now == verified:
            return None
        if now.size < self.opened.size:
            return f"{self.name} was cut short from {self.opened.size} to {now.size} bytes"
        if now.size > self.opened.size:
            return f"{self.name} grew from {self.opened.size} to {now.size} bytes"
        if now.mtime_ns != verified.mtime_ns:
            return f"{self.name} was rewritten in place"
        return self._verified_again(now)

    def _verified_again(self, now: Fingerprint) -> str | None:
        """Only the ctime moved: a chmod, a link, an unlink, or a rewrite with its mtime set back; the content says."""
        if self.verify is None:  # nothing to compare with (statistics saved before manifests)
            return None
        with self._lock:  # one thread reads the file; the others wait for its answer
            if self._verified == now:
                return None
            if self._refused is not None and self._refused[0] == now:
                return self._refused[1]
            if self.verify(self.descriptor):
                self._verified = now
                return None
            reason = f"{self.name} was rewritten in place (its modification time set back)"
            self._refused = (now, reason)
            return reason

    def deleted(self) -> bool:
        """Whether the file was unlinked (the descriptor still reads what was verified)."""
        return os.fstat(self.descriptor).st_nlink == 0

    def lease_intact(self) -> bool:
        """Whether this file's read lease stands (no other process is waiting to write it)."""
        try:
            return fcntl.fcntl(self.descriptor, F_GETLEASE) == fcntl.F_RDLCK
        except OSError:
            return False

    def release_lease(self) -> None:
        """Give the lease up, so that a writer waiting for it proceeds."""
        if self.leased:
            self.leased = False
            try:
                fcntl.fcntl(self.descriptor, F_SETLEASE, fcntl.F_UNLCK)
            except OSError:  # already broken by the kernel when the break time passed
                pass


class FileGuard:
    """The held files of one served version; every read of them inside ``reading``, refused once a file changed.

    Thread-safe; ``reading`` nests within a thread (the outermost read checks).
    """

    def __init__(
        self, files: Sequence[HeldFile], label: str = "", refusal: Callable[[str], Exception] = FilesChanged
    ) -> None:
        self.files = tuple(files)
        self.label = label  # where the files are, for the log
        self._refusal = refusal  # the error a refused read raises, from how the files changed
        self.leased = tuple(file for file in self.files if file.leased)
        for file in self.files:
            file.guarded = True
        self._fingerprinted = tuple(file for file in self.files if not file.leased)
        self._state = threading.Condition(threading.Lock())
        self._reads = 0  # reads under way: a lease is given up only when none is
        self._broken: str | None = None  # set when a lease breaks, for good
        self._local = threading.local()
        if self.leased:
            _WATCH.guard(self)

    def change(self) -> str | None:
        """How the files changed since they were verified (file names, no paths), None when none did."""
        if self._broken is None and not self._fingerprinted:  # all leased, none broken: nothing to ask
            return None
        changes = [self._broken] if self._broken is not None else []
        changes += [change for file in self._fingerprinted if (change := file.change()) is not None]
        return "; ".join(changes) or None

    def deleted(self) -> list[str]:
        """The names of the held files that were unlinked since they were opened."""
        return [file.name for file in self.files if file.deleted()]

    def reading(self) -> FileGuard:
        """Read the files inside ``with guard.reading():``: refused before a read if a file changed, and after it if
        one changed meanwhile (in place of what the read raised, an ``IndexError`` from a rewritten file among them)."""
        return self

    def __enter__(self) -> None:
        local = self._local
        depth = getattr(local, "depth", 0)
        local.depth = depth + 1
        if depth:  # within a read of this thread: the outermost one checks
            return
        try:
            self._begin()
        except BaseException:
            local.depth = 0
            raise

    def __exit__(self, *exc: object) -> None:
        local = self._local
        local.depth -= 1
        if local.depth:
            return
        self._end()
        if (change := self.change()) is not None:
            raise self._refusal(change) from None

    def _begin(self) -> None:
        with self._state:
            if self._broken is not None:
                raise self._refusal(self._broken)
            self._reads += 1
        if (change := self.change()) is not None:
            self._end()
            raise self._refusal(change)

    def _end(self) -> None:
        with self._state:
            self._reads -= 1
            if self._reads == 0:
                self._state.notify_all()

    def lease_broken(self) -> None:
        """If another process waits to write a leased file: refuse new reads, wait for those under way, give the
        leases up (the lease watch's thread calls this on ``SIGIO``)."""
        broken = [file.name for file in self.leased if file.leased and not file.lease_intact()]
        if not broken:
            return
        reason = (
            f"{', '.join(broken)} {'was' if len(broken) == 1 else 'were'} opened for writing or cut short "
            "by another process while served"
        )
        with self._state:
            if self._broken is None:
                self._broken = reason
            drained = self._state.wait_for(lambda: self._reads == 0, timeout=_break_wait_s())
        for file in self.leased:
            file.release_lease()
        log.warning(
            "%s: %s; reads of these files are refused from now on, and the leases given up %s",
            self.label,
            reason,
            "once the reads under way ended"
            if drained
            else "before the reads under way ended (they "
            "are answered 503): a read took longer than the kernel's lease-break-time",
        )


def _break_wait_s() -> float:
    """How long reads under way may go on after a lease break: a second less than the kernel waits for us."""
    try:
        return max(float(LEASE_BREAK_TIME.read_text()) - 1.0, 0.5)
    except (OSError, ValueError):
        return 10.0


class _LeaseWatch:
    """This process's read leases and their ``SIGIO``: off until ``watch_leases`` turns it on."""

    def __init__(self) -> None:
        self.watching = False
        self._signals: queue.SimpleQueue[int] = queue.SimpleQueue()  # put() is safe in a signal handler
        self._guards: weakref.WeakSet[FileGuard] = weakref.WeakSet()
        self._files: weakref.WeakSet[HeldFile] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._refusal_logged = False

    def start(self) -> None:
        """Handle ``SIGIO`` (its default action ends the process) and start the thread that answers lease breaks."""
        if self.watching:
            return
        signal.signal(signal.SIGIO, self._on_signal)  # ValueError outside the main thread: leases stay off
        threading.Thread(target=self._keep, name="esrr-lease-watch", daemon=True).start()
        self.watching = True

    def _on_signal(self, signum: int, frame: object) -> None:
        self._signals.put(signum)  # nothing that takes a lock: the main thread may hold any

    def _keep(self) -> None:
        while True:
            self._signals.get()
            with self._lock:
                guards, files = list(self._guards), list(self._files)
            for guard in guards:  # SIGIO says no more than that a lease breaks: each guard looks at its own
                guard.lease_broken()
            for file in files:  # leased by a version that failed to open, not yet collected: nothing reads it
                if file.leased and not file.guarded and not file.lease_intact():
                    file.release_lease()

    def guard(self, guard: FileGuard) -> None:
        """Tell ``guard`` when one of its leases breaks."""
        with self._lock:
            self._guards.add(guard)

    def lease(self, file: HeldFile) -> bool:
        """Take a read lease on ``file`` when watching; False where none is granted (logged once a process)."""
        if not self.watching:
            return False
        try:
            fcntl.fcntl(file.descriptor, F_SETLEASE, fcntl.F_RDLCK)
        except OSError as error:
            self._refused(file, error)
            return False
        with self._lock:
            self._files.add(file)
        return True

    def _refused(self, file: HeldFile, error: OSError) -> None:
        if error.errno == errno.EAGAIN:
            raise FileBeingWritten(errno.EAGAIN, f"{file.name} is open for writing by another process") from None
        if not self._refusal_logged:
            self._refusal_logged = True
            log.warning(
                "no read lease on the served index files (%s: %s): they are checked by their fstat "
                "before and after each read instead, and a file cut short during a read can end the "
                "process; run the gateway as the owner of the index files, on a local file system",
                file.name,
                error.strerror,
            )


_WATCH = _LeaseWatch()


def watch_leases() -> bool:
    """Lease the files opened from now on, and answer their breaks; only from the main thread of a process that
    serves (``esrr serve``), since a ``SIGIO`` handler is installed. False where Python cannot (not the main thread)."""
    try:
        _WATCH.start()
    except ValueError:
        return False
    return True


def leases_watched() -> bool:
    """Whether this process leases the files it holds."""
    return _WATCH.watching


def map_npy(path: Path) -> tuple[np.ndarray, HeldFile]:
    """A read-only array mapped from a ``.npy`` file, and the held file it is mapped from.

    ``FileNotFoundError``/``OSError`` as ``os.open`` raises them; ``NotNumpyError`` when the
    file is not a ``.npy`` array (or is shorter than its header says).
    """
    held = HeldFile(path)
    with open(held.descriptor, "rb", closefd=False) as stream:
        try:
            version = np.lib.format.read_magic(stream)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
            else:
                raise NotNumpyError(f"a .npy file of version {version}, which this code does not map")
        except (ValueError, EOFError) as error:  # numpy's own text would suggest allow_pickle
            raise NotNumpyError(f"not a readable numeric .npy array ({type(error).__name__})") from None
        offset = stream.tell()
    if dtype.hasobject:
        raise NotNumpyError("a .npy array of Python objects, not a readable numeric .npy array")
    count = int(np.prod(shape))
    if offset + count * dtype.itemsize > held.opened.size:
        raise NotNumpyError(f"only {held.opened.size} bytes long, shorter than the {shape} array its header announces")
    if held.opened.size == 0 or count == 0:
        array = np.zeros(shape, dtype=dtype)
    else:
        mapped = mmap.mmap(held.descriptor, 0, access=mmap.ACCESS_READ)
        array = np.frombuffer(mapped, dtype=dtype, count=count, offset=offset)
        array = array.reshape(shape, order="F" if fortran else "C")
    return array, held


def map_bytes(path: Path) -> tuple[np.ndarray, HeldFile]:
    """A whole file as a read-only uint8 array mapped from a held descriptor, and that held file."""
    held = HeldFile(path)
    if held.opened.size == 0:
        return np.zeros(0, dtype=np.uint8), held
    mapped = mmap.mmap(held.descriptor, 0, access=mmap.ACCESS_READ)
    return np.frombuffer(mapped, dtype=np.uint8), held
