"""The real coordinator (it spawns the workers and EPLB) as a child process of a Python test.

    class HttpCluster(weir_cluster.Cluster):
        def ready(self):
            return self.http is not None and http_get("/ready")[0] == 200

    CLUSTER = HttpCluster(extra_args=["--http_listen=127.0.0.1:0"])
    CLUSTER.start()            # raises RuntimeError with the log's tail (stopped)
    ...
    CLUSTER.shutdown(expected_children=CLUSTER.workers + 1)  # raises AssertionError

The binaries come from the runfiles (WEIR_RUNFILES_ROOT, set by tests/python_env.sh); the
address files and the model cache live in TEST_TMPDIR, the log in the test's undeclared
outputs. The coordinator gets PR_SET_PDEATHSIG, so a killed test leaves nothing behind.

Thread safety: not thread-safe; one test thread starts and stops a Cluster.
"""

import os
import signal
import subprocess
import sys
import time

ROOT = os.environ["WEIR_RUNFILES_ROOT"]
TMP = os.environ["TEST_TMPDIR"]
MODEL_DIR = os.path.join(ROOT, "models", "random", "tiny")

# Generous: 2 cores shared with other cluster tests.
STARTUP_TIMEOUT_S = 180
SHUTDOWN_TIMEOUT_S = 60


def children(pid):
    """Direct children of `pid`, from /proc."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def descendants(pid):
    """Children of `pid`, their children, and so on (depth first)."""
    out = []
    for child in children(pid):
        out.append(child)
        out.extend(descendants(child))
    return out


def alive(pid):
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


# The coordinator gets SIGTERM when this test process dies, so a killed test
# leaves no coordinator behind (its children follow it). util-linux's setpriv
# sets the death signal and execs the coordinator (the signal survives exec).
# Not a preexec_fn: that makes Python fork() instead of vfork(), and fork runs
# grpcio's pthread_atfork handlers, which restart its event-engine poller in
# the child; the child then closes every descriptor above 2 before exec, and
# that poller aborted on its closed epoll descriptor (SIGABRT, exit -6, before
# the coordinator ever ran: seen once in CI).
_DIE_WITH_PARENT = ["setpriv", "--pdeathsig", "TERM", "--"]


class Cluster:
    """coordinator/main on loopback (port 0) with `workers` workers on models/random/tiny.

    Subclasses say when the cluster serves (ready) and may release their
    connections before SIGTERM (close). After start(): `address` is the gRPC
    address, `http` the HTTP address when the coordinator serves HTTP (else None),
    `proc` the subprocess.Popen.
    """

    def __init__(self, workers=2, name="coordinator", extra_args=()):
        self.workers = workers
        self.name = name
        self.extra_args = list(extra_args)
        self.address_file = os.path.join(TMP, f"{name}.addr")
        self.http_address_file = self.address_file + ".http"
        log_dir = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", TMP)
        self.log_path = os.path.join(log_dir, f"{name}.log")
        self.proc = None
        self.address = None  # "host:port" of the gRPC server
        self.http = None  # "host:port" of the HTTP server

    def ready(self):
        """Returns True once the cluster serves; polled every 0.1 s by start()."""
        raise NotImplementedError

    def close(self):
        """Releases the test's connections; called by stop() before SIGTERM."""

    def log_tail(self, lines=60):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return "(no log)"

    def start(self):
        """Starts the coordinator and waits until ready() (at most
        STARTUP_TIMEOUT_S), then prints the addresses and the start-up time to
        stderr. Raises RuntimeError with the log's tail when the coordinator
        exits first or the time runs out; on any exception it stops the
        coordinator before raising."""
        started = time.monotonic()
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        http = f", HTTP at {self.http}" if self.http else ""
        print(f"{self.name} ready at {self.address}{http} in "
              f"{time.monotonic() - started:.1f} s", file=sys.stderr)

    def _start(self):
        argv = [
            os.path.join(ROOT, "coordinator", "main"),
            "--listen=127.0.0.1:0",
            f"--address_file={self.address_file}",
            f"--model_dir={MODEL_DIR}",
            f"--model_cache_dir={os.path.join(TMP, 'models')}",
            f"--worker_binary={os.path.join(ROOT, 'worker', 'main')}",
            f"--eplb_binary={os.path.join(ROOT, 'eplb', 'main')}",
            f"--workers={self.workers}",
            f"--startup_timeout_s={STARTUP_TIMEOUT_S}",
        ] + self.extra_args
        for path in (self.address_file, self.http_address_file):
            if os.path.exists(path):  # A stale address must not be polled.
                os.remove(path)
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(_DIE_WITH_PARENT + argv, stdout=log,
                                     stderr=subprocess.STDOUT, cwd=TMP)
        log.close()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"coordinator exited with {self.proc.returncode} during "
                                   f"start-up:\n{self.log_tail()}")
            if self.address is None:
                self.address = _read_address(self.address_file)
            if self.http is None:
                self.http = _read_address(self.http_address_file)
            if self.ready():
                return
            time.sleep(0.1)
        raise RuntimeError(f"cluster not ready in {STARTUP_TIMEOUT_S} s:\n{self.log_tail()}")

    def stop(self):
        """SIGTERM; returns (exit code, pids of descendants still alive).

        The exit code is None when the coordinator needed SIGKILL after
        SHUTDOWN_TIMEOUT_S; descendants still alive SHUTDOWN_TIMEOUT_S later
        are SIGKILLed (so they do not leak into the next test) and returned."""
        if self.proc is None or self.proc.poll() is not None:
            return (self.proc.returncode if self.proc else None), []
        family = descendants(self.proc.pid)
        self.close()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=SHUTDOWN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            code = None
        deadline = time.monotonic() + SHUTDOWN_TIMEOUT_S
        survivors = [p for p in family if alive(p)]
        while survivors and time.monotonic() < deadline:
            time.sleep(0.1)
            survivors = [p for p in family if alive(p)]
        for pid in survivors:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        return code, survivors

    def shutdown(self, expected_children=None):
        """stop(), then raises AssertionError unless the coordinator exited 0,
        had `expected_children` descendants (when not None) and none of them
        outlived it."""
        family = descendants(self.proc.pid) if self.proc else []
        code, survivors = self.stop()
        if code != 0:
            raise AssertionError(f"{self.name} exit code {code} after SIGTERM:\n"
                                 f"{self.log_tail()}")
        if expected_children is not None and len(family) != expected_children:
            raise AssertionError(f"expected {expected_children} processes (workers + EPLB) "
                                 f"under the {self.name}, found pids {family}")
        if survivors:
            raise AssertionError(f"processes outlived the {self.name}: {survivors}")


def _read_address(path):
    """The address in `path`, or None while the file is missing or empty."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return f.read().strip() or None
