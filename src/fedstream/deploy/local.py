"""Deployments on this machine's loopback: :class:`Processes` (a deployment's processes, every one
stopped at the end, also when something fails), :class:`LocalDeployment` (a SuperLink and one
SuperNode per client, a run submitted with ``flwr run``; the gRPC runtime's is
:class:`fedstream.deploy.runtimes.grpc_local.GrpcLocalDeployment`) and :func:`write_app`, the
folder ``flwr run`` takes."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

APP_MODULE = '''"""fedstream's parties (by the config's task) as a Flower app (deploy.local.write_app)."""

from fedstream.deploy.runtimes.flower import make_client_app, make_server_app

serverapp = make_server_app()
clientapp = make_client_app()
'''

MARKER = "FEDSTREAM_DEPLOYMENT"  # environment variable naming the processes of one LocalDeployment
QUIET_FLOWER = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1"}
# How often a SuperNode's SuperExec asks for a ClientApp task to launch: Flower's default is 1 s,
# which adds about half a second to every message; 0.05 s costs a few idle HTTP calls per second.
SUPEREXEC_POLL = {"FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.05"}


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_app(folder: Path, settings: dict | None = None, *, name: str = "fedstream-ovfl") -> Path:
    """Write a Flower app folder whose ``[tool.flwr.app.config]`` holds ``settings`` over the defaults."""
    # Flower is an optional dependency: imported when an app is written, not with this module
    from fedstream.deploy.runtimes.flower import FLWR_VERSION, resolve_settings

    settings = resolve_settings({}, settings)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = "\n".join(f"{k} = {_toml_value(v)}" for k, v in settings.items())
    (folder / "pyproject.toml").write_text(f'''[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "{name}"
version = "1.0.0"
description = "fedstream: the server party as a ServerApp, each client party as a ClientApp"
license = "MIT"
# Every machine needs `pip install "fedstream[flower]"` (tested with flwr=={FLWR_VERSION}).
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "fedstream"

[tool.flwr.app.components]
serverapp = "fedstream_app:serverapp"
clientapp = "fedstream_app:clientapp"

[tool.flwr.app.config]
{config}
''')
    (folder / "fedstream_app.py").write_text(APP_MODULE)
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def beside_interpreter(path: str) -> str:
    """``PATH`` with this interpreter's folder first: a SuperNode starts ``flower-superexec`` and
    ``flwr-clientapp`` by name, which must be this environment's also when it is not activated."""
    folder = str(Path(sys.executable).parent)
    return os.pathsep.join([folder] + [p for p in path.split(os.pathsep) if p and p != folder])


def _bin(name: str) -> str:
    """A console script of this Python's environment (Flower's commands)."""
    path = Path(sys.executable).parent / name
    return str(path) if path.exists() else name


class Processes:
    """Processes started in ``workdir`` with environment ``env``, each logging to a file there and in
    a process group of its own (stopped with its children); ``nodes``: client index -> its node's
    process. A context manager: no process it started outlives it."""

    def __init__(self, workdir: Path, env: dict):
        self.workdir, self.env = Path(workdir).resolve(), env  # the processes run in other folders
        self.nodes: dict[int, subprocess.Popen] = {}
        self.procs: list[subprocess.Popen] = []

    def _start(self, args: list[str], log: str) -> subprocess.Popen:
        """Start ``args``, its output appended to ``workdir/log``."""
        with open(self.workdir / log, "ab") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                    start_new_session=True)
        self.procs.append(proc)
        return proc

    def _finish(self, args: list[str], log: str, timeout: float) -> subprocess.CompletedProcess:
        """Run ``args`` in ``workdir`` to its end (``timeout`` seconds at most), its output appended
        to ``workdir/log``."""
        with open(self.workdir / log, "ab") as out:
            return subprocess.run(args, check=False, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                  timeout=timeout, cwd=self.workdir)

    def kill_node(self, m: int, sig: int = signal.SIGKILL) -> None:
        """Send client m's node and what it started ``sig`` (default SIGKILL: a crash, waited for)."""
        proc = self.nodes[m]
        _signal(proc, sig)
        if sig == signal.SIGKILL:
            proc.wait()

    def stop(self, grace: float = 10.0, *, terminate: bool = True) -> None:
        """Wait up to ``grace`` seconds for every process to end (``terminate``: SIGTERM them first),
        then SIGKILL each process group: children outlive their parent."""
        for proc in self.procs if terminate else ():
            if proc.poll() is None:
                _signal(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in self.procs:
            _signal(proc, signal.SIGKILL)
            proc.wait()
        self.procs.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _signal(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


class LocalDeployment(Processes):
    """SuperLink + ``n_clients`` SuperNodes on 127.0.0.1, as subprocesses; a context manager.
    ``workdir`` holds the Flower home and a log per process; SuperNode m gets ``--node-config
    'client-index=m cache-dir="WORKDIR/cache"'`` and ``node_config``. With ``credentials`` (from
    :func:`fedstream.deploy.credentials.write_credentials`) the SuperLink serves TLS and admits only
    the registered SuperNodes (``flwr supernode register``), each signing with its ``node-m.key``."""

    def __init__(self, n_clients: int, workdir: Path, *, node_config: str = "", env: dict | None = None,
                 port: int | None = None, credentials: Path | None = None):
        self.n_clients, self.node_config = n_clients, node_config
        self.credentials = Path(credentials).resolve() if credentials is not None else None
        self.port = port or free_port()
        self.node_superlink = f"127.0.0.1:{self.port}"  # what the SuperNodes connect to
        self.marker = f"{MARKER}={secrets.token_hex(8)}"  # in the environment of every process it starts
        self.home = Path(workdir).resolve() / "flwr-home"
        own = {"FLWR_HOME": str(self.home), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
               "PATH": beside_interpreter(os.environ.get("PATH", ""))}
        super().__init__(workdir, SUPEREXEC_POLL | os.environ | QUIET_FLOWER | own | (env or {})
                         | dict([self.marker.split("=")]))

    def __enter__(self) -> LocalDeployment:  # noqa: PYI034
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.home.mkdir(parents=True, exist_ok=True)
        tls = (
            f'root-certificates = "{self.credentials / "ca.crt"}"' if self.credentials else "insecure = true"
        )
        (self.home / "config.toml").write_text(
            f'[superlink]\ndefault = "fedstream-local"\n\n[superlink.fedstream-local]\n'
            f'address = "127.0.0.1:{self.port}"\n{tls}\n')
        if self.credentials:
            c = self.credentials
            security = ["--ssl-ca-certfile", str(c / "ca.crt"), "--ssl-certfile", str(c / "server.pem"),
                        "--ssl-keyfile", str(c / "server.key"), "--enable-supernode-auth"]
        else:
            security = ["--insecure"]
        try:
            self._start([_bin("flower-superlink"), *security, "--host", "127.0.0.1", "--port", str(self.port),
                         "--disable-runtime-dependency-installation"], "superlink.log")
            self._wait_for_port(self.port, 60)
            for m in range(self.n_clients):
                if self.credentials:
                    self.register(self.credentials / f"node-{m}.pub")
                self.start_node(m)
        except BaseException:
            self.stop()
            raise
        return self

    def register(self, public_key: Path) -> None:
        """``flwr supernode register KEY``: let the SuperNode holding the matching private key in."""
        done = self._finish([_bin("flwr"), "supernode", "register", str(Path(public_key).resolve()),
                             "fedstream-local"], "register.log", 120)
        if done.returncode != 0:
            raise RuntimeError(
                f"flwr supernode register {public_key} failed; see {self.workdir / 'register.log'}"
            )

    def start_node(self, m: int, *, key: Path | None = None, log: str | None = None) -> subprocess.Popen:
        """Start (or restart) the SuperNode of client m; its log is ``supernodeM.log`` (appended).
        In a secure deployment it signs with ``key`` (default: ``node-m.key`` of the credentials)."""
        cfg = f'client-index={m} cache-dir="{self.workdir / "cache"}" {self.node_config}'.strip()
        if self.credentials:
            key = key or self.credentials / f"node-{m}.key"
            security = [
                "--root-certificates",
                str(self.credentials / "ca.crt"),
                "--auth-supernode-private-key",
                str(key),
            ]
        else:
            security = ["--insecure"]
        self.nodes[m] = self._start(
            [
                _bin("flower-supernode"),
                *security,
                "--superlink",
                self.node_superlink,
                "--port",
                str(free_port()),
                "--node-config",
                cfg,
            ],
            log or f"supernode{m}.log",
        )
        return self.nodes[m]

    def _wait_for_port(self, port: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.procs[0].poll() is not None:
                raise RuntimeError(f"flower-superlink exited ({self.procs[0].returncode}); see "
                                   f"{self.workdir / 'superlink.log'}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.1)
        raise TimeoutError(f"flower-superlink did not listen on 127.0.0.1:{port} within {timeout} s")

    def run(
        self, app: Path, *, run_config: dict | None = None, timeout: float = 600
    ) -> subprocess.CompletedProcess:
        """``flwr run APP fedstream-local --stream``: returns when the run ends (its log in
        ``flwr-run.log``)."""
        args = [_bin("flwr"), "run", str(Path(app).resolve()), "fedstream-local", "--stream"]
        for key, value in (run_config or {}).items():
            args += ["--run-config", f"{key}={_toml_value(value)}"]
        return self._finish(args, "flwr-run.log", timeout)

    def stop(self, grace: float = 10.0, *, terminate: bool = True) -> None:
        super().stop(grace, terminate=terminate)
        self._kill_strays()

    def _kill_strays(self) -> None:
        """SIGKILL what outlived its process group: processes whose environment has this deployment's
        marker, which only the processes it started (and theirs) inherit (a ServerApp whose SuperLink
        was killed mid-run has been seen to survive the group's SIGKILL). Linux /proc only; elsewhere
        nothing to do."""
        want = self.marker.encode()
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if int(proc.name) != os.getpid() and want in (proc / "environ").read_bytes().split(b"\0"):
                    os.kill(int(proc.name), signal.SIGKILL)
            except (OSError, ValueError):  # gone meanwhile, or not ours to read
                pass
