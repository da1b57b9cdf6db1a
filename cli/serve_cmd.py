"""``opgen serve``: the HTTP task, score and reward service (opgen/serve.py, docs/integrations.md)."""

from __future__ import annotations

import click
from opgen.cli import options


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind. The default is loopback only; bind another address only behind your own "
                   "access control (the service has no authentication).")
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True)
@click.option("--max-batch", type=click.IntRange(1, 1_000_000), default=4096, show_default=True,
              help="Responses per /score or /reward request, at most.")
@click.option("--max-body-mb", type=click.IntRange(1, 4096), default=16, show_default=True,
              help="Request body size limit, in MiB.")
@click.option("--max-response-chars", type=click.IntRange(1, 1_000_000), default=100_000, show_default=True,
              help="Characters per graded response, at most (a longer one is refused with 413).")
@click.option("--max-tasks", type=click.IntRange(1, 100_000), default=512, show_default=True,
              help="Rows per /tasks request, at most.")
@options.allow_weak_sandbox()
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]),
              default="warning", show_default=True)
def serve(host: str, port: int, max_batch: int, max_body_mb: int, max_response_chars: int, max_tasks: int,
          allow_weak_sandbox: bool, log_level: str) -> None:
    """Serve POST /tasks, /score, /reward (OpenRLHF's --remote_rm_url) and GET /health, /metrics.

    Needs the serve extra: pip install 'opgen[serve]'."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise click.ClickException(f"opgen serve needs the serve extra (pip install 'opgen[serve]'): {exc}") \
            from None
    from opgen.score.sandbox import SandboxError
    from opgen.serve import Limits, run

    limits = Limits(max_body_bytes=max_body_mb << 20, max_batch=max_batch, max_response_chars=max_response_chars,
                    max_tasks=max_tasks)
    try:
        run(host, port, limits, allow_weak_sandbox=True if allow_weak_sandbox else None, log_level=log_level)
    except SandboxError as exc:
        raise click.ClickException(str(exc)) from None
