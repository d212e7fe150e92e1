"""Entry points for the PL/Python procedures of sql/plpython.sql (`CALL sqlanon.run_job('name')`).

They run inside a PostgreSQL backend and call the same API as the CLI over a
loopback connection to the calling database, as the calling role: the
orchestration is shared, not duplicated, and every query still runs in this
server. Errors come back as one-line SQL errors.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import URL

from .backends import first_line
from .errors import RunCancelled, SqlanonError
from .store import postgres as routines


def loopback_url(plpy: Any, schema: str, role: str) -> str:
    """This database, as `role`, over the server's Unix socket.

    `role` is the job's registrant (or the caller, to register one): a run
    works with that role's rights on a connection of that role, never on the
    caller's session switched to it (SET ROLE), which the job's views and
    functions could switch back. The store's routines checked that the caller
    is the role or a member of it. Peer authentication with a map lets the
    server's OS user in as the runner roles (docs/postgresql.md, "Security"). The socket
    folder comes from installation(), where the installing superuser's
    migration wrote it: `unix_socket_directories` itself is readable only by
    superusers and pg_read_all_settings, which a runner role need not be.
    """
    where = routines.server_address(plpy, schema)
    if not where["socket"]:
        plpy.error(
            f"sqlanon: schema {schema!r} does not know the server's socket folder; a superuser upgrades it "
            "once with: sqlanon migrate --db URL"
        )
    return URL.create(
        "postgresql+psycopg",
        username=role,
        database=where["d"],
        query={"host": where["socket"].strip(), "port": where["port"], "application_name": "sqlanon-in-server"},
    ).render_as_string(hide_password=False)


def run_job(plpy: Any, schema: str, job: str, resume: bool) -> str:
    from .api import RunOptions
    from .api import run_job as run

    options = RunOptions(metadata_schema=schema, progress=_interrupt_probe(plpy, job))
    answer = _answer(
        plpy,
        schema,
        f"run_job({job!r})",
        lambda: routines.job_registrant(plpy, schema, job),
        lambda url: run(job, url, options, resume=resume).to_dict(),
    )
    settle_late_cancel(plpy, job)
    return str(answer)


def settle_late_cancel(plpy: Any, job: str) -> None:
    """Act on a cancel or statement_timeout that came after the run's last check, so it does not fail the CALL.

    By then the run has finished and committed on its loopback session (and
    published, if the job has an output); an error would tell the caller the
    opposite. The result stands, and a notice says the stop came too late.
    """
    try:
        plpy.execute("SELECT pg_sleep(0)")
    except plpy.SPIError as exc:
        reason = (str(exc).strip().splitlines() or ["cancelled"])[0]
        plpy.notice(
            f"sqlanon.run_job({job!r}): the calling statement was stopped ({reason}) after the run had "
            "finished; its result stands (see the runs table)"
        )


def _interrupt_probe(plpy: Any, job: str) -> Callable[[str, int, int | None], None]:
    """A progress callback that lets this backend act on a cancel, a statement_timeout or a lost client.

    The work runs on loopback sessions while this backend waits in Python,
    where PostgreSQL cannot interrupt it; between waves it runs a statement
    that checks for interrupts, and a pending cancel stops the run there
    (its loopback sessions close, the job lock is released, the run is
    recorded as cancelled and can be resumed).
    """

    def probe(phase: str, done: int, total: int | None) -> None:
        try:
            plpy.execute("SELECT pg_sleep(0)")
        except plpy.SPIError as exc:
            reason = (str(exc).strip().splitlines() or ["cancelled"])[0]
            raise RunCancelled(
                f"the calling statement was stopped ({reason}); continue it with: CALL run_job({job!r}, resume => true)"
            ) from None

    return probe


def register_job(plpy: Any, schema: str, name: str, config: str, files: str | None) -> int:
    """Register from a JSON config; `files` maps each path the config names to the file's text."""
    from .api import register_job_config

    named = json.loads(files or "{}")

    def read(path: str, where: str) -> str:
        if path not in named:
            raise SqlanonError(f"{where}: {path!r} is not among the files given (keys of the files argument)")
        return str(named[path])

    return int(
        _answer(
            plpy,
            schema,
            f"register_job({name!r})",
            lambda: plpy.execute("SELECT session_user AS u")[0]["u"],
            lambda url: register_job_config(name, json.loads(config), read, url, schema),
        )
    )


def publish_node(plpy: Any, schema: str, run_id: int, node: str, table: str, target_schema: str | None) -> str:
    from .api import RunOptions
    from .api import publish_node as publish

    levels = tuple(int(level) for level in node.split(","))
    return str(
        _answer(
            plpy,
            schema,
            f"publish({run_id}, {node!r})",
            lambda: routines.job_registrant(plpy, schema, routines.job_of_run(plpy, schema, run_id)),
            lambda url: publish(
                run_id, levels, table, target_schema, url, RunOptions(metadata_schema=schema)
            ).to_dict(),
        )
    )


def analyze_job(plpy: Any, schema: str, job: str, node: str | None) -> str:
    from .api import RunOptions, analyze_registered

    levels = None if node is None else tuple(int(level) for level in node.split(","))
    return str(
        _answer(
            plpy,
            schema,
            f"analyze_job({job!r})",
            lambda: routines.job_registrant(plpy, schema, job),
            lambda url: analyze_registered(job, url, RunOptions(metadata_schema=schema), levels).to_dict(),
        )
    )


def _answer(plpy: Any, schema: str, what: str, role: Callable[[], str], action: Callable[[str], Any]) -> Any:
    """Run `action` over a loopback URL as `role()`; any error reaches the caller as one line, not a traceback."""
    try:
        result = action(loopback_url(plpy, schema, role()))
    except plpy.SPIError as exc:  # refused by the store's routines (not the caller's job or run)
        plpy.error(f"sqlanon.{what}: {(str(exc).strip().splitlines() or ['refused'])[0]}")
    except SqlanonError as exc:
        plpy.error(f"sqlanon.{what}: {exc}")
    except Exception as exc:  # a database error on the loopback session: its first line, as the CLI shows it
        detail = getattr(exc, "orig", None) or exc
        plpy.error(f"sqlanon.{what}: {first_line(detail)}")
    return json.dumps(result) if isinstance(result, dict) else result
