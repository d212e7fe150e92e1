"""Entry points for the PL/Python procedures of sql/plpython.sql (`CALL sqlanon.run_job('name')`).

They run inside a PostgreSQL backend and call the same API as the CLI over a
loopback connection to the calling database, as the calling role: the
orchestration is shared, not duplicated, and every query still runs in this
server. Errors come back as one-line SQL errors.
"""
from __future__ import annotations

import json
from typing import Any, Callable

from sqlalchemy.engine import URL

from .errors import SqlanonError


def loopback_url(plpy: Any) -> str:
    """This database, as the calling role, over the server's Unix socket."""
    where = plpy.execute("SELECT current_user AS u, current_database() AS d, current_setting('port') AS port, "
                         "split_part(current_setting('unix_socket_directories'), ',', 1) AS socket")[0]
    return URL.create("postgresql+psycopg", username=where["u"], database=where["d"],
                      query={"host": where["socket"].strip(), "port": where["port"],
                             "application_name": "sqlanon-in-server"}).render_as_string(hide_password=False)


def run_job(plpy: Any, schema: str, job: str, resume: bool) -> str:
    from .api import RunOptions, run_job as run
    return _answer(plpy, f"run_job({job!r})",
                   lambda url: run(job, url, RunOptions(metadata_schema=schema), resume=resume).to_dict())


def register_job(plpy: Any, schema: str, name: str, config: str, files: str | None) -> int:
    """Register from a JSON config; `files` maps each path the config names to the file's text."""
    from .api import register_job_config
    named = json.loads(files or "{}")

    def read(path: str, where: str) -> str:
        if path not in named:
            raise SqlanonError(f"{where}: {path!r} is not among the files given (keys of the files argument)")
        return named[path]

    return _answer(plpy, f"register_job({name!r})",
                   lambda url: register_job_config(name, json.loads(config), read, url, schema))


def publish_node(plpy: Any, schema: str, run_id: int, node: str, table: str, target_schema: str | None) -> str:
    from .api import RunOptions, publish_node as publish
    levels = tuple(int(level) for level in node.split(","))
    return _answer(plpy, f"publish({run_id}, {node!r})",
                   lambda url: publish(run_id, levels, table, target_schema, url,
                                       RunOptions(metadata_schema=schema)).to_dict())


def _answer(plpy: Any, what: str, action: Callable[[str], Any]) -> Any:
    try:
        result = action(loopback_url(plpy))
    except SqlanonError as exc:
        plpy.error(f"sqlanon.{what}: {exc}")
    return json.dumps(result) if isinstance(result, dict) else result
