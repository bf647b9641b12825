"""Headless Chromium, driven through Playwright, with the measuring page loaded.

Chromium is the system's (Debian's `chromium` package, or DEVICEFIT_CHROMIUM): Playwright drives
it through `executable_path`, and nothing is downloaded. The flags turn on what the browser
kinds need and nothing that talks to the network:
- WebGPU: `--enable-unsafe-webgpu --enable-features=Vulkan`. Where no GPU adapter answers (a
  machine without a GPU), the browser is started again with `--use-webgpu-adapter=swiftshader`,
  Chromium's software Vulkan, and every row and detection says `architecture: swiftshader`.
- WebNN: `--enable-features=WebMachineLearningNeuralNetwork`; whether a context can be created
  is the browser's to say, and its error is the reason recorded.

A call into the page that does not answer in time (a page stuck in a loop, a GPU that never
returns) is ended by killing the browser's processes from a watchdog thread: the call raises
BrowserTimeout, and the next call starts a fresh browser.
"""
from __future__ import annotations

import contextlib
import os
import queue
import secrets
import shutil
import tempfile
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from benchmark_runners.paths import worker_scratch
from models.errors import DevicefitError

CHROMIUM_ENV = "DEVICEFIT_CHROMIUM"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# Quiet on a closed network: no background fetches, no component updates, no sync, no QUIC.
BASE_FLAGS = ("--no-sandbox", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--disable-quic", "--disable-default-apps", "--disable-extensions", "--mute-audio")
API_FLAGS = ("--enable-unsafe-webgpu", "--enable-features=Vulkan,WebMachineLearningNeuralNetwork")
SOFTWARE_WEBGPU_FLAGS = ("--use-webgpu-adapter=swiftshader", "--enable-unsafe-swiftshader")
START_TIMEOUT_S = 60.0


class BrowserUnavailable(DevicefitError, RuntimeError):
    """Chromium, Playwright or onnxruntime-web is missing here (the reason says how to install it)."""


class BrowserPageError(DevicefitError, RuntimeError):
    """The page threw: its own error message, as the browser gave it."""


class BrowserTimeout(DevicefitError, TimeoutError):
    """The page did not answer in time; the browser was killed."""


def chromium_path() -> str | None:
    configured = os.environ.get(CHROMIUM_ENV)
    if configured:
        return configured if Path(configured).is_file() else None
    return next((shutil.which(name) for name in CHROMIUM_NAMES if shutil.which(name)), None)


def unavailable_reason() -> str | None:
    """Why no browser measurement can run here (None: Chromium, Playwright and onnxruntime-web are all present)."""
    from benchmark_runners.browser.server import ORT_DIST

    problems = []
    if chromium_path() is None:
        where = f"{CHROMIUM_ENV}={os.environ[CHROMIUM_ENV]} is not a file" if os.environ.get(CHROMIUM_ENV) else \
            f"none of {', '.join(CHROMIUM_NAMES)} is on PATH"
        problems.append(f"no Chromium ({where}; install it with `apt-get install chromium`, or `make install-browser` as root)")
    try:
        import playwright  # noqa: F401
    except ImportError:
        problems.append("the Python package playwright is not installed (make install)")
    if not (ORT_DIST / "ort.all.min.js").is_file():
        problems.append(f"onnxruntime-web is not installed in {ORT_DIST.parents[1]} (run `npm ci` there, or `make install-browser`)")
    return "; ".join(problems) or None


class _BrowserThread:
    """The one thread of this process that runs Playwright. Its sync API runs an asyncio loop in
    the thread that starts it, and that thread could then never `asyncio.run` again (Dagster's
    in-process executor, uvicorn and the test suite all do); confined to a thread of its own, it
    leaves every caller's thread as it found it. Everything Playwright is submitted here."""

    def __init__(self) -> None:
        self.jobs: queue.Queue = queue.Queue()
        self.driver = None
        self.driver_temp: Path | None = None  # the scratch directory the driver was started with (_driver_temp_dir)
        threading.Thread(target=self._serve, name="devicefit-playwright", daemon=True).start()

    def _serve(self) -> None:
        while True:
            job, done = self.jobs.get()
            try:
                done.set_result(job())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, who raises it
                done.set_exception(exc)

    def run(self, job):
        """job() on the Playwright thread; its result, or its exception raised here."""
        done: Future = Future()
        self.jobs.put((job, done))
        return done.result()

    def playwright(self):
        """The driver (started once, on this thread; it exits with the process, whose pipe it reads)."""
        if self.driver is not None and self.driver_temp is not None and not self.driver_temp.is_dir():
            # Its temporary directory is gone (a sweep's worker never outlives its own; a test
            # process that played one may): it could make no profile there. A fresh driver.
            try:
                self.driver.stop()
            except Exception:  # noqa: BLE001 - stopping a driver that may already be gone
                pass
            self.driver = None
        if self.driver is None:
            from playwright.sync_api import sync_playwright

            self.driver_temp = worker_scratch()
            with _driver_temp_dir(self.driver_temp):
                self.driver = sync_playwright().start()
        return self.driver


@contextlib.contextmanager
def _driver_temp_dir(scratch: Path | None):
    """In a sweep's worker (`scratch`: its scratch directory), start Playwright's driver with it as
    its TMPDIR. The driver (node) makes each browser's profile (playwright_chromiumdev_profile-*)
    and artifacts directory in its own temporary directory and removes them when the browser
    closes, but a worker the sweep kills at its config's timeout takes the driver with it first:
    each such kill left a profile in /tmp. In the scratch directory they go with it. Set only while
    the driver starts (it copies this process's environment then), a fraction of a second in
    which a worker's main thread waits for this one and its other threads (the lifeline, idle
    OpenMP workers) read no variable. The process's own temporary directory, which the device
    locks' default directory is under, is resolved before and does not move. Outside a worker
    nothing changes."""
    if scratch is None:
        yield
        return
    tempfile.gettempdir()  # cached from here on: this process's own temporary files stay where they were
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(scratch)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = before


_thread_lock = threading.Lock()
_thread: list[_BrowserThread] = []


def _on_playwright_thread(job):
    with _thread_lock:
        if not _thread:
            _thread.append(_BrowserThread())
    return _thread[0].run(job)


def _processes_with(marker: str) -> list:
    """The processes of the browser launched with `marker` among its switches: its main process
    and everything under it (renderers, the GPU process, zygotes)."""
    import psutil

    for process in psutil.Process().children(recursive=True):
        try:
            if marker in process.cmdline():
                return [process, *process.children(recursive=True)]
        except psutil.Error:
            continue
    return []


def _driver_processes() -> list:
    """Playwright's driver (node), which relays every call to the page."""
    import psutil

    out = []
    for process in psutil.Process().children(recursive=True):
        try:
            if any("playwright" in part for part in process.cmdline()[:3]):
                out.append(process)
        except psutil.Error:
            continue
    return out


# Chromium aborts ("Socket path too long") where its singleton socket's path,
# <TMPDIR>/org.chromium.Chromium.XXXXXX/SingletonSocket, exceeds a Unix socket's 107 bytes.
SOCKET_PATH_MAX = 107
SOCKET_SUFFIX = len("/org.chromium.Chromium.XXXXXX/SingletonSocket")


def _chromium_temp_dir() -> Path:
    """A fresh directory for one browser's temporary files: in the worker's scratch directory
    where its path leaves room for the socket, else in the system's temporary directory."""
    scratch = worker_scratch()
    if scratch is not None:
        inside = Path(tempfile.mkdtemp(prefix="chromium-", dir=scratch))
        if len(str(inside)) + SOCKET_SUFFIX <= SOCKET_PATH_MAX:
            return inside
        inside.rmdir()
    return Path(tempfile.mkdtemp(prefix="devicefit-chromium-"))


class Browser:
    """One headless Chromium with the measuring page open. `software_webgpu` starts it on
    SwiftShader's adapter (the fallback where no GPU adapter answers)."""

    def __init__(self, software_webgpu: bool = False) -> None:
        reason = unavailable_reason()
        if reason:
            raise BrowserUnavailable(reason)
        from benchmark_runners.browser.server import StaticServer

        self.flags = [*BASE_FLAGS, *API_FLAGS, *(SOFTWARE_WEBGPU_FLAGS if software_webgpu else ())]
        # An inert switch naming this browser's processes, so a watchdog kills this one only
        # (another Browser, or the report's PNG export, may run Chromium beside it).
        self.marker = f"--devicefit-browser={secrets.token_hex(8)}"
        self.executable = chromium_path()
        self.server = StaticServer()
        # Chromium's own temporary files (its singleton socket's directory) go here, removed on
        # close: a browser the watchdog kills cannot remove them itself, and each hung page left
        # an org.chromium.Chromium.* directory in /tmp. In a sweep's worker it is inside the
        # worker's scratch directory, which the sweep removes even when it had to kill the worker.
        self.temp_dir = _chromium_temp_dir()
        self._browser = None
        self.alive = False
        try:
            _on_playwright_thread(self._start)
        except Exception:
            self.close()
            raise
        self.alive = True

    def _start(self) -> None:
        driver = _thread[0].playwright()
        self._browser = driver.chromium.launch(executable_path=self.executable, args=[*self.flags, self.marker], headless=True,
                                               timeout=START_TIMEOUT_S * 1e3, env={**os.environ, "TMPDIR": str(self.temp_dir)})
        self.version = self._browser.version
        self.page = self._browser.new_page()
        self.page.goto(self.server.origin + "/page.html", timeout=START_TIMEOUT_S * 1e3)
        self.page.wait_for_function("() => window.devicefit !== undefined && typeof ort !== 'undefined'", timeout=START_TIMEOUT_S * 1e3)

    def call(self, function: str, *args: Any, timeout_s: float) -> Any:
        """`devicefit.<function>(*args)` in the page. Beyond `timeout_s` the browser is killed and
        BrowserTimeout raised; an exception in the page raises BrowserPageError with its message."""
        from playwright.sync_api import Error as PlaywrightError

        if not self.alive:
            raise BrowserPageError("the browser was closed after an earlier failure")
        fired = threading.Event()

        def kill() -> None:
            fired.set()
            for process in self.processes():
                try:
                    process.kill()
                except Exception:  # noqa: BLE001 - already gone
                    pass

        watchdog = threading.Timer(timeout_s, kill)
        watchdog.daemon = True
        watchdog.start()
        try:
            return _on_playwright_thread(lambda: self.page.evaluate(f"(args) => devicefit.{function}(...args)", list(args)))
        except PlaywrightError as exc:
            # A killed page, or one that threw, may be left in any state: the next call gets a fresh browser.
            self.close()
            if fired.is_set():
                raise BrowserTimeout(f"the page's {function} did not answer within {timeout_s:g} s; the browser was killed") from None
            message = str(exc).split("\n")[0].removeprefix("Error: ").removeprefix("Page.evaluate: ")
            raise BrowserPageError(f"the page's {function} failed: {message}") from None
        finally:
            watchdog.cancel()

    def close(self) -> None:
        self.alive = False
        browser, self._browser = self._browser, None
        if browser is not None:
            try:
                _on_playwright_thread(browser.close)
            except Exception:  # noqa: BLE001 - closing what may already be gone
                pass
        try:
            self.server.close()
        except Exception:  # noqa: BLE001 - a server that never started
            pass
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def processes(self) -> list:
        """This browser's processes (psutil), main process first."""
        return _processes_with(self.marker)

    def helper_pids(self) -> list[int]:
        """The processes that do this browser's measurement work: its own and Playwright's driver."""
        return [p.pid for p in (*self.processes(), *_driver_processes())]

    def evaluate(self, script: str):
        """Run a script in the page as it is (tests use it to make the page misbehave)."""
        return _on_playwright_thread(lambda: self.page.evaluate(script))
