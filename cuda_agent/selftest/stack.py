"""The real stack a selftest runs against, started on loopback and stopped afterwards.

A private Redis (so the faults part can restart it without touching anyone else's), a private Postgres database
(created, migrated, dropped), the five APIs under uvicorn on free ports and one Celery worker per queue, each a
`cuda-agent` child process in its own process group. The stack also plants what attacks aim for: a root-only
canary file, a secret in the workers' environment (the operator's LLM key), an empty sink directory the host
must never be made to write into, and a loopback listener no sandboxed process may reach.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from cuda_agent.contracts.common import Device, QueueName

SERVICES = ("compile", "eval", "agent", "dataset", "trainer")
PG_ADMIN_URL = os.environ.get("CUDA_AGENT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
TENANTS = ("tenant-a", "tenant-b")
START_TIMEOUT_S = 120.0
QUOTA_DISK_BYTES = 1024**3
QUOTA_MEMORY_BYTES = 4 * 1024**3
LEASE_S = 15.0  # heartbeats every 5 s: a loaded 2-core host still renews in time
# Queues whose workers run more than one task at a time: builds are CPU work.
CONCURRENCY = {QueueName.COMPILE: 2}


class StackError(RuntimeError):
    """The stack could not be started; the message names the piece and ends with its log tail."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children(pid: int) -> list[int]:
    """Direct children of ``pid``, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name (field 2) may contain spaces and parentheses: the ppid follows the last ')'.
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


class ManagedProcess:
    """A child in its own process group, so a kill takes its descendants (pool children, sandboxes) with it."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name, self.argv, self.env, self.log = name, argv, env, log
        self.popen: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def children(self) -> list[int]:
        return _children(self.pid) if self.alive() else []

    def kill(self, sig: int = signal.SIGKILL, timeout_s: float = 30.0) -> None:
        if self.popen is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)
        try:
            self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            self.popen.wait(timeout=timeout_s)

    def stop(self) -> None:
        self.kill(signal.SIGTERM, timeout_s=15)
        # Pool children and sandboxes that outlived their parent (a killed main process) go too.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)

    def tail(self, chars: int = 1500) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class Listener:
    """A loopback TCP server that only counts connections: any count above zero is a sandbox escape."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.5)
        self.port = int(self.sock.getsockname()[1])
        self.connections = 0
        self.received = b""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            with conn:
                conn.settimeout(0.5)
                with contextlib.suppress(OSError):
                    self.received += conn.recv(65536)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


class Stack:
    """Start with ``with Stack(device) as stack:``; everything started is stopped and removed on exit."""

    def __init__(self, device: Device = Device.CPU, *, keep: bool = False) -> None:
        self.device = device
        self.keep = keep  # keep the temp dir (logs) after the run, for diagnosing a failure
        self.root = Path(tempfile.mkdtemp(prefix="cuda-agent-selftest-"))
        self.logs = self.root / "logs"
        self.logs.mkdir()
        self.data_dir = self.root / "data"
        self.apis: dict[str, ManagedProcess] = {}
        self.urls: dict[str, str] = {}
        self.workers: dict[QueueName, ManagedProcess] = {}
        self.keys: dict[str, str] = {}
        self.db_name = f"cuda_agent_selftest_{uuid.uuid4().hex[:10]}"
        self.db_url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{self.db_name}"
        self.redis: ManagedProcess | None = None
        self.redis_port = free_port()
        self._saved_env: dict[str, str | None] = {}
        self._db_created = False
        # What attacks aim for. The canary lives in a root-only directory no sandbox binds.
        self.secret_dir = self.root / "secret"
        self.secret_dir.mkdir(mode=0o700)
        self.canary = self.secret_dir / "canary.txt"
        self.canary_token = "CANARY-FILE-" + secrets.token_hex(16)
        self.canary.write_text(self.canary_token + "\n")
        self.canary.chmod(0o600)
        self.env_token = "CANARY-ENV-" + secrets.token_hex(16)
        self.broker_password = "CANARY-BROKER-" + secrets.token_hex(16)
        self.sink = self.root / "sink"
        self.sink.mkdir(mode=0o700)
        # Host paths a sandboxed write must never create (inside the sandbox these may be its own tmpfs).
        mark = secrets.token_hex(4)
        self.outside = [
            self.sink / "from-sandbox",
            self.data_dir / f"from-sandbox-{mark}",
            Path(f"/etc/from-sandbox-{mark}"),
            Path(f"/usr/from-sandbox-{mark}"),
        ]
        self.listener = Listener()

    # --- lifecycle -----------------------------------------------------------------------------------------
    def __enter__(self) -> Stack:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def redis_url(self) -> str:
        return f"redis://:{self.broker_password}@127.0.0.1:{self.redis_port}/0"

    def child_env(self) -> dict[str, str]:
        """The environment of every service and worker: this stack's database and broker, nothing of the caller's
        cuda-agent configuration, and the operator secret attacks try to steal."""
        from cuda_agent.settings import get_settings

        env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_AGENT_")}
        env.update(
            DATABASE_URL=self.db_url,
            REDIS_URL=self.redis_url,
            CUDA_AGENT_DATA_DIR=str(self.data_dir),
            CUDA_AGENT_ENVIRONMENT="test",
            # The suite's own traffic must not be throttled; rate limiting has its own tests.
            CUDA_AGENT_RATE_LIMIT_PER_MINUTE="1000000",
            CUDA_AGENT_OPENAI_API_KEY=self.env_token,
            # Recovery timings short enough for the faults part to see a dead attempt recovered within a minute;
            # the mechanism is the production one.
            CUDA_AGENT_JOB_LEASE_S=str(LEASE_S),
            CUDA_AGENT_JOB_HEARTBEAT_S=str(LEASE_S / 3),
            CUDA_AGENT_JOB_SWEEP_INTERVAL_S="2",
            CUDA_AGENT_JOB_REQUEUE_AFTER_S="10",
            # Quotas below what the attacks of the catalogue take (attacks.DISK_FILL_BYTES, MEMORY_HOG_BYTES).
            CUDA_AGENT_COMPILE_DISK_BYTES=str(QUOTA_DISK_BYTES),
            CUDA_AGENT_EVAL_DISK_BYTES=str(QUOTA_DISK_BYTES),
            CUDA_AGENT_COMPILE_MEMORY_QUOTA_BYTES=str(QUOTA_MEMORY_BYTES),
            CUDA_AGENT_EVAL_MEMORY_QUOTA_BYTES=str(QUOTA_MEMORY_BYTES),
            CUDA_HOME=str(get_settings().cuda_home),  # as resolved here, CUDA_AGENT_CUDA_HOME included
            PYTHONUNBUFFERED="1",
        )
        return env

    def start(self) -> None:
        self._start_redis()
        self._create_database()
        self._use_stack_settings()
        from cuda_agent.api.auth import create_api_key
        from cuda_agent.db import upgrade_database

        upgrade_database()
        self.keys = {tenant: create_api_key(tenant, "selftest") for tenant in TENANTS}
        with ThreadPoolExecutor(len(SERVICES)) as pool:
            list(pool.map(self.start_api, SERVICES))
        for queue in QueueName:
            self.start_worker(queue)
        self.wait_workers()

    def close(self) -> None:
        for proc in [*self.workers.values(), *self.apis.values()]:
            proc.stop()
        if self.redis is not None:
            self.redis.stop()
        self.listener.close()
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        from cuda_agent.settings import get_settings

        get_settings.cache_clear()
        if self._db_created:
            self._drop_database()
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)

    def _start_redis(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise StackError("redis-server not found: the selftest starts its own Redis so it can restart it")
        argv = [binary, "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        argv += ["--requirepass", self.broker_password]
        self.redis = ManagedProcess("redis", argv, {"PATH": os.environ.get("PATH", "")}, self.logs / "redis.log")
        self._wait(lambda: self._redis_ping(), "redis", self.redis)

    def _redis_ping(self) -> bool:
        import redis

        try:
            client = redis.Redis(port=self.redis_port, password=self.broker_password, socket_timeout=1)
            return bool(client.ping())
        except redis.RedisError:
            return False

    def restart_redis(self) -> None:
        """Stop Redis (its data goes: it runs without persistence, as a crashed broker would) and start it again."""
        assert self.redis is not None
        self.redis.kill()
        self.redis.start()
        self._wait(lambda: self._redis_ping(), "redis", self.redis)

    def _admin(self) -> Any:
        from sqlalchemy import create_engine

        return create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")

    def _create_database(self) -> None:
        from sqlalchemy import text
        from sqlalchemy.exc import OperationalError

        engine = self._admin()
        try:
            with engine.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{self.db_name}"'))
        except OperationalError as exc:
            raise StackError(f"cannot create the selftest database at {PG_ADMIN_URL}: {exc}".splitlines()[0]) from None
        finally:
            engine.dispose()
        self._db_created = True

    def _drop_database(self) -> None:
        from sqlalchemy import text

        from cuda_agent.db.session import _engine_for

        with contextlib.suppress(Exception):
            _engine_for(self.db_url).dispose()
        engine = self._admin()
        with engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)'))
        engine.dispose()

    def terminate_db_connections(self) -> int:
        """Kill every server connection to this stack's database, as a Postgres restart would."""
        from sqlalchemy import text

        engine = self._admin()
        with engine.connect() as conn:
            killed = conn.execute(
                text("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = :db"),
                {"db": self.db_name},
            ).scalar()
        engine.dispose()
        return int(killed or 0)

    def _use_stack_settings(self) -> None:
        """This process talks to the stack too (API keys, result rows): the same settings as its children."""
        from cuda_agent.settings import get_settings

        env = self.child_env()
        for name in ("DATABASE_URL", "REDIS_URL", "CUDA_AGENT_DATA_DIR", "CUDA_AGENT_ENVIRONMENT"):
            self._saved_env.setdefault(name, os.environ.get(name))
            os.environ[name] = env[name]
        get_settings.cache_clear()

    # --- services and workers ------------------------------------------------------------------------------
    def _cli(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "cuda_agent.cli", *args]

    def start_api(self, service: str, port: int | None = None) -> str:
        port = port or free_port()
        proc = ManagedProcess(
            f"api-{service}",
            self._cli("serve", service, "--port", str(port)),
            self.child_env(),
            self.logs / f"api-{service}.log",
        )
        self.apis[service] = proc
        base = f"http://127.0.0.1:{port}"
        self._wait(lambda: self._healthy(base), f"{service} API", proc)
        self.urls[service] = base
        return base

    def _healthy(self, base: str) -> bool:
        try:
            return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def restart_api(self, service: str) -> None:
        """Kill the API process and start it again on the same port."""
        self.apis[service].kill()
        self.start_api(service, int(self.urls[service].rsplit(":", 1)[1]))

    def start_worker(self, queue: QueueName) -> ManagedProcess:
        args = ["worker", queue.value, "--concurrency", str(CONCURRENCY.get(queue, 1))]
        args += ["--hostname", f"{queue.value}-{uuid.uuid4().hex[:6]}@selftest"]
        proc = ManagedProcess(f"worker-{queue.value}", self._cli(*args), self.child_env(), self.logs / f"w-{queue}.log")
        self.workers[queue] = proc
        return proc

    def restart_worker(self, queue: QueueName) -> None:
        """Kill the worker (its whole process group, with any sandbox it runs) and start a fresh one."""
        self.workers[queue].kill()
        self.start_worker(queue)
        self.wait_workers([queue])

    def cancel_unfinished(self) -> int:
        """Ask every queued or running job to stop (through the API, as its tenant would), so that a job that wedges
        its worker is not recovered onto the next worker once this one is replaced."""
        from sqlalchemy import select

        from cuda_agent.contracts.common import JobStatus
        from cuda_agent.db import session_scope
        from cuda_agent.db.models import Job

        with session_scope() as session:
            active = select(Job.id, Job.tenant).where(Job.status.in_([JobStatus.QUEUED, JobStatus.RUNNING]))
            rows = session.execute(active).all()
        for job_id, tenant in rows:
            if tenant in self.keys:
                self.post("agent", f"/v1/jobs/{job_id}/cancel", None, tenant=tenant)
        return len(rows)

    def wait_workers(self, queues: list[QueueName] | None = None) -> None:
        """Block until a probe job went through each queue: its worker consumes and stores results."""
        for queue in queues or list(QueueName):
            job = self.post("agent", "/v1/probe", {"queue": queue.value, "echo": "ready"}).json()
            try:
                self.wait_job("agent", job["id"], timeout_s=START_TIMEOUT_S)
            except TimeoutError:
                raise StackError(f"worker for {queue.value} took no probe:\n{self.workers[queue].tail()}") from None

    def _wait(self, ready: Any, what: str, proc: ManagedProcess) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready():
            if not proc.alive():
                raise StackError(f"{what} exited at start:\n{proc.tail()}")
            if time.monotonic() > deadline:
                raise StackError(f"{what} did not start within {START_TIMEOUT_S:.0f} s:\n{proc.tail()}")
            time.sleep(0.3)

    # --- talking to the APIs -------------------------------------------------------------------------------
    def headers(self, tenant: str = TENANTS[0], **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[tenant]}", **extra}

    def post(
        self,
        service: str,
        path: str,
        body: Any,
        *,
        tenant: str = TENANTS[0],
        params: dict[str, Any] | None = None,
        timeout_s: float = 60.0,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        return httpx.post(
            self.urls[service] + path,
            json=body,
            params=params,
            headers=self.headers(tenant, **(headers or {})),
            timeout=timeout_s,
        )

    def get(self, service: str, path: str, *, tenant: str = TENANTS[0], timeout_s: float = 30.0) -> httpx.Response:
        return httpx.get(self.urls[service] + path, headers=self.headers(tenant), timeout=timeout_s)

    def wait_job(self, service: str, job_id: str, *, tenant: str = TENANTS[0], timeout_s: float = 120.0) -> Any:
        """The finished job's view; TimeoutError names its last status. Transport errors (an API restarting) are
        retried until the deadline, as a polling client would."""
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            try:
                response = self.get(service, f"/v1/jobs/{job_id}", tenant=tenant, timeout_s=10)
                if response.status_code == 200:
                    last = response.json()
                    if last["status"] in ("succeeded", "failed", "cancelled"):
                        return last
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        status = last["status"] if last else "unreadable"
        raise TimeoutError(f"job {job_id} still {status} after {timeout_s:.0f} s")

    def secrets(self) -> dict[str, str]:
        """Secret text that must never appear in anything a tenant receives: name -> value."""
        found = {
            "canary file": self.canary_token,
            "worker environment": self.env_token,
            "broker password": self.broker_password,
        }
        with contextlib.suppress(OSError):
            for line in Path("/etc/shadow").read_text().splitlines():
                fields = line.split(":")
                if len(fields) > 1 and len(fields[1]) > 12:  # a real password hash, not '*' or '!'
                    found["/etc/shadow"] = fields[1]
                    break
        return found

    def leaked(self, text: str) -> list[str]:
        return [name for name, value in self.secrets().items() if value in text]

    def host_writes(self) -> list[str]:
        """What sandboxed code made the host create: entries of the sink and the outside paths. They are removed,
        so that the next attack is judged on its own."""
        found = sorted({*self.sink.iterdir(), *(p for p in self.outside if os.path.lexists(p))})
        for path in found:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        return [str(p) for p in found]

    @contextlib.contextmanager
    def responsiveness(self) -> Iterator[list[float]]:
        """Sample the agent API's /healthz latency every second while the body runs (a host brought to its knees
        by a candidate answers late or not at all); yields the list the samples go into."""
        samples: list[float] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(1.0):
                started = time.monotonic()
                try:
                    ok = httpx.get(f"{self.urls['agent']}/healthz", timeout=10).status_code == 200
                except httpx.HTTPError:
                    ok = False
                samples.append(time.monotonic() - started if ok else float("inf"))

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        try:
            yield samples
        finally:
            stop.set()
            thread.join(timeout=15)


def dir_bytes(root: Path) -> int:
    """Bytes under ``root`` without following links."""
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total
