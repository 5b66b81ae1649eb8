"""Candidate kernels run in a worker process: verification and tuning.

A kernel BOO has not verified may be wrong in the worst way: miscompiled or corrupt code can
fault (SIGSEGV on the CPU; an illegal address on a GPU, which poisons the whole CUDA
context) or never finish. So verification (:mod:`boo_core.verify.verdicts`) and the tuner
run each candidate in a worker process of BOO's own (a Python running :func:`main`),
as Inductor's autotuning does: the worker loads the kernel already built, checks it on fresh
random inputs against float64 PyTorch, times it for the tuner, and answers. A worker that
dies while it runs a kernel, or does not answer within ``BOO_WORKER_TIMEOUT`` seconds (it is
then stopped), gives that kernel a failed verdict that says so; the next kernel gets a fresh
worker. The caller's process, and its CUDA context, run only kernels that passed.

One worker serves a process (its threads take turns), started on first use. It exits when
the caller closes its pipe (the caller ended), when the caller dies (Linux), or after
``BOO_WORKER_IDLE`` seconds without work (60), so that its CUDA context does not hold GPU
memory for the rest of a training run. A kernel the worker cannot take (its signature's
class cannot be imported there: one defined in a ``__main__`` script), or a process that
cannot start one, is checked in the calling process, with a log line saying so.
``BOO_WORKER=0`` checks every kernel in the calling process (no start-up cost; a faulting
kernel then ends the caller).
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import queue
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

from ..errors import describe_error, is_plugins_failure
from ..kernels.python_child import python_command
from ..settings import get_settings, use_settings
from ..verify import verdicts
from .launchable import Launchable
from .timing import timer_for

logger = logging.getLogger(__name__)

__all__ = ["WorkerVerdict", "checker", "close_worker", "verify_and_time"]

#: Seconds a new worker may take to import what it needs and say it is ready.
STARTUP_SECONDS = 300.0
_READY = b"ready"
_HEADER = struct.Struct("<Q")


@dataclass(frozen=True)
class WorkerVerdict:
    """What the worker answered for one kernel: its verdict (``pass`` or ``fail: ...``)
    and, when it was timed, the samples in microseconds."""

    verdict: str
    samples_us: tuple[float, ...] | None = None


class _Unserved(Exception):
    """The worker could not take this kernel (not the kernel's fault): check it here."""


def checker() -> Callable[[Any], str]:
    """How kernels are checked under the current settings: in the worker, or here."""
    return _check_in_worker if get_settings().worker else verdicts.check


def _check_in_worker(launchable: Any) -> str:
    """:func:`~boo_core.verify.verdicts.check` of ``launchable``, run by the worker."""
    try:
        return _WORKER.run(launchable, None).verdict
    except _Unserved as e:
        logger.info("%s: checked in this process (%s)", launchable.signature.func_name, e)
        return verdicts.check(launchable)


def verify_and_time(launchable: Any, timer: Any, iterations: int, warmup: int) -> WorkerVerdict:
    """Check ``launchable`` and, if it passed, time it (``timer``: a
    :mod:`~boo_core.runtime.timing` timer, used where the kernel runs): in the worker
    unless ``BOO_WORKER=0`` (or the worker cannot take it)."""
    if get_settings().worker:
        try:
            return _WORKER.run(launchable, (iterations, warmup))
        except _Unserved as e:
            logger.info("%s: checked and timed in this process (%s)", launchable.signature.func_name, e)
    return _verify_and_time_here(launchable, timer, iterations, warmup)


def close_worker() -> None:
    """Stop this process's worker, if it runs (the next check starts a new one)."""
    _WORKER.close()


def _verify_and_time_here(launchable: Any, timer: Any, iterations: int, warmup: int) -> WorkerVerdict:
    verdict = verdicts.check(launchable)
    if verdict != verdicts.PASS:
        return WorkerVerdict(verdict)
    device = launchable.device.torch_device
    inputs = launchable.signature.get_sample_args(device=device)
    stats = timer(lambda: launchable(*inputs), device=device, iterations=iterations, warmup=warmup)
    return WorkerVerdict(verdict, tuple(stats.samples_us))


# -- the caller's side -----------------------------------------------------------------------


class _Spawner:
    """Starts worker processes from one thread that lives as long as this process. Linux sends
    a child its parent-death signal when the *thread* that started it ends: a worker started
    from a short-lived thread (a pool's, a request's) would be killed with that thread, maybe
    in the middle of another thread's check."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: queue.SimpleQueue[tuple[tuple[Any, ...], dict[str, Any], queue.SimpleQueue[Any]]] | None = None
        self._owner = 0  # the pid whose thread serves: a forked child starts its own

    def start(self, *args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        """``subprocess.Popen(*args, **kwargs)``, run on the spawning thread."""
        with self._lock:
            if self._requests is None or self._owner != os.getpid():
                self._requests, self._owner = queue.SimpleQueue(), os.getpid()
                threading.Thread(target=self._serve, args=(self._requests,), name="boo-worker-spawner",
                                 daemon=True).start()
            requests = self._requests
        done: queue.SimpleQueue[Any] = queue.SimpleQueue()
        requests.put((args, kwargs, done))
        started = done.get()
        if isinstance(started, BaseException):
            raise started
        return started

    @staticmethod
    def _serve(requests: queue.SimpleQueue[Any]) -> None:
        while True:
            args, kwargs, done = requests.get()
            try:
                done.put(subprocess.Popen(*args, **kwargs))
            except BaseException as e:  # the caller raises it
                done.put(e)


class _Worker:
    """The handle on this process's worker (started on first use, restarted after a failure)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._errors: BinaryIO | None = None
        self._owner = 0  # the pid that started it: a forked child starts its own

    def run(self, launchable: Any, timing: tuple[int, int] | None) -> WorkerVerdict:
        settings = get_settings()
        envelope = {"path": list(sys.path), "settings": settings}
        try:
            envelope["kernel"] = pickle.dumps((launchable.signature, launchable.device, launchable.kernel,
                                               launchable.driver, timing), protocol=pickle.HIGHEST_PROTOCOL)
            message = pickle.dumps(envelope, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # a signature pickle cannot carry (a local class, a lambda field)
            raise _Unserved(f"it cannot be sent to a worker process: {describe_error(e)}") from None
        with self._lock:
            for attempt in (1, 2):  # a worker that had just exited, idle, gets a fresh one once
                process = self._started()
                try:
                    _send(process.stdin, message)
                    answer = self._answer(process, settings.worker_timeout)
                except _Gone as gone:
                    code, last_words = self._stop()
                    if code == 0 and attempt == 1:
                        continue
                    return WorkerVerdict(f"fail: {gone.reason or _death(code)}{last_words}")
                if "unserved" in answer:
                    raise _Unserved(answer["unserved"])
                return WorkerVerdict(answer["verdict"], answer.get("samples_us"))
        raise AssertionError("unreachable")

    def _started(self) -> subprocess.Popen[bytes]:
        if self._process is not None and self._owner != os.getpid():
            self._process = self._errors = None  # the parent's worker (this process was forked): not ours to stop
        if self._process is not None and self._process.poll() is not None:
            self._stop()  # it exited (idle): reap it
        if self._process is not None:
            return self._process
        if not sys.executable:
            raise _Unserved("this Python has no executable to start a worker process with")
        self._errors = tempfile.TemporaryFile(prefix="boo-worker-")
        try:
            self._process = _SPAWNER.start(python_command(_START), stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, stderr=self._errors, close_fds=True)
        except OSError as e:
            self._stop()
            raise _Unserved(f"no worker process could be started ({e})") from None
        self._owner = os.getpid()
        try:  # its imports take seconds: a kernel's time starts once it is ready
            ready = _receive(self._process.stdout, time.monotonic() + STARTUP_SECONDS)
        except _Gone:
            ready = None
        if ready != _READY:
            code, last_words = self._stop()
            raise _Unserved(f"the worker process did not start (exit status {code}{last_words})")
        return self._process

    def _answer(self, process: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        data = _receive(process.stdout, deadline)
        if data is None:
            raise _Gone(f"it did not finish within {timeout:g} s (BOO_WORKER_TIMEOUT; the worker process was "
                        "stopped)")
        return pickle.loads(data)

    def _stop(self) -> tuple[int | None, str]:
        """Stop the worker: its exit status (negative: the signal that ended it) and the last
        line it wrote to its stderr, for a verdict (``"; its last words: ..."``, or "")."""
        process, self._process = self._process, None
        code = None
        if process is not None:
            if process.poll() is None:
                process.kill()
            for stream in (process.stdin, process.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            code = process.wait()
        return code, self._last_words()

    def _last_words(self) -> str:
        errors, self._errors = self._errors, None
        if errors is None:
            return ""
        try:
            errors.seek(max(0, errors.seek(0, os.SEEK_END) - 2000))
            lines = [line for line in errors.read().decode(errors="replace").splitlines() if line.strip()]
        except OSError:
            lines = []
        finally:
            errors.close()
        return f"; its last words: {lines[-1].strip()[:300]}" if lines else ""

    def close(self) -> None:
        with self._lock:
            if self._owner == os.getpid():
                self._stop()
            self._process = self._errors = None


class _Gone(Exception):
    """The worker gave no answer: it died (``reason`` empty) or ran out of time."""

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.reason = reason


def _death(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"it crashed the worker process ({name})"
    return f"the worker process exited with status {code} while running it"


def _send(stream: Any, data: bytes) -> None:
    try:
        stream.write(_HEADER.pack(len(data)) + data)
        stream.flush()
    except (BrokenPipeError, OSError, ValueError):
        raise _Gone() from None


def _receive(stream: Any, deadline: float | None) -> bytes | None:
    """One message from ``stream``; None when ``deadline`` passed first; :class:`_Gone` at
    the end of the stream."""
    fd = stream.fileno()
    header = _read_exactly(fd, _HEADER.size, deadline)
    if header is None:
        return None
    return _read_exactly(fd, _HEADER.unpack(header)[0], deadline)


def _read_exactly(fd: int, size: int, deadline: float | None) -> bytes | None:
    chunks, left = [], size
    while left:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([fd], [], [], wait)
        if not ready:
            return None
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise _Gone()
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


_SPAWNER = _Spawner()
_WORKER = _Worker()
atexit.register(close_worker)


# -- the worker's side -----------------------------------------------------------------------


def _serve(message: bytes) -> dict[str, Any]:
    """One kernel checked (and timed): the answer to send back."""
    envelope = pickle.loads(message)
    for entry in reversed(envelope["path"]):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    try:
        use_settings(envelope["settings"])
        signature, device, kernel, driver, timing = pickle.loads(envelope["kernel"])
        launchable = Launchable(signature, device, kernel, driver)
    except BaseException as e:
        if not is_plugins_failure(e):
            raise
        return {"unserved": f"the worker process could not load it: {describe_error(e)}"}
    if timing is None:
        return {"verdict": verdicts.check(launchable)}
    found = _verify_and_time_here(launchable, timer_for(device.torch_device), *timing)
    return {"verdict": found.verdict, "samples_us": found.samples_us}


def _die_with_parent() -> None:
    """Ask Linux to end this process when its parent ends (a hung kernel outlives no one)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main() -> int:
    """The worker's loop: a message in, an answer out, until the pipe closes or it idles."""
    _die_with_parent()
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever a plugin prints goes to stderr, not into the answers
    requests = sys.stdin.buffer
    _send(answers, _READY)
    while True:
        # this process's setting, then the caller's, which each message brings
        ready, _, _ = select.select([requests.fileno()], [], [], get_settings().worker_idle)
        if not ready:
            return 0
        try:
            message = _receive(requests, None)
        except _Gone:
            return 0
        _send(answers, pickle.dumps(_serve(message), protocol=pickle.HIGHEST_PROTOCOL))


#: The worker's program. Not ``python -m``: the package imports this module first, and runpy
#: warns of running a module already imported.
_START = f"import sys; from {__name__} import main; sys.exit(main())"
