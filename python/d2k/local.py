"""A private ``d2k serve`` for one environment: the embedded default.

``d2k.make("softmax", layer=2)`` and ``gymnasium.make("d2k/softmax-L2-v0")`` with no endpoint
(no ``endpoint=`` argument and no ``$D2K_ENDPOINT``) start a :class:`LocalServer` on an ipc
socket in a private temporary folder, and the environment stops it when it is closed. An
endpoint (argument or ``$D2K_ENDPOINT``) uses that running server instead.

The server binary is, in this order: ``$D2K_BIN``; ``d2k`` bundled in the installed package
(``d2k/bin/d2k``); the build tree of the checkout the package runs from (``<repo>/build/bin/d2k``);
``d2k`` on ``PATH``. The tasks are ``$D2K_TASKS_DIR`` or the default tasks (see
:func:`d2k.registration.default_tasks_dir`).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from .errors import D2KError

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 40.0

PACKAGE_DIR = Path(__file__).resolve().parent


class ServerNotFound(D2KError):
    """No ``d2k`` server binary was found for the embedded default (see :func:`find_server_binary`)."""

    code = "client"


class ServerStartError(D2KError):
    """The embedded ``d2k serve`` exited or did not answer ``hello`` in time."""

    code = "client"


def endpoint_from_environment() -> str | None:
    """``$D2K_ENDPOINT`` when set and not empty, else None (meaning: start a private server)."""
    value = os.environ.get("D2K_ENDPOINT", "").strip()
    return value or None


def find_server_binary() -> Path:
    """The ``d2k`` binary of the embedded default; raises ServerNotFound naming where it looked."""
    env = os.environ.get("D2K_BIN")
    if env:  # asked for by name: that one or an error, never a silent fallback
        if Path(env).is_file() and os.access(env, os.X_OK):
            return Path(env)
        raise ServerNotFound(f"D2K_BIN={env} is not an executable file")
    candidates: list[tuple[str, Path | None]] = []
    candidates.append(("the installed package", PACKAGE_DIR / "bin" / "d2k"))
    candidates.append(("the checkout's build tree", PACKAGE_DIR.parents[1] / "build" / "bin" / "d2k"))
    on_path = shutil.which("d2k")
    candidates.append(("PATH", Path(on_path) if on_path else None))
    for _, path in candidates:
        if path is not None and path.is_file() and os.access(path, os.X_OK):
            return path
    looked = "; ".join(f"{where}: {path}" if path else f"{where}: no d2k" for where, path in candidates)
    raise ServerNotFound(
        "no d2k server binary for the embedded server (looked at " + looked + "). Build it "
        "(bash scripts/demo.sh or cmake), set D2K_BIN, or give an endpoint of a running server "
        "(endpoint= or D2K_ENDPOINT)")


class LocalServer:
    """``d2k serve`` on ``ipc://<private dir>/d2k.sock``, started at construction.

    Its log goes to ``<private dir>/server.log`` (:meth:`log_tail` reads it); :meth:`stop`
    (also on ``with`` exit and at garbage collection) sends SIGTERM, waits, and removes the folder.
    """

    def __init__(self, binary: str | os.PathLike[str] | None = None,
                 tasks_dir: str | os.PathLike[str] | None = None,
                 start_timeout: float = START_TIMEOUT_S) -> None:
        from .registration import default_tasks_dir

        self.binary = Path(binary) if binary is not None else find_server_binary()
        tasks = Path(tasks_dir) if tasks_dir is not None else default_tasks_dir()
        if tasks is None or not tasks.is_dir():
            raise ServerStartError(f"no tasks folder for the embedded server ({tasks}); set D2K_TASKS_DIR")
        self.tasks_dir = tasks
        self.dir = Path(tempfile.mkdtemp(prefix="d2k-local-"))
        self.endpoint = f"ipc://{self.dir / 'd2k.sock'}"
        self.log_path = self.dir / "server.log"
        self._log = open(self.log_path, "wb")
        env = dict(os.environ)
        self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [str(self.binary), "serve", "--endpoint", self.endpoint, "--tasks", str(self.tasks_dir)],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True)
        try:
            self.hello = self._wait_ready(start_timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float) -> dict:
        from .client import Client
        from .errors import ClientTimeout

        deadline = time.monotonic() + timeout
        with Client(self.endpoint, timeout=0.5) as client:
            while time.monotonic() < deadline:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise ServerStartError(
                        f"the embedded d2k serve ({self.binary}) exited with status "
                        f"{self.proc.returncode}:\n{self.log_tail()}")
                try:
                    return client.hello("d2k-python-local")
                except ClientTimeout:
                    continue  # still loading tasks or binding
        raise ServerStartError(
            f"the embedded d2k serve ({self.binary}) did not answer hello within {timeout:g} s:\n"
            f"{self.log_tail()}")

    def log_tail(self, n: int = 4000) -> str:
        try:
            self._log.flush()
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        except (OSError, ValueError):
            return ""

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int | None:
        """Stops the server (SIGTERM, then SIGKILL after STOP_TIMEOUT_S); returns its exit status."""
        proc, self.proc = self.proc, None
        status = None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            status = proc.returncode
        if not self._log.closed:
            self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return status

    def __enter__(self) -> "LocalServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __del__(self) -> None:
        try:
            self.stop()
        except Exception:
            pass


def open_client(endpoint: str | None, timeout: float | None = None):
    """The client of an environment and the private server it owns (None when it uses a running
    one): ``endpoint`` or ``$D2K_ENDPOINT`` when given, else a new :class:`LocalServer`."""
    from .client import Client

    endpoint = endpoint or endpoint_from_environment()
    if endpoint is not None:
        return Client(endpoint, timeout=timeout), None
    server = LocalServer()
    try:
        return Client(server.endpoint, timeout=timeout), server
    except BaseException:
        server.stop()
        raise
