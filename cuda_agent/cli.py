"""The `cuda-agent` command. Every subcommand runs the same library code as the services.

Without DATABASE_URL/REDIS_URL it is the embedded default: SQLite under the data dir, tasks in-process.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from cuda_agent.contracts.common import QueueName
from cuda_agent.settings import ConfigError, get_settings

app = typer.Typer(help=__doc__, no_args_is_help=True, pretty_exceptions_enable=False)
db_app = typer.Typer(help="Database migrations.", no_args_is_help=True)
bench_app = typer.Typer(help="Benchmarks that print figures.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(bench_app, name="bench")
console = Console(stderr=True, soft_wrap=True)
F = TypeVar("F", bound=Callable[..., Any])

SERVICES = ("compile", "eval", "agent", "dataset", "trainer")


def one_line_errors(fn: F) -> F:
    """Configuration problems end the command with one clear line and exit code 2, not a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ConfigError as exc:
            console.print(f"[red]error:[/red] {exc}", highlight=False)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def _startup(check_broker: bool) -> None:
    """Fail fast, before binding a port or joining a queue, when configuration cannot work."""
    from cuda_agent.api.readiness import check_broker as broker_check
    from cuda_agent.db import check_database
    from cuda_agent.logging import configure_logging

    settings = get_settings()
    configure_logging(settings.log_level, settings.log_json)
    check_database()
    if check_broker:
        broker_check()


@db_app.command("upgrade")
@one_line_errors
def db_upgrade(revision: str = "head") -> None:
    """Apply migrations (waits up to 60 s for the database to answer)."""
    import time

    from cuda_agent.db import check_database, upgrade_database

    deadline = time.monotonic() + 60
    while True:
        try:
            check_database()
            break
        except ConfigError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    upgrade_database(revision)
    console.print(f"database at {revision}: {get_settings().sqlalchemy_url.split('@')[-1]}")


@app.command()
@one_line_errors
def serve(
    service: Annotated[str, typer.Argument(help=f"One of: {', '.join(SERVICES)}")],
    host: str = "127.0.0.1",
    port: int = 8000,
) -> None:
    """Run a service's HTTP API."""
    if service not in SERVICES:
        raise ConfigError(f"unknown service {service!r}; choose one of {', '.join(SERVICES)}")
    import uvicorn

    _startup(check_broker=not get_settings().embedded)
    uvicorn.run(f"services.{service}_svc.api:app", host=host, port=port, log_config=None)


@app.command()
@one_line_errors
def worker(
    queues: Annotated[list[QueueName], typer.Argument(help="Queues to consume.")],
    concurrency: Annotated[int, typer.Option(help="Processes; forced to 1 for GPU queues.")] = 2,
    hostname: Annotated[str | None, typer.Option(help="Celery node name.")] = None,
) -> None:
    """Run a Celery worker on the given queues."""
    from cuda_agent.queue.app import GPU_QUEUES

    settings = get_settings()
    if settings.embedded:
        raise ConfigError("a worker needs REDIS_URL (and DATABASE_URL): the embedded default runs tasks in-process")
    _startup(check_broker=True)
    from cuda_agent.queue import celery_app

    if GPU_QUEUES.intersection(queues):
        concurrency = 1  # one task per GPU at a time; more GPUs means more workers, each pinned
    name = hostname or f"{'-'.join(q.value for q in queues)}@%h"
    celery_app.worker_main(
        [
            "worker",
            "-Q",
            ",".join(q.value for q in queues),
            "--concurrency",
            str(concurrency),
            "-n",
            name,
            "--loglevel",
            settings.log_level,
            "--without-gossip",
            "--without-mingle",
        ]
    )


@app.command("apikey")
@one_line_errors
def apikey(tenant: str, name: Annotated[str | None, typer.Option(help="A label for the key.")] = None) -> None:
    """Create an API key for TENANT and print it (shown once)."""
    from cuda_agent.api.auth import create_api_key

    print(create_api_key(tenant, name))


@app.command()
def doctor(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Check nvcc, torch, the GPU, the database, the broker and the sandbox; one line each."""
    from cuda_agent.doctor import run_checks

    try:
        checks = run_checks()
    except ConfigError as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from None
    if as_json:
        print(json.dumps([c.__dict__ for c in checks], indent=2))
    else:
        table = Table("check", "", "detail", show_header=False, box=None)
        for c in checks:
            mark = "[green]ok[/green]" if c.ok else ("[red]FAIL[/red]" if c.required else "[yellow]--[/yellow]")
            table.add_row(c.name, mark, c.detail)
        Console().print(table)
    if any(c.required and not c.ok for c in checks):
        raise typer.Exit(1)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
