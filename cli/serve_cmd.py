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
@click.option("--curriculum", "curriculum_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A curriculum YAML (opgen/curriculum.py: settings, buckets with recipe, split, ladder): serves "
                   "/curriculum/tasks and /curriculum/report; its state is logged as JSON lines to "
                   "--curriculum-log.")
@click.option("--curriculum-log", type=click.Path(dir_okay=False), default=None,
              help="Append the curriculum's state after every report here (JSON lines).")
@click.option("--ray", "use_ray", is_flag=True, default=False,
              help="Serve the same app as a Ray Serve deployment on a local Ray cluster (127.0.0.1 only; "
                   "needs the ray extra with Ray Serve: pip install 'ray[serve]').")
@click.option("--replicas", type=click.IntRange(1, 32), default=1, show_default=True,
              help="With --ray: replicas of the app (each grades in its own sandbox pool).")
@options.allow_weak_sandbox()
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]),
              default="warning", show_default=True)
def serve(host: str, port: int, max_batch: int, max_body_mb: int, max_response_chars: int, max_tasks: int,
          curriculum_file: str | None, curriculum_log: str | None, use_ray: bool, replicas: int,
          allow_weak_sandbox: bool, log_level: str) -> None:
    """Serve POST /tasks, /score, /reward (OpenRLHF's --remote_rm_url) and GET /health, /metrics.

    Needs the serve extra: pip install 'opgen[serve]'."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise click.ClickException(f"opgen serve needs the serve extra (pip install 'opgen[serve]'): {exc}") \
            from None
    from opgen.serve import Limits, run, run_ray

    limits = Limits(max_body_bytes=max_body_mb << 20, max_batch=max_batch, max_response_chars=max_response_chars,
                    max_tasks=max_tasks)
    if use_ray:
        if curriculum_file is not None:
            raise click.UsageError("--curriculum is one reward stream: serve it without --ray")
        if host not in ("127.0.0.1", "localhost"):
            raise click.BadParameter(f"{host}: the Ray deployment serves on 127.0.0.1 only", param_hint="--host")
        try:
            from ray import serve as _serve  # noqa: F401
        except ImportError as exc:
            raise click.ClickException(f"opgen serve --ray needs Ray Serve (pip install 'ray[serve]'): {exc}") \
                from None
        run_ray(host, port, replicas=replicas, limits=limits, allow_weak_sandbox=True if allow_weak_sandbox else None)
        return
    if replicas != 1:
        raise click.UsageError("--replicas is for --ray")
    curriculum = None
    if curriculum_file is not None:
        curriculum = _curriculum(curriculum_file, curriculum_log)
    run(host, port, limits, allow_weak_sandbox=True if allow_weak_sandbox else None, log_level=log_level,
        curriculum=curriculum)  # a SandboxError: exit 1 with its message (cli/__init__.py)


def _curriculum(path: str, log_path: str | None):
    import json

    import yaml

    from opgen.curriculum import from_config

    try:
        with open(path, encoding="utf-8") as f:
            config = yaml.safe_load(f)
        log = None
        if log_path is not None:
            out = open(log_path, "a", encoding="utf-8")  # open for the server's life

            def log(state: dict) -> None:
                out.write(json.dumps(state, sort_keys=True) + "\n")
                out.flush()

        return from_config(config, log=log)
    except (OSError, yaml.YAMLError, ValueError, TypeError) as exc:
        raise click.BadParameter(f"{path}: {exc}", param_hint="--curriculum") from None
