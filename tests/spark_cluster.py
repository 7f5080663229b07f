"""A real Spark standalone cluster on loopback for the tests: a master, two workers and a Spark
Connect server attached to the master, started from pyspark's own distribution.

Every process is launched through pyspark's bin/spark-class or bin/spark-submit (the launcher
adds the JVM module options Java 17 needs), in a process group of its own, with its output in
a log file under the cluster's directory. Executors are children of their worker and share its
group, so stopping a worker's group stops its executor too. Every wait is bounded in time, and a
failed start stops what did start and raises with the tail of every log.

`python -m tests.spark_cluster` starts a cluster, prints its addresses and timings, and stops it.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

HOST = "127.0.0.1"
CONNECT_SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"
# Small enough for a shared 2-core machine: every daemon, executor and the Connect driver.
MEMORY = "512m"
# One GC thread per JVM: six JVMs share two cores.
JAVA_OPTS = "-XX:+UseSerialGC"
# Environment a parent may have set that would change what the scripts launch.
FOREIGN_ENV = ("SPARK_ENV_LOADED", "SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE",
               "SPARK_API_MODE", "MASTER", "SPARK_MASTER_HOST", "SPARK_MASTER_PORT",
               "SPARK_WORKER_CORES", "SPARK_WORKER_MEMORY", "SPARK_WORKER_INSTANCES",
               "SPARK_SUBMIT_OPTS", "PYSPARK_SUBMIT_ARGS")
LOG_TAIL_LINES = 40
APP_NAME = "polytrace-tests"
# The lines each process logs once it listens (Spark's Utils.startServiceOnPort and the server).
MASTER_PORT = re.compile(r"Successfully started service 'sparkMaster' on port (\d+)")
MASTER_UI_PORT = re.compile(r"Successfully started service 'MasterUI' on port (\d+)")
CONNECT_PORT = re.compile(r"Spark Connect server started at: [^\s]*:(\d+)")
LOG4J2 = """\
rootLogger.level = info
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n%ex
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
logger.jetty12.name = org.eclipse.jetty
logger.jetty12.level = warn
logger.security.name = org.apache.spark.SecurityManager
logger.security.level = warn
"""


class ClusterUnavailable(Exception):
    """No Java runtime, or no pyspark distribution with the Spark Connect server: skip, don't fail."""


class ClusterError(RuntimeError):
    """The cluster did not come up (or went down); the message carries the logs' tails."""


def spark_home() -> Path:
    """pyspark's package directory: bin/, jars/ and the Spark Connect server jar."""
    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        raise ClusterUnavailable("no Java runtime (java on PATH or JAVA_HOME)")
    try:
        import pyspark
    except ImportError:
        raise ClusterUnavailable("pyspark is not installed: pip install 'polytrace[spark]'") from None
    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").is_file() or not (home / "bin" / "spark-submit").is_file():
        raise ClusterUnavailable(f"pyspark at {home} ships no bin/spark-class or bin/spark-submit")
    if not any((home / "jars").glob("spark-connect_*.jar")):
        raise ClusterUnavailable(f"pyspark at {home} ships no spark-connect jar in jars/")
    return home


def port_open(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass
class Daemon:
    name: str
    proc: subprocess.Popen
    log: Path

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()[-lines:]
        except OSError as e:
            text = [f"(no log: {e})"]
        state = "running" if self.proc.poll() is None else f"exited with {self.proc.returncode}"
        return f"--- {self.name} ({state}), {self.log}:\n" + "\n".join(text)


@dataclass
class SparkCluster:
    """A standalone master, `workers` workers (1 core, MEMORY each) and a Spark Connect server
    whose application gets one executor per worker. Use as a context manager, or start()/stop()."""

    workdir: Path
    workers: int = 2
    startup_timeout_s: float = 180.0
    conf: dict[str, str] = field(default_factory=dict)  # more --conf for the Connect server
    home: Path = field(default_factory=spark_home)
    # every port is picked by the process that binds it (port 0) and read back from its log:
    # no window in which another process can take a port chosen in advance
    master_port: int = 0
    master_ui_port: int = 0
    connect_port: int = 0
    daemons: list[Daemon] = field(default_factory=list)
    startup_s: float | None = None
    phases: dict[str, float] = field(default_factory=dict)  # seconds from start() to each step
    left_running: list[str] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.master_port}"

    @property
    def remote(self) -> str:
        return f"sc://{HOST}:{self.connect_port}"

    # ---- processes -----------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV}
        local = self.workdir / "local"
        local.mkdir(exist_ok=True)
        env.update(SPARK_HOME=str(self.home), SPARK_CONF_DIR=str(self.workdir / "conf"),
                   SPARK_LOCAL_IP=HOST, SPARK_LOCAL_DIRS=str(local),
                   SPARK_LOG_DIR=str(self.workdir / "logs"), SPARK_PID_DIR=str(self.workdir),
                   SPARK_DAEMON_MEMORY=MEMORY, SPARK_DAEMON_JAVA_OPTS=JAVA_OPTS,
                   # no REST submission server: it would bind the fixed port 6066
                   SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")
        return env

    def _write_conf(self) -> None:
        """A conf directory of our own: no spark-env.sh or spark-defaults.conf from elsewhere, and
        INFO logs on stderr (the lines start() reads the ports from)."""
        conf = self.workdir / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        (conf / "log4j2.properties").write_text(LOG4J2)

    def _launch(self, name: str, args: list[str]) -> Daemon:
        log = self.workdir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        # Killed with this process even when it cannot stop them (SIGKILL, a crash): the kernel
        # sends SIGKILL to each one when its parent goes, and executors exit with their worker.
        orphan_guard = ["setpriv", "--pdeathsig", "KILL"] if shutil.which("setpriv") else []
        with open(log, "wb") as out:
            # A process group of its own: stop() signals the group (the script's JVM and a
            # worker's executors), and Ctrl-C in the terminal does not reach it half-way.
            proc = subprocess.Popen([*orphan_guard, *args], env=self._env(), cwd=self.workdir,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        daemon = Daemon(name, proc, log)
        self.daemons.append(daemon)
        return daemon

    def _spark_class(self, name: str, cls: str, *args: str) -> Daemon:
        return self._launch(name, [str(self.home / "bin" / "spark-class"), cls, *args])

    # ---- start and stop --------------------------------------------------------------------------

    def start(self) -> SparkCluster:
        began = time.monotonic()
        deadline = began + self.startup_timeout_s

        def reached(phase: str) -> None:
            self.phases[phase] = round(time.monotonic() - began, 2)

        self.workdir.mkdir(parents=True, exist_ok=True)
        self._write_conf()
        try:
            master = self._spark_class("master", "org.apache.spark.deploy.master.Master", "--host", HOST,
                                       "--port", "0", "--webui-port", "0")
            self.master_port = self._wait_log(master, MASTER_PORT, "the master's RPC port", deadline)
            self.master_ui_port = self._wait_log(master, MASTER_UI_PORT, "the master's web UI", deadline)
            self._wait("the master's web UI to answer", deadline, lambda: self.status() is not None)
            reached("master")
            # the workers and the Connect server start together: the slow part is JVM start-up
            for i in range(self.workers):
                work = self.workdir / f"worker-{i}"
                work.mkdir(exist_ok=True)
                self._spark_class(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", "--host", HOST,
                                  "--port", "0", "--webui-port", "0", "--cores", "1", "--memory", MEMORY,
                                  "--work-dir", str(work), self.master_url)
            connect = self._start_connect_server()
            self._wait(f"{self.workers} workers to register with the master", deadline,
                       lambda: len(self.alive_workers()) == self.workers)
            reached("workers")
            self.connect_port = self._wait_log(connect, CONNECT_PORT, "the Spark Connect server", deadline)
            self._wait(f"the Spark Connect server to accept connections on port {self.connect_port}",
                       deadline, lambda: port_open(self.connect_port))
            reached("connect")
            self._wait(f"an executor on each of the {self.workers} workers", deadline,
                       lambda: self.executors() == self.workers)
            reached("executors")
        except BaseException as e:
            logs = self.logs()
            self.stop()
            if not isinstance(e, Exception):
                raise  # Ctrl-C: stopped, not reported as a failed start
            raise ClusterError(f"the Spark cluster did not start: {e}; logs in {self.workdir / 'logs'}"
                               f" (tails below):\n{logs}") from None
        self.startup_s = time.monotonic() - began
        return self

    def _start_connect_server(self) -> Daemon:
        conf = {
            "spark.connect.grpc.binding.address": HOST,
            "spark.connect.grpc.binding.port": "0",
            "spark.driver.host": HOST,
            "spark.driver.bindAddress": HOST,
            "spark.ui.enabled": "false",
            "spark.executor.memory": MEMORY,
            "spark.executor.cores": "1",
            "spark.cores.max": str(self.workers),
            "spark.driver.extraJavaOptions": JAVA_OPTS,
            "spark.executor.extraJavaOptions": JAVA_OPTS,
            # the cluster's defaults, as a team would set them (the project sets only SESSION_CONF):
            # a few shuffle partitions for a few cores, and no waiting for a busy executor that
            # holds a task's input (the default waits up to 3 s per task on tiny inputs)
            "spark.sql.shuffle.partitions": str(2 * self.workers),
            "spark.locality.wait": "0",
        }
        conf.update(self.conf)
        args = [str(self.home / "bin" / "spark-submit"), "--master", self.master_url,
                "--deploy-mode", "client", "--driver-memory", MEMORY, "--name", APP_NAME,
                "--class", CONNECT_SERVER]
        for key, value in conf.items():
            args += ["--conf", f"{key}={value}"]
        return self._launch("connect", args)

    def _wait(self, what: str, deadline: float, ready) -> None:
        """Poll ready() until it is true; raise once a process has exited or past the deadline."""
        delay = 0.05
        while True:
            dead = [f"{d.name} (exit code {d.proc.returncode})" for d in self.daemons
                    if d.proc.poll() is not None]
            if dead:
                raise ClusterError(f"{', '.join(dead)} exited while waiting for {what}")
            if ready():
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out after {self.startup_timeout_s:.0f} s waiting for {what}")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    def _wait_log(self, daemon: Daemon, pattern: re.Pattern, what: str, deadline: float) -> int:
        """The port in the first line of daemon's log that matches pattern."""
        found: list[int] = []

        def seen() -> bool:
            match = pattern.search(daemon.log.read_text(errors="replace"))
            if match:
                found.append(int(match.group(1)))
            return bool(match)

        self._wait(f"{what} to report its port", deadline, seen)
        return found[0]

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM every process group, then SIGKILL the groups still there after grace_s; returns
        once every group is gone or a second bounded wait ran out (left_running names those)."""
        daemons, self.daemons = self.daemons, []
        for daemon in reversed(daemons):  # the Connect server first, the master last
            _signal_group(daemon.proc, signal.SIGTERM)
        _wait_gone(daemons, time.monotonic() + grace_s)
        for daemon in daemons:
            # only a group that still has members: an empty group's id may name another one by now
            if _group_alive(daemon.proc):
                _signal_group(daemon.proc, signal.SIGKILL)
        _wait_gone(daemons, time.monotonic() + grace_s)
        self.left_running = [d.name for d in daemons if _group_alive(d.proc)]

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- state -----------------------------------------------------------------------------------

    def status(self) -> dict | None:
        """The master's JSON state (workers, applications), None while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://{HOST}:{self.master_ui_port}/json/", timeout=2) as r:
                return json.load(r)
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def alive_workers(self) -> list[dict]:
        state = self.status() or {}
        return [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]

    def executors(self) -> int:
        """Workers running an executor (one core each) for an application."""
        return sum(1 for w in self.alive_workers() if w.get("coresused", 0) > 0)

    def logs(self) -> str:
        return "\n".join(d.tail() for d in self.daemons)


def _wait_gone(daemons: list[Daemon], deadline: float) -> None:
    """Reap every leader and wait for every group to empty (executors exit after their
    worker), until the deadline."""
    while True:
        for daemon in daemons:
            daemon.proc.poll()
        if not any(_group_alive(d.proc) for d in daemons) or time.monotonic() > deadline:
            return
        time.sleep(0.05)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # start_new_session: the group id is the leader's pid
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(proc: subprocess.Popen) -> bool:
    try:
        os.killpg(proc.pid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory(prefix="spark-cluster-") as tmp:
        cluster = SparkCluster(Path(tmp)).start()
        try:
            print(f"master {cluster.master_url} (web UI port {cluster.master_ui_port}), "
                  f"Spark Connect {cluster.remote}: started in {cluster.startup_s:.1f} s {cluster.phases}")
        finally:
            began = time.monotonic()
            cluster.stop()
            left = ", ".join(cluster.left_running) or "none"
            print(f"stopped in {time.monotonic() - began:.1f} s; still running: {left}")
