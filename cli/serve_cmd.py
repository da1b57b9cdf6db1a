"""``opgen serve``: the HTTP task, score, reward, curriculum and episode service (opgen/serve.py,
docs/integrations.md)."""

from __future__ import annotations

import click
from opgen.cli import options


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind. The default is loopback only; any other address needs a bearer token "
                   "(--token or OPGEN_SERVE_TOKEN).")
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True)
@click.option("--token", envvar="OPGEN_SERVE_TOKEN", default=None, show_envvar=True,
              help="Require 'Authorization: Bearer TOKEN' on every route (required when --host is not loopback).")
@click.option("--max-batch", type=click.IntRange(1, 1_000_000), default=4096, show_default=True,
              help="Responses per /score or /reward request, at most.")
@click.option("--max-body-mb", type=click.IntRange(1, 4096), default=16, show_default=True,
              help="Request body size limit, in MiB.")
@click.option("--max-response-chars", type=click.IntRange(1, 1_000_000), default=100_000, show_default=True,
              help="Characters per graded response, at most (a longer one is refused with 413).")
@click.option("--max-tasks", type=click.IntRange(1, 100_000), default=512, show_default=True,
              help="Rows per /tasks or /curriculum/tasks request, at most.")
@click.option("--tasks-timeout", type=click.FloatRange(0.5, 86_400), default=60.0, show_default=True,
              help="Seconds one build of rows may take (in its worker process); a slower one is answered 413.")
@click.option("--task-cache-mb", type=click.IntRange(1, 65_536), default=256, show_default=True,
              help="Built /tasks rows kept between requests, in MiB of JSON.")
@click.option("--header-timeout", type=click.FloatRange(0.1, 3600), default=10.0, show_default=True,
              help="Seconds a client has to send a request's headers (from connecting, or from its last response).")
@click.option("--body-timeout", type=click.FloatRange(0.1, 3600), default=60.0, show_default=True,
              help="Seconds a client has to send a request's body, after its headers.")
@click.option("--max-connections-per-client", type=click.IntRange(1, 100_000), default=64, show_default=True,
              help="Open connections one client address may hold; more are closed at once.")
@click.option("--curriculum", "curriculum_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A curriculum YAML (opgen/curriculum.py: settings, buckets with recipe, split, ladder or axes): "
                   "serves /curriculum/tasks, /curriculum/report and /curriculum/state.")
@click.option("--curriculum-log", type=click.Path(dir_okay=False), default=None,
              help="Append the curriculum's state after every report here (JSON lines). Its whole state is saved "
                   "beside it (FILE.state.json) unless --curriculum-state says where.")
@click.option("--curriculum-state", type=click.Path(dir_okay=False), default=None,
              help="Where the curriculum's whole state is saved after every change, and restored from at start.")
@click.option("--ray", "use_ray", is_flag=True, default=False,
              help="Serve the same app as a Ray Serve deployment on a local Ray cluster (127.0.0.1 only; "
                   "needs the ray extra with Ray Serve: pip install 'ray[serve]').")
@click.option("--replicas", type=click.IntRange(1, 32), default=1, show_default=True,
              help="With --ray: replicas of the app (each grades in its own sandbox pool).")
@options.allow_weak_sandbox()
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]),
              default="warning", show_default=True)
def serve(host: str, port: int, token: str | None, max_batch: int, max_body_mb: int, max_response_chars: int,
          max_tasks: int, tasks_timeout: float, task_cache_mb: int, header_timeout: float, body_timeout: float,
          max_connections_per_client: int, curriculum_file: str | None, curriculum_log: str | None,
          curriculum_state: str | None, use_ray: bool, replicas: int, allow_weak_sandbox: bool,
          log_level: str) -> None:
    """Serve POST /tasks, /score, /reward (OpenRLHF's remote reward), /episodes (multi-turn, with
    execution feedback), WS /openenv/ws (OpenEnv) and GET /health, /metrics.

    Needs the serve extra: pip install 'opgen[serve]'."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise click.ClickException(f"opgen serve needs the serve extra (pip install 'opgen[serve]'): {exc}") \
            from None
    from opgen.serve import Limits, is_loopback, run, run_ray

    limits = Limits(max_body_bytes=max_body_mb << 20, max_batch=max_batch, max_response_chars=max_response_chars,
                    max_tasks=max_tasks, task_timeout_s=tasks_timeout, task_cache_bytes=task_cache_mb << 20,
                    header_timeout_s=header_timeout, body_timeout_s=body_timeout,
                    max_connections_per_client=max_connections_per_client)
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
    if not is_loopback(host) and not token:
        raise click.BadParameter(f"{host} is not a loopback address: give a bearer token (--token or "
                                 "OPGEN_SERVE_TOKEN), which every request must then carry", param_hint="--host")
    curriculum, save = None, None
    if curriculum_file is not None:
        if curriculum_state is None and curriculum_log is not None:
            curriculum_state = curriculum_log + ".state.json"
        curriculum, save = _curriculum(curriculum_file, curriculum_log, curriculum_state, limits)
    elif curriculum_state is not None or curriculum_log is not None:
        raise click.UsageError("--curriculum-log and --curriculum-state go with --curriculum")
    run(host, port, limits, allow_weak_sandbox=True if allow_weak_sandbox else None, log_level=log_level,
        curriculum=curriculum, token=token, save=save)  # a SandboxError: exit 1 with its message (cli/__init__.py)


def _curriculum(path: str, log_path: str | None, state_path: str | None, limits):
    """The curriculum of ``path``, its state restored from ``state_path`` when that file exists, its
    rows built by the server's build worker; and the function that saves its state."""
    import json
    import os

    import yaml

    from opgen.curriculum import CurriculumError, from_config, save_atomically

    try:
        with open(path, encoding="utf-8") as f:
            config = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as exc:
        raise click.BadParameter(f"{path}: {exc}", param_hint="--curriculum") from None
    log = None
    if log_path is not None:
        out = open(log_path, "a", encoding="utf-8")  # open for the server's life

        def log(state: dict) -> None:
            out.write(json.dumps(state, sort_keys=True) + "\n")
            out.flush()

    try:
        cur = from_config(config, log=log, rows_at=_server_rows(limits))
    except CurriculumError as exc:
        raise click.BadParameter(f"{path}: {exc}", param_hint="--curriculum") from None
    save = None
    if state_path is not None:
        if os.path.exists(state_path):
            try:
                with open(state_path, encoding="utf-8") as f:
                    cur.restore(json.load(f), state_path)
            except (OSError, ValueError) as exc:
                raise click.BadParameter(f"{state_path}: {exc}", param_hint="--curriculum-state") from None

        def save(data: dict) -> None:
            save_atomically(state_path, data)

        save(cur.export())  # the folder is writable, or the server does not start
    return cur, save


def _server_rows(limits):
    """A curriculum's chunks built in a worker process under the server's build deadline."""
    import json

    from opgen.curriculum import CurriculumError, level_recipe
    from opgen.taskbuild import Builder, BuildRefused

    builder = Builder(limits.task_timeout_s)

    def rows_at(bucket, level: int, seed: int) -> list[dict]:
        try:
            return [json.loads(r) for r in builder.rows(level_recipe(bucket, level), bucket.split, seed, None)]
        except BuildRefused as exc:
            raise CurriculumError(f"bucket {bucket.name!r}, level {level}: {exc}") from None

    return rows_at
