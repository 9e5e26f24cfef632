"""Ranks forked from a warm interpreter: dist_runs.Launch's plain launches (one process a rank)
under pytest. Every multi-process test starts 2-4 interpreters, and each spent seconds importing
torch before its first line ran: most of a small run's time (issue 56, the suite's own time).
A server in each pytest worker imports torch once, then forks each rank on request. The child sets
its own process group, environment, folder and log, and then runs the worker script as
`python script.py` would, at the top level of the interpreter: its exit status is the script's,
and its exit handlers (the tool's drain of the writer thread) run as they do in a fresh process.

Each launch is forked from a server started with the launch's own environment (but for the
rank's own variables), so nothing read while importing torch can differ; a test that changed
os.environ gets a server of its own. A server is single-threaded (forking a process with threads
is unsafe) and reaps its children itself; the test reads their exit statuses from it.

Client: WarmForks.start(cmd, env, cwd, log) -> a Popen-like object, or None to start afresh.
Server: python zygote.py MODULES (the extra preload, comma-separated; stdin: one JSON request a
line; stdout: "started T PID", "exited PID STATUS")."""
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence

# A rank's own, and pytest's name of the running test: these may differ from the server's
# environment (the child gets the launch's own in full).
RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "PYTEST_CURRENT_TEST")
# What every rank imports: torch, and on torch 2 torch._dynamo (seconds more: the first optimizer a
# rank makes imports it). A launch may name more (WarmForks.start's preload: DeepSpeed, msprobe),
# and gets a server of its own that imported them too.
PRELOAD = ("torch", "torch.distributed")
PRELOAD_WHERE_PRESENT = ("torch._dynamo",)


# --- the server -------------------------------------------------------------------------------------

def _child(request: dict, protocol, devnull: int, log: int) -> str:
    """In the forked child: becomes the rank; returns the script to run."""
    try:
        os.setpgid(0, 0)  # a group of its own, as dist_runs.OWN_GROUP gives a started process
        protocol.close()
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        if request.get("stderr"):  # stdout and stderr apart, as subprocess.run(capture_output=True)
            err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(err, 2)
            os.close(err)
        os.close(log)
        os.close(devnull)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        script = os.path.abspath(request["argv"][0])
        sys.argv = list(request["argv"])
        # "path0": "" for code that `python -c` would run (sys.path[0] the folder it runs in).
        sys.path[0] = request.get("path0", os.path.dirname(script))
        return script
    except BaseException:  # noqa: B902 - nothing of the server may run on in a child
        import traceback
        traceback.print_exc()
        os._exit(1)


def serve(extra: List[str]) -> Optional[str]:
    """The server's loop; returns (in a forked child only) the script that child runs."""
    import importlib.util
    present = [name for name in PRELOAD_WHERE_PRESENT if importlib.util.find_spec(name) is not None]
    for name in (*PRELOAD, *present, *extra):
        __import__(name)
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)  # nothing but the protocol reaches the test through the pipe
    children: Dict[int, str] = {}
    pending = b""
    while True:
        ready, _, _ = select.select([0], [], [], 0.02)
        if ready:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                return None  # the test process has gone
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                # Made before the fork, as Popen's caller makes it: it exists once "started" is said.
                log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                pid = os.fork()
                if pid == 0:
                    return _child(request, protocol, devnull, log)
                os.close(log)
                children[pid] = request["token"]
                protocol.write(f"started {request['token']} {pid}\n")
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                del children[pid]
                protocol.write(f"exited {pid} {os.waitstatus_to_exitcode(status)}\n")


# --- the client -------------------------------------------------------------------------------------

class ForkedRank:
    """What dist_runs.Launch asks of a subprocess.Popen, for a rank the server forked."""

    def __init__(self, forks: "WarmForks", pid: int, args: List[str]) -> None:
        self._forks, self.pid, self.args = forks, pid, args

    @property
    def returncode(self) -> Optional[int]:
        return self._forks.status(self.pid)

    def poll(self) -> Optional[int]:
        return self.returncode

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.01)
        return self.returncode


class WarmForks:
    """A server of this process (a pytest worker), one per environment its launches had: a test
    that changed os.environ gets a server of its own, started at its first launch."""
    _servers: Dict[tuple, "WarmForks"] = {}
    KEPT = 3  # servers kept at once: the oldest idle one ends when a fourth starts

    def __init__(self, env: Dict[str, str], preload: Sequence[str] = ()) -> None:
        self.env = env
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), ",".join(preload)], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._lock = threading.Condition()
        self._started: Dict[int, int] = {}
        self._exits: Dict[int, int] = {}
        self._next = 0
        threading.Thread(target=self._read, daemon=True).start()

    @classmethod
    def start(cls, cmd: List[str], env: Dict[str, str], cwd: str, log: str,
              preload: Sequence[str] = (), **more: str) -> Optional[ForkedRank]:
        """The rank forked from the warm server, or None: start it afresh. preload: the modules
        its script imports besides torch, imported once by the server (they must start no thread
        at import, and read no variable of the rank's own)."""
        if cmd[0] != sys.executable or len(cmd) < 2 or cmd[1].startswith("-"):
            return None
        base = {k: v for k, v in env.items() if k not in RANK_VARIABLES}
        key = (tuple(preload), tuple(sorted(base.items())))
        server = cls._servers.get(key)
        if server is not None and server.proc.poll() is not None:
            server = None  # it died: a new one
        if server is None:
            idle = [k for k, s in cls._servers.items() if not s.busy()]
            while len(cls._servers) >= cls.KEPT and idle:
                cls._servers.pop(idle.pop(0)).close()
            server = cls._servers[key] = WarmForks(base, preload)
        return server.fork(cmd, env, cwd, log, **more)

    def fork(self, cmd: List[str], env: Dict[str, str], cwd: str, log: str, **more: str) -> Optional[ForkedRank]:
        """more: "stderr" (a file of its own), "path0" (sys.path[0])."""
        with self._lock:
            token = self._next
            self._next += 1
        request = {"token": token, "argv": cmd[1:], "env": env, "cwd": str(cwd), "log": str(log), **more}
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            return None
        with self._lock:
            # The server imports torch before it reads the first request.
            if not self._lock.wait_for(lambda: token in self._started or self.proc.poll() is not None,
                                       timeout=120):
                return None
            pid = self._started.get(token)
        return None if pid is None else ForkedRank(self, pid, cmd)

    def busy(self) -> bool:
        """Whether a rank it forked has not been reported as ended."""
        with self._lock:
            return any(pid not in self._exits for pid in self._started.values())

    def close(self) -> None:
        """Ends the server (its ranks have all ended: busy() is False)."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()

    def status(self, pid: int) -> Optional[int]:
        with self._lock:
            return self._exits.get(pid)

    def _read(self) -> None:
        for line in self.proc.stdout:
            kind, *fields = line.decode().split()
            with self._lock:
                if kind == "started":
                    self._started[int(fields[0])] = int(fields[1])
                elif kind == "exited":
                    self._exits[int(fields[0])] = int(fields[1])
                self._lock.notify_all()
        with self._lock:
            self._lock.notify_all()


def _main_module_of(script: str):
    """A fresh __main__ for `script`, as `python script.py` makes it. The server's own module stays
    in sys.modules under another name: a frame of a file no module names makes inspect.getmodule
    walk every module again, and msprobe's stack capture calls it for each frame of each call
    (runpy's frames made its runs twice as slow as in a fresh process)."""
    import types
    sys.modules["_zygote_server"] = sys.modules["__main__"]
    main = types.ModuleType("__main__")
    main.__file__ = script
    sys.modules["__main__"] = main
    return main


if __name__ == "__main__":
    _script = serve([name for name in sys.argv[1].split(",") if name])
    if _script is not None:  # a forked rank: the worker script, as `python script.py` runs it
        with open(_script, "rb") as _source:
            _code = compile(_source.read(), _script, "exec")
        # At the top level: the script's frame has this one alone below it.
        exec(_code, _main_module_of(_script).__dict__)
