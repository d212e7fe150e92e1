"""The `sqlanon` command line."""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import math
import os
import shutil
import signal
import sys
import textwrap
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import click
import sqlalchemy as sa
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .. import __version__
from ..analysis.attacks import ATTACK_FIGURES, AnalysisReport, AnalysisSettings, BayesSettings, default_background
from ..analysis.inference import InferenceReport
from ..analysis.reconstruction import DEFAULT_INTERVALS, DEFAULT_MAX_ITERATIONS, DEFAULT_TOLERANCE
from ..api import (
    AnonymizeResult,
    RunOptions,
    SearchResult,
    analyze,
    analyze_table,
    anonymize,
    apply,
    audit,
    condense_add,
    create_key,
    generalize,
    hierarchies,
    inference,
    list_keys,
    load_csv,
    node_metrics,
    profile,
    reconstruct,
    register_job,
    releases,
    report,
    run_job,
    search,
)
from ..backends import connect_hint, first_line, normalize_url, open_database, qualified_name
from ..config import check_memory_limit, load_job
from ..engine.audit import AuditReport
from ..errors import USER_INTERRUPT, ConfigError, SqlanonError, interrupted
from ..model.job import Job, Suppression
from ..model.selection import METRICS, best_node, level_metrics, node_label, selection_metric
from ..publish.anatomy import AnatomyReport
from ..publish.condense import CondensationReport
from ..publish.differential_privacy import PrivateRelease
from ..publish.ledger import LedgerCheck
from ..publish.mondrian import MondrianReport
from ..publish.randomize import RandomizationReport
from ..registry import JobRegistry, opened_registry
from ..store.migrate import DEFAULT_SCHEMA, current_version, downgrade, grant_runner, migrate, stored_routines
from ..store.records import cleanup_dead_runs


def _console(stderr: bool = False) -> Console:
    """A terminal gets tables fitted to its width; a pipe or a file gets them whole (never cut at 80 columns)."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else 100_000)


out = _console()
err = _console(stderr=True)

DB_OPTION = click.option(
    "--db", "db_url", metavar="URL", help="Database to use instead of source.url (SQLAlchemy URL or DuckDB file path)."
)
FORMATS = ("table", "csv", "json")


def output_format(command: Callable[..., Any]) -> Callable[..., Any]:
    """`--format table|csv|json` and its shorthand `--json`, passed to the command as `fmt`."""

    @click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default="table",
        show_default=True,
        help="table: for people (whole tables when stdout is not a terminal); csv or json: for programs.",
    )
    @click.option("--json", "as_json", is_flag=True, help="Same as --format json: one JSON object.")
    @functools.wraps(command)
    def with_format(*args: Any, fmt: str, as_json: bool, **kwargs: Any) -> Any:
        return command(*args, fmt="json" if as_json else fmt, **kwargs)

    return with_format


def duckdb_resources(command: Callable[..., Any]) -> Callable[..., Any]:
    """`--memory-limit` and `--temp-directory` (DuckDB), passed to the command as `resources` for RunOptions."""

    @click.option(
        "--memory-limit",
        metavar="SIZE",
        help="DuckDB: memory it may use, e.g. 2GB or 50% (default: source.memory_limit, else half the "
        "machine's memory); beyond it DuckDB spills to disk.",
    )
    @click.option(
        "--temp-directory",
        type=click.Path(file_okay=False, path_type=Path),
        help="DuckDB: folder for what does not fit in memory (default: source.temp_directory, else "
        "DuckDB's, beside the database file).",
    )
    @functools.wraps(command)
    def with_resources(*args: Any, memory_limit: str | None, temp_directory: Path | None, **kwargs: Any) -> Any:
        resources = {
            "memory_limit": memory_limit and check_memory_limit(memory_limit, "--memory-limit"),
            "temp_directory": temp_directory and temp_directory.resolve(),
        }
        return command(*args, resources=resources, **kwargs)

    return with_resources


KEEP_OPTION = click.option(
    "--keep", is_flag=True, help="Keep the run's dimension tables (its star schema) in the work schema for inspection."
)
RESUME_OPTION = click.option(
    "--resume",
    is_flag=True,
    help="Continue the job's last run of this command, stopped unfinished (Ctrl-C, a crash), from its last "
    "completed Incognito iteration; refused if the job or its hierarchies changed since.",
)
SCHEMA_OPTION = click.option(
    "--metadata-schema",
    default=DEFAULT_SCHEMA,
    show_default=True,
    help="Schema holding sqlanon's run records and lattice tables.",
)

MINIMAL_SHOWN = 30  # minimal nodes a result prints as a table (the lowest first)
HIERARCHY_ROWS = 25  # values `sqlanon hierarchy` prints as a table without --all
EXIT_OK, EXIT_CRITERION_FAILS, EXIT_ERROR = 0, 1, 2  # as docs/commands.md's "Exit codes" says
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command stopped by Ctrl-C


def _on_interrupt(signum: int, frame: Any) -> None:
    """Ctrl-C: remembered (a driver may turn the interrupt into an error of its own), then raised as Python does."""
    USER_INTERRUPT.set()
    raise KeyboardInterrupt


class FiniteNumber(click.ParamType):  # type: ignore[type-arg]  # generic in click's stubs only
    """A command-line number that must be finite: NaN compares false with every bound, so a threshold of nan
    would switch its check off."""

    name = "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise SqlanonError(f"{_option(param)}: {value!r} is not a number") from None
        if not math.isfinite(number):
            raise SqlanonError(f"{_option(param)}: {value!r} is not a finite number; give one such as 0.2")
        return number


def _option(param: click.Parameter | None) -> str:
    return param.opts[0] if param is not None and param.opts else "a number"


FINITE = FiniteNumber()


class Command(click.Group):
    """Turns user and database errors into one line and exit code 2 (tracebacks only with --debug, which is
    accepted anywhere on the command line), and Ctrl-C into one line and exit code 130."""

    debug = False

    def main(self, args: list[str] | None = None, *rest: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        args = list(sys.argv[1:] if args is None else args)
        Command.debug = "--debug" in args
        if Command.debug:  # after the subcommand too: move it where the group's option is parsed
            args = ["--debug"] + [a for a in args if a != "--debug"]
        return super().main(args, *rest, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        USER_INTERRUPT.clear()
        main_thread = threading.current_thread() is threading.main_thread()  # where Python allows a handler
        before = signal.signal(signal.SIGINT, _on_interrupt) if main_thread else None
        try:
            return self._invoke(ctx)
        except BaseException as exc:
            if not interrupted(exc) or Command.debug or isinstance(exc, SystemExit):
                raise
            err.print(
                "[bold red]interrupted:[/] nothing was published or left behind; a run it started is recorded as "
                "cancelled",
                highlight=False,
                soft_wrap=True,
            )
            sys.exit(EXIT_INTERRUPTED)
        finally:
            if main_thread:
                signal.signal(signal.SIGINT, before)
            USER_INTERRUPT.clear()

    def _invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # the reader went away (e.g. `| head`): stop quietly, as other tools do
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(EXIT_OK)
        except SqlanonError as exc:
            if Command.debug or interrupted(exc):  # an error that followed Ctrl-C: the interrupt is what to say
                raise
            # the message is text, not markup: "order: [values]" or a label like "[20-30]" stays as it is
            err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            sys.exit(EXIT_ERROR)
        except sa.exc.DBAPIError as exc:
            if Command.debug or interrupted(exc):
                raise
            first = first_line(exc.orig)
            err.print(
                f"[bold red]database error:[/] {escape(first + connect_hint(first))} (rerun with --debug for details)",
                highlight=False,
                soft_wrap=True,
            )
            sys.exit(EXIT_ERROR)
        except (sa.exc.SQLAlchemyError, OSError) as exc:  # e.g. a file that cannot be read or written
            if Command.debug or interrupted(exc):
                raise
            message = f"{escape(str(exc))} (rerun with --debug for details)"
            err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
            sys.exit(EXIT_ERROR)


@click.group(cls=Command, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.version_option(__version__, prog_name="sqlanon")
def main(debug: bool) -> None:
    """Anonymize tables inside DuckDB or PostgreSQL.

    A job file (YAML) names the source table, the quasi-identifiers with their
    hierarchies, the privacy criteria and the output table. Start with
    `sqlanon demo`, or `sqlanon example DIR` to get an editable job.
    """
    warnings.showwarning = _show_warning


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    err.print(f"[bold yellow]warning:[/] {escape(str(message))}", highlight=False, soft_wrap=True)


@main.command("search")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@DB_OPTION
@output_format
@KEEP_OPTION
@SCHEMA_OPTION
@RESUME_OPTION
@click.option(
    "--metrics",
    is_flag=True,
    help="Compute utility metrics (precision, discernibility, KL divergence, ...) of every minimal node.",
)
@duckdb_resources
def search_command(
    config: Path,
    db_url: str | None,
    fmt: str,
    keep: bool,
    metadata_schema: str,
    resume: bool,
    metrics: bool,
    resources: dict[str, Any],
) -> None:
    """Find every generalization satisfying the criteria, and the minimal ones.

    With suppression: {limit: N or a fraction} in the job, a node passes when
    the tuples of its violating classes number at most the limit.
    """
    job = load_job(config)
    with _progress(fmt) as progress:
        result = search(
            job,
            RunOptions(
                db_url=db_url,
                metadata_schema=metadata_schema,
                keep=keep,
                progress=progress,
                metrics=metrics,
                resume=resume,
                **resources,
            ),
        )
    _show_result(result, fmt)


@main.command("anonymize")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@DB_OPTION
@output_format
@KEEP_OPTION
@SCHEMA_OPTION
@RESUME_OPTION
@click.option("--replace", is_flag=True, help="Overwrite the output table if it exists.")
@duckdb_resources
def anonymize_command(
    config: Path,
    db_url: str | None,
    fmt: str,
    keep: bool,
    metadata_schema: str,
    resume: bool,
    replace: bool,
    resources: dict[str, Any],
) -> None:
    """Search, pick a generalization and write the audited output table.

    The node is chosen by the job's `select:` rule (default: policy
    min_absolute_distance, the lowest height); ties go to the lowest height,
    then to the smallest levels in QI order.
    """
    _anonymize(
        load_job(config),
        RunOptions(db_url=db_url, metadata_schema=metadata_schema, keep=keep, resume=resume, **resources),
        fmt,
        replace,
    )


@main.command("apply")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--table", "batch", required=True, help="The new batch: a table with the source's columns.")
@click.option("--schema", default=None, help="Schema of the batch and its output (default: the source's).")
@click.option("--run", "run_id", type=int, help="Apply the node this finished anonymize run published.")
@click.option("--node", "node_text", metavar="0,1,...", help="Or apply this node (levels in QI order).")
@click.option("--output", default=None, help="Table to write (default: BATCH_anon).")
@DB_OPTION
@output_format
@KEEP_OPTION
@SCHEMA_OPTION
@click.option("--replace", is_flag=True, help="Overwrite the output table if sqlanon wrote it.")
@duckdb_resources
def apply_command(
    config: Path,
    batch: str,
    schema: str | None,
    run_id: int | None,
    node_text: str | None,
    output: str | None,
    db_url: str | None,
    fmt: str,
    keep: bool,
    metadata_schema: str,
    replace: bool,
    resources: dict[str, Any],
) -> None:
    """Generalize a new batch of the job's table exactly as an earlier release was, and publish it audited.

    The batch alone must satisfy the job's criteria at that node (suppressing
    up to the job's limit); otherwise nothing is written and the error says
    how many tuples and which classes violate them.
    """
    node = _parse_node(node_text) if node_text is not None else None
    with _progress(fmt) as progress:
        result = apply(
            load_job(config),
            batch,
            node,
            run_id,
            output,
            schema,
            RunOptions(db_url=db_url, metadata_schema=metadata_schema, keep=keep, progress=progress, **resources),
            replace,
        )
    if fmt == "json":
        print(json.dumps(result.to_dict()))
    elif fmt == "csv":
        _write_csv(*_node_rows(result.search, [result.node]))
    else:
        _print_anonymized(result)


def _parse_node(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise SqlanonError(f"--node {text!r}: give one whole-number level per quasi-identifier, e.g. 0,1,2") from None


#: each figure of `analyze`, one line (shown under its table and in `analyze --help`): {s} the attribute, {near},
#: {risk}, {delta}, {epsilon}, {rho1}, {rho2} the settings
FIGURES = {
    "attacks": {
        "classes": "equivalence classes released",
        "homog. classes, tuples": "classes whose tuples all show one {s} value (where persons hold several: one "
        "all of them hold), and their tuples: knowing that a person is in one tells their value (homogeneity attack)",
        "near classes, tuples": "classes where one {s} value holds at least {near} of the tuples, and their tuples",
        "disclosed b=N": "tuples whose value an adversary learns after ruling out N other values of their class "
        "(background knowledge attack)",
    },
    "risk": {
        "rows, supp": "tuples released, and tuples suppressed (left out, or masked)",
        "max risk, avg risk": "a record's re-identification risk is 1 / its class's size (an adversary who knows "
        "the person is in the table): the highest, and the average over records",
        "at risk": "records whose risk is above {risk}",
        "unique": "share of records alone in their class",
    },
    "bayes": {
        "positive": "tuples whose true value has a posterior above 1 - {delta}",
        "negative": "tuples of persons for whom some value their class shows has a posterior below {epsilon}: "
        "this adversary knows the whole table, so everyone whose cell of the original table holds one value learns "
        "that the other values of their class are not theirs; high wherever classes hold several values, and no "
        "flaw of the release by itself",
        "breach": "tuples whose value's prior is below {rho1} and posterior above {rho2}, or the mirror",
    },
    "utility": {
        "precision": "Sweeney's Prec: 1 - the average share of each QI's hierarchy height used (1: none generalized)",
        "classes": "equivalence classes released",
        "discernibility, dm_star": "sum of the squared class sizes plus the table's rows for each suppressed tuple; "
        "DM* (ARX): every class counts its squared size, suppressed ones too",
        "aecs": "average class size, the suppressed tuples as one class (ARX)",
        "kl_divergence": "KL divergence of the (QI, sensitive) distribution a reader estimates from the release "
        "(spread evenly under each generalized value) from the table's (0: the same)",
        "loss": "normalized certainty penalty (ARX): per tuple and QI, (leaves under its value - 1) / (leaves of "
        "the hierarchy - 1), 1 when suppressed, averaged",
    },
}


def _figure_lines(kind: str, **settings: Any) -> list[str]:
    """The one-line meanings of a table's figures."""
    return [f"{name}: {meaning.format(**settings)}" for name, meaning in FIGURES[kind].items()]


def _analysis_settings(report: AnalysisReport, bayes: BayesSettings) -> dict[str, Any]:
    settings = report.settings
    return {
        "s": report.sensitive,
        "near": f"{settings.near:.0%}",
        "risk": settings.risk_threshold,
        "delta": bayes.delta,
        "epsilon": bayes.epsilon,
        "rho1": bayes.rho1,
        "rho2": bayes.rho2,
    }


LEGEND_WIDTH = 118  # within a 120-column terminal


def _legend(kind: str, settings: dict[str, Any]) -> None:
    """A table's figures, one meaning each, wrapped to LEGEND_WIDTH."""
    for line in _figure_lines(kind, **settings):
        wrapped = textwrap.fill(line, LEGEND_WIDTH, initial_indent="  ", subsequent_indent="    ")
        out.print(wrapped, style="dim", highlight=False, soft_wrap=True)


def _analysis_epilog() -> str:
    """`analyze --help`'s list of what each figure means, by table (click keeps a paragraph after \\b as written)."""
    generic = {
        "s": "sensitive",
        "near": "--near",
        "risk": "--risk-threshold",
        "delta": "--delta",
        "epsilon": "--epsilon",
        "rho1": "rho1",
        "rho2": "rho2",
    }
    titles = {"attacks": "Attacks", "risk": "Risk", "bayes": "Bayes-optimal audit", "utility": "Utility"}
    paragraphs = []
    for kind, title in titles.items():
        lines = [
            textwrap.fill(line, 76, initial_indent="  ", subsequent_indent="    ")
            for line in _figure_lines(kind, **generic)
        ]
        paragraphs.append("\b\n" + f"{title}:\n" + "\n".join(lines))
    return "What each figure means (also under each table):\n\n" + "\n\n".join(paragraphs)


@main.command("analyze", epilog=_analysis_epilog())
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--node", "node_text", metavar="0,1,...", help="Analyze this node (default: every minimal node).")
@click.option("--table", default=None, help="Analyze this published table instead of the lattice.")
@click.option("--schema", default=None, help="Schema of --table.")
@click.option("--sensitive", default=None, help="The attribute the attacks target (default: the job's first).")
@click.option(
    "--near",
    type=FINITE,
    default=0.95,
    show_default=True,
    help="Share of a class's most frequent value that makes it nearly homogeneous.",
)
@click.option(
    "--risk-threshold",
    type=FINITE,
    default=0.2,
    show_default=True,
    help="Records whose re-identification risk (1 / class size) is above this are at risk.",
)
@click.option(
    "--background",
    type=int,
    default=None,
    help="Values an adversary can rule out: disclosure for b = 0..this (default: l - 2 for the job's "
    "l-diversity on the attribute, else 2).",
)
@click.option(
    "--delta",
    type=FINITE,
    default=0.05,
    show_default=True,
    help="Bayes audit: positive disclosure when a person's value has posterior above 1 - delta.",
)
@click.option(
    "--epsilon",
    type=FINITE,
    default=0.05,
    show_default=True,
    help="Bayes audit: negative disclosure when a value of the person's class has posterior below this.",
)
@click.option(
    "--rho",
    nargs=2,
    type=FINITE,
    default=(0.2, 0.8),
    show_default=True,
    metavar="RHO1 RHO2",
    help="Bayes audit: (rho1, rho2) breach, prior below rho1 and posterior above rho2 (or the mirror).",
)
@click.option("--max-risk", type=FINITE, help="Exit 1 when a release's highest risk is above this.")
@click.option("--max-homogeneous", type=int, help="Exit 1 when a release has more tuples in homogeneous classes.")
@DB_OPTION
@output_format
def analyze_command(
    config: Path,
    node_text: str | None,
    table: str | None,
    schema: str | None,
    sensitive: str | None,
    near: float,
    risk_threshold: float,
    background: int | None,
    delta: float,
    epsilon: float,
    rho: tuple[float, float],
    max_risk: float | None,
    max_homogeneous: int | None,
    db_url: str | None,
    fmt: str,
) -> None:
    """Homogeneity and background-knowledge attacks, re-identification risk and utility of each minimal node
    (or of --node, or of a published --table), computed in the database.

    Exit code 1 when --max-risk or --max-homogeneous is exceeded, so a release can be gated on them.
    """
    if node_text is not None and table is not None:
        raise SqlanonError("give --node or --table, not both")
    job = load_job(config)
    if max_homogeneous is not None and not (sensitive or job.sensitive):
        raise ConfigError(
            "--max-homogeneous counts the tuples of classes homogeneous in a sensitive attribute, and the job has "
            "none; list one under sensitive:, or leave the option out"
        )
    settings = AnalysisSettings(
        near, risk_threshold, default_background(job, sensitive) if background is None else background
    )
    bayes = BayesSettings(delta=delta, epsilon=epsilon, rho1=rho[0], rho2=rho[1])
    with _progress(fmt) as progress:
        options = RunOptions(db_url=db_url, progress=progress)
        if table is not None:
            report = analyze_table(job, table, schema, options, sensitive, settings)
        else:
            node = _parse_node(node_text) if node_text is not None else None
            report = analyze(job, options, node, sensitive, settings, bayes)
    if fmt == "json":
        print(json.dumps(report.to_dict()))
    else:
        _print_analysis(report, bayes, fmt)
    over = report.exceeds(max_risk, max_homogeneous)
    if over and fmt == "table":
        err.print("[bold red]over the limits:[/] " + "; ".join(over), highlight=False, soft_wrap=True)
    sys.exit(EXIT_CRITERION_FAILS if over else EXIT_OK)


@main.command("inference")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--max-probability",
    type=FINITE,
    default=None,
    help="Positive disclosure: some P(s | person) above this (default: inference.max_probability, 0.5).",
)
@click.option(
    "--min-probability",
    type=FINITE,
    default=None,
    help="Negative disclosure: a value some release allowed falls below this (default: 0.01).",
)
@click.option("--table", default=None, help="Write P(s | person) to this table (default: inference.table).")
@click.option("--replace", is_flag=True, help="Overwrite that table if sqlanon wrote it.")
@DB_OPTION
@output_format
@SCHEMA_OPTION
def inference_command(
    config: Path,
    max_probability: float | None,
    min_probability: float | None,
    table: str | None,
    replace: bool,
    db_url: str | None,
    fmt: str,
    metadata_schema: str,
) -> None:
    """What the job's releases reveal together: P(s | person) by maximum entropy over every release (releases:),
    solved in the database, against each release alone.

    Exit code 1 when a person's value is disclosed (positively or negatively), so a new release can be checked
    before it is published.
    """
    job = load_job(config)
    changes: dict[str, Any] = {
        k: v
        for k, v in (("max_probability", max_probability), ("min_probability", min_probability), ("table", table))
        if v is not None
    }
    if changes:
        job = dataclasses.replace(job, inference=dataclasses.replace(job.inference, **changes))
    with _progress(fmt) as progress:
        report = inference(
            job, RunOptions(db_url=db_url, metadata_schema=metadata_schema, progress=progress), replace=replace
        )
    if fmt == "json":
        print(json.dumps(report.to_dict()))
    else:
        _print_inference(report, job, fmt)
    sys.exit(EXIT_CRITERION_FAILS if report.disclosed else EXIT_OK)


def _print_inference(report: InferenceReport, job: Job, fmt: str) -> None:
    entropy = [[e.name, e.persons, e.alone, e.together, f"{e.drop:.1%}"] for e in report.entropy]
    _print_rows(
        "H(S | I) in nats, each release alone and all releases together (the same persons)",
        ["release", "persons", "alone", "together", "lower by"],
        entropy,
        fmt,
    )
    if fmt == "csv":
        return
    settings = job.inference
    out.print(
        f"{report.persons} persons, {report.variables} possible (person, value) pairs; constraints: "
        f"{report.zero_constraints} zero, {report.one_constraints} one, {report.relation_constraints} relation; "
        f"{report.iterations} passes, largest violation {report.max_violation:.2g}"
        f"{'' if report.converged else ' (not converged: raise inference.max_iterations)'}; "
        f"{report.seconds:.2f} s",
        highlight=False,
        soft_wrap=True,
    )
    for kind, count, rule in (
        ("positive", report.positive_count, f"P above {settings.max_probability}"),
        ("negative", report.negative_count, f"P below {settings.min_probability} for a value a release allowed"),
    ):
        listed = getattr(report, kind)
        if not listed:
            out.print(f"no {kind} disclosure ({rule})", highlight=False)
            continue
        more = f", the first {len(listed)} shown" if len(listed) < count else ""
        _print_rows(
            f"{count} {kind} disclosure(s) ({rule}){more}",
            ["person", "value", "P", "alone", "releases"],
            [[d["pseudonym"], d["value"], d["probability"], d["alone"], d["releases"]] for d in listed],
            fmt,
        )
    if report.table:
        out.print(f"P(s | person) for every person and value: table {report.table}", highlight=False)


ANALYSIS_COLUMNS = {
    "label": "release",
    "rows": "rows",
    "classes": "classes",
    "suppressed": "supp",
    "homogeneous_classes": "homog. classes",
    "homogeneous_tuples": "homog. tuples",
    "nearly_homogeneous_classes": "near classes",
    "nearly_homogeneous_tuples": "near tuples",
    "highest_risk": "max risk",
    "average_risk": "avg risk",
    "records_at_risk": "at risk",
    "unique_share": "unique",
}


def _print_analysis(report: AnalysisReport, bayes: BayesSettings, fmt: str) -> None:
    backgrounds = sorted(report.tables[0].disclosed_by_background) if report.tables else []
    if fmt == "csv":  # one row per release with every figure (the table's names, as before)
        names = [n for n in ANALYSIS_COLUMNS if report.sensitive is not None or n not in ATTACK_FIGURES]
        backgrounds = backgrounds if report.sensitive is not None else []
        header = [ANALYSIS_COLUMNS[n] for n in names] + [f"disclosed b={b}" for b in backgrounds]
        raw = [
            [getattr(t, name) for name in names] + [t.disclosed_by_background[b] for b in backgrounds]
            for t in report.tables
        ]
        _write_csv(header, raw)
        return
    settings = _analysis_settings(report, bayes)
    if report.sensitive is None:
        out.print(
            "The job has no sensitive attribute: no attack on a sensitive value applies (list one under "
            "sensitive: for the attacks and the Bayes audit); the risk and utility of each release follow.",
            highlight=False,
            soft_wrap=True,
        )
    else:
        _print_attacks(report, settings, backgrounds, fmt)
    _print_rows(
        "re-identification risk",
        ["release", "rows", "supp", "max risk", "avg risk", "at risk", "unique"],
        [
            [t.label, t.rows, t.suppressed, t.highest_risk, t.average_risk, t.records_at_risk, t.unique_share]
            for t in report.tables
        ],
        fmt,
    )
    _legend("risk", settings)
    _print_population_bayes_and_utility(report, settings, fmt)


def _print_attacks(report: AnalysisReport, settings: dict[str, Any], backgrounds: list[int], fmt: str) -> None:
    """The homogeneity and background-knowledge attacks on the sensitive attribute, and the values revealed."""
    _print_rows(
        f"attacks on {report.sensitive}",
        ["release", "classes", "homog.\nclasses", "homog.\ntuples", "near\nclasses", "near\ntuples"]
        + [f"disclosed\nb={b}" for b in backgrounds],
        [
            [t.label, t.classes, t.homogeneous_classes, t.homogeneous_tuples]
            + [t.nearly_homogeneous_classes, t.nearly_homogeneous_tuples]
            + [t.disclosed_by_background[b] for b in backgrounds]
            for t in report.tables
        ],
        fmt,
    )
    _legend("attacks", settings)
    summary = report.summary()
    out.print(
        f"{summary['affected_tables']} of {summary['tables']} release(s) have homogeneous classes; on "
        f"average {summary['average_homogeneous_classes']:.3g} classes and "
        f"{summary['average_homogeneous_tuples']:.3g} tuples per release",
        highlight=False,
    )
    for t in report.tables:
        if t.revealed_values:
            out.print(escape(f"{t.label}: homogeneous classes reveal {', '.join(t.revealed_values)}"), highlight=False)


def _print_population_bayes_and_utility(report: AnalysisReport, settings: dict[str, Any], fmt: str) -> None:
    """The tables a release has where their figures were computed: population risks, Bayes audit, utility."""
    if any(t.marketer_risk is not None for t in report.tables):
        _print_rows(
            "against the population table (journalist: risk 1 / the class's size in the population; "
            "marketer: expected share of records re-identified)",
            ["release", "journalist max risk", "journalist at risk", "marketer risk"],
            [
                [t.label, t.journalist_highest_risk, t.journalist_records_at_risk, t.marketer_risk]
                for t in report.tables
            ],
            fmt,
        )
    if any(t.bayes for t in report.tables):
        _print_rows(
            "Bayes-optimal audit, the table itself as the adversary's knowledge (tuples)",
            ["release", "positive", "negative", "breach"],
            [[t.label, *t.bayes.values()] for t in report.tables],
            fmt,
        )
        _legend("bayes", settings)
    if any(t.utility for t in report.tables):
        names = ["precision", "classes", "discernibility", "dm_star", "aecs", "kl_divergence", "loss"]
        _print_rows(
            "utility (DM*, AECS and loss as ARX defines them)",
            ["release"] + [name.replace("_", "\n", 1) if len(name) > 9 else name for name in names],
            [[t.label] + [t.utility.get(n) for n in names] for t in report.tables],
            fmt,
        )
        _legend("utility", settings)


@main.command("report")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--out",
    "out_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="HTML file to write (one self-contained page).",
)
@click.option("--sensitive", default=None, help="The attribute the attacks target (default: the job's first).")
@click.option("--replace", is_flag=True, help="Overwrite --out if it is a report sqlanon wrote.")
@DB_OPTION
def report_command(config: Path, out_path: Path, sensitive: str | None, replace: bool, db_url: str | None) -> None:
    """Write one HTML page a data owner signs off on: what the release guarantees in plain words, each
    attribute before and after, the job; then the lattice, the chosen release and the alternatives it offered
    (a generalization), or the table the job published (Mondrian, anatomy: run anonymize first); attacks and risk.

    Needs Plotly (pip install 'sqlanon[report]'); the page embeds it and opens without a network.
    """
    with _progress("table") as progress:
        path = report(
            load_job(config),
            out_path,
            RunOptions(db_url=db_url, progress=progress),
            sensitive,
            replace=replace,
            job_file=config,
        )
    out.print(f"wrote {path}")


@main.command("audit")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--table", required=True, help="Table to audit (a published table, or the source itself).")
@click.option("--schema", default=None, help="Schema of the table (default: the database's current schema).")
@click.option(
    "--node",
    "node_text",
    metavar="0,1,...",
    help="The node the table was published at, where criteria compare it with the population (default: the "
    "level of each column's values).",
)
@DB_OPTION
@output_format
def audit_command(
    config: Path, table: str, schema: str | None, node_text: str | None, db_url: str | None, fmt: str
) -> None:
    """Evaluate the job's criteria on an existing table, without searching.

    Reports the worst class for each criterion (smallest class, fewest distinct
    values, lowest entropy as exp(H), smallest c, largest distance) and the
    classes and tuples that violate it. Exit code 0 when every criterion
    holds, 1 when one does not.
    """
    node = _parse_node(node_text) if node_text is not None else None
    with _progress(fmt) as progress:
        report = audit(load_job(config), table, schema, RunOptions(db_url=db_url, progress=progress), node=node)
    if fmt == "json":
        print(json.dumps(report.to_dict()))
    elif fmt == "csv":
        _write_csv(AUDIT_COLUMNS, _audit_rows(report))
    else:
        _print_audit(table, report)
    sys.exit(EXIT_OK if report.ok else EXIT_CRITERION_FAILS)


@main.command("releases")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@DB_OPTION
@SCHEMA_OPTION
@click.option(
    "--forget",
    type=int,
    metavar="RUN",
    help="Take the release of this run out of the ledger first (one withdrawn before anyone read it).",
)
@output_format
def releases_command(config: Path, db_url: str | None, metadata_schema: str, forget: int | None, fmt: str) -> None:
    """List the job's release ledger (`ledger:` in the job), oldest first.

    Each release: the run that published it, when, how, its tables, node and
    criteria, its persons and rows, and whether its tables are still as
    published. A later release is checked against every one listed; one that
    was dropped or changed stops it until it is restored or forgotten.
    """
    job = load_job(config)
    listed = releases(job, RunOptions(db_url=db_url, metadata_schema=metadata_schema), forget=forget)
    if fmt == "json":
        print(json.dumps(listed))
        return
    if not listed:
        keeps = "" if job.ledger else " (it keeps none: add ledger: {person: ID} to record its publications)"
        out.print(f"job {job.name!r} has no release in its ledger{keeps}", highlight=False)
        return
    header = ["run", "published", "method", "tables", "node", "criteria", "persons", "rows", "state"]
    _print_rows("The job's releases:", header, [[r[h] for h in header] for r in listed], fmt)


@main.command("hierarchy")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("qi", required=False)
@DB_OPTION
@output_format
@click.option("--all", "show_all", is_flag=True, help=f"Every value (the table format shows {HIERARCHY_ROWS}).")
def hierarchy_command(config: Path, qi: str | None, db_url: str | None, fmt: str, show_all: bool) -> None:
    """Show the hierarchy of QI (or of every quasi-identifier) as the job's search uses it.

    One row per original value, one column per level up to the top. A
    generated hierarchy is built from the column's values in the source table
    (or in source.csv when it is not loaded yet); nothing is written.
    """
    job = load_job(config)
    names = job.qi_names
    if qi is not None and qi not in names:
        raise SqlanonError(f"{qi!r} is not a quasi-identifier of the job (its quasi-identifiers: {', '.join(names)})")
    found = hierarchies(job, RunOptions(db_url=db_url))
    chosen = {name: h for name, h in found.items() if qi is None or name == qi}
    if fmt == "json":
        print(
            json.dumps(
                {
                    name: {"origin": h.origin, "height": h.height, "paths": [list(p) for p in h.paths]}
                    for name, h in chosen.items()
                }
            )
        )
        return
    for name, h in chosen.items():
        header = ["value"] + [f"level {lv}" for lv in range(1, h.height + 1)]
        rows = [["NULL" if p[0] == "" else p[0], *p[1:]] for p in h.paths]
        if fmt == "csv":
            _write_csv(["quasi_identifier", *header], [[name, *row] for row in rows])
            continue
        shown = rows if show_all else rows[:HIERARCHY_ROWS]
        more = "" if len(shown) == len(rows) else f", the first {len(shown)} shown (--all for every one)"
        _print_rows(f"{name}: {h.origin}, {len(rows)} values, height {h.height}{more}", header, shown, fmt)


@main.command("demo")
@click.option(
    "--db",
    "db_path",
    default="sqlanon-demo.duckdb",
    show_default=True,
    metavar="PATH",
    help="DuckDB file to create (or a database URL).",
)
@output_format
def demo_command(db_path: str, fmt: str) -> None:
    """Anonymize the bundled Adult census data (30,162 rows, 9 QIs, k=5, at most 2% of the rows suppressed)
    into a DuckDB file, and show what the suppression buys."""
    job = load_job(_bundled("adult.yaml")).with_url(normalize_url(db_path, Path.cwd()))
    with _progress(fmt) as progress:
        published = generalize(
            dataclasses.replace(job, suppression=Suppression(DEMO_SUPPRESSION)),
            RunOptions(progress=progress),
            replace=True,
        )
        without, without_metrics = _chosen_node(job, RunOptions(progress=progress))
    if fmt == "json":
        print(
            json.dumps(
                {**published.to_dict(), "without_suppression": {"node": list(without), "metrics": without_metrics}}
            )
        )
        return
    _show_result(published, fmt)
    if fmt == "table":
        _print_suppression_gain(published, without, without_metrics)
        out.print(
            f"\nThe source is table [bold]adult[/], the result [bold]adult_anon[/] in {db_path}: every "
            "combination of the nine quasi-identifiers (as published) is shared by at least 5 people. Copy the "
            "job to edit it: [bold]sqlanon example my-job[/]"
        )


DEMO_SUPPRESSION = 0.02  # the demo's limit: a share of the rows that may be left out


def _chosen_node(job: Job, options: RunOptions) -> tuple[tuple[int, ...], dict[str, Any]]:
    """The node the job's selection rule picks among its minimal nodes, and its metrics (nothing written)."""
    result = search(job, options)
    metric = selection_metric(job.select.policy, job.select.metric)
    if metric.levels_only:
        node = best_node(metric, {n: level_metrics(n, result.heights) for n in result.minimal})
        return node, node_metrics(job, [node], options)[node]
    found = node_metrics(job, result.minimal, options)
    node = best_node(metric, found)
    return node, found[node]


def _print_suppression_gain(published: AnonymizeResult, without: tuple[int, ...], metrics: dict[str, Any]) -> None:
    chosen = published.search.metrics[published.node]
    out.print(
        "\nwhat suppression buys (precision: share of the hierarchies' detail kept; classes: groups a reader "
        "can tell apart)",
        highlight=False,
        soft_wrap=True,
    )
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("release", "node", "rows left out", "precision", "classes", "avg class size"):
        table.add_column(column, justify="right")
    for name, node, values in (
        ("without suppression", without, metrics),
        (f"published (up to {DEMO_SUPPRESSION:.0%} left out)", published.node, chosen),
    ):
        table.add_row(
            name,
            node_label(node),
            str(values["suppressed"]),
            f"{values['precision']:.2f}",
            str(values["classes"]),
            _shown_number(values["avg_class_size"]),
        )
    out.print(table)


@main.command("example")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
def example_command(directory: Path) -> None:
    """Copy the Adult example job (config, data, hierarchies) into DIRECTORY."""
    if directory.exists() and any(directory.iterdir()):
        raise SqlanonError(f"{directory} exists and is not empty; name a new directory")
    source = resources.files("sqlanon.data").joinpath("adult")
    with resources.as_file(source) as path:
        shutil.copytree(
            path, directory, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__init__.py", "__pycache__")
        )
    out.print(f"Wrote {directory}/adult.yaml with its data. Run: [bold]sqlanon anonymize {directory}/adult.yaml[/]")


@main.command("load")
@click.argument("csv", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--table", required=True, help="Table to create.")
@click.option("--schema", default=None, help="Schema of the table (default: the database's current schema).")
@click.option("--db", "db_url", required=True, metavar="URL", help="Database to load into (URL or DuckDB file path).")
@click.option("--delimiter", default=None, help="Field separator (default: detected).")
@click.option(
    "--option",
    "options",
    multiple=True,
    metavar="NAME=VALUE",
    help="Another CSV reading option, as in source.csv_options (repeatable), e.g. nullstr=?",
)
@click.option("--replace", is_flag=True, help="Overwrite the table if it exists (whoever created it).")
@SCHEMA_OPTION
def load_command(
    csv: Path,
    table: str,
    schema: str | None,
    db_url: str,
    delimiter: str | None,
    options: tuple[str, ...],
    replace: bool,
    metadata_schema: str,
) -> None:
    """Load a CSV file (plain or gzip'd) into a new table, in one transaction.

    A registered job reads a table, not a file: load the data first, e.g.
    sqlanon load adult.csv.gz --table adult --delimiter ';' --db postgresql+psycopg://...
    """
    csv_options: dict[str, Any] = dict(_option_pair(o) for o in options)
    if delimiter is not None:
        csv_options["delimiter"] = delimiter
    rows = load_csv(csv, table, db_url, schema, csv_options, replace, metadata_schema)
    out.print(f"loaded {rows:,} rows into {qualified_name(schema, table)}")


def _option_pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise SqlanonError(f"--option {text!r}: write NAME=VALUE, e.g. --option nullstr=?")
    return name.strip(), value


@main.command("condense-add")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--table", "batch", required=True, help="The new records: a table with the job's quasi-identifiers.")
@click.option("--schema", default=None, help="Schema of the table (default: the source's).")
@DB_OPTION
@SCHEMA_OPTION
@output_format
def condense_add_command(
    config: Path, batch: str, schema: str | None, db_url: str | None, metadata_schema: str, fmt: str
) -> None:
    """Add new records to a condensed publication (output.method condense).

    Each record of --table joins the group whose mean is nearest; a
    group that reaches 2k records splits in two along its longest
    eigenvector. The groups table and the synthetic table are written
    anew and audited in one transaction; the job's source is not read.
    """
    with _progress(fmt) as progress:
        options = RunOptions(db_url=db_url, metadata_schema=metadata_schema, progress=progress)
        published = condense_add(load_job(config), batch, schema, options)
    _show(published, fmt)


@main.command("reconstruct")
@click.argument("table")
@click.option("--column", required=True, help="The randomized column.")
@click.option(
    "--db", "db_url", required=True, metavar="URL", help="Database holding the table (URL or DuckDB file path)."
)
@click.option("--schema", default=None, help="Schema of the table (default: the database's current schema).")
@click.option("--noise-table", default=None, help="The table describing the noise (default: TABLE_noise).")
@click.option("--uniform", type=FINITE, metavar="WIDTH", help="Or the noise: uniform of this width.")
@click.option("--gaussian", type=FINITE, metavar="SD", help="Or the noise: gaussian of this standard deviation.")
@click.option(
    "--intervals",
    type=click.IntRange(2, 1000),
    default=DEFAULT_INTERVALS,
    show_default=True,
    help="Intervals of the grid the distribution is reconstructed on.",
)
@click.option(
    "--tolerance",
    type=FINITE,
    default=DEFAULT_TOLERANCE,
    show_default=True,
    help="Stop when two estimates differ by less than this share of the chi-square test's threshold.",
)
@click.option(
    "--max-iterations",
    type=click.IntRange(1),
    default=DEFAULT_MAX_ITERATIONS,
    show_default=True,
    help="Stop after this many iterations even if the estimates still change.",
)
@click.option("--original", default=None, help="The table before noise (same database): compare with its values.")
@click.option("--original-column", default=None, help="The column of --original (default: --column).")
@output_format
def reconstruct_command(
    table: str,
    column: str,
    db_url: str,
    schema: str | None,
    noise_table: str | None,
    uniform: float | None,
    gaussian: float | None,
    intervals: int,
    tolerance: float,
    max_iterations: int,
    original: str | None,
    original_column: str | None,
    fmt: str,
) -> None:
    """The original distribution of a randomized column of TABLE.

    Counts the published values on a grid of --intervals, then iterates
    Agrawal and Srikant's Bayes reconstruction in the database until two
    estimates agree (the noise's distribution read from the noise table
    that a randomized publication writes, or given by --uniform or
    --gaussian). With --original, the data owner's check: how far the
    published and the reconstructed distributions are from the true one
    (L1 distance, 0 to 2). Writes nothing.
    """
    if uniform is not None and gaussian is not None:
        raise ConfigError("give the noise once: --uniform WIDTH or --gaussian SD")
    noise = (
        {"distribution": "uniform", "width": uniform}
        if uniform is not None
        else {"distribution": "gaussian", "sd": gaussian}
        if gaussian is not None
        else None
    )
    with _progress(fmt) as progress:
        found = reconstruct(
            db_url,
            table,
            column,
            schema,
            noise=noise,
            noise_table=noise_table,
            intervals=intervals,
            tolerance=tolerance,
            max_iterations=max_iterations,
            original=original,
            original_schema=schema,
            original_column=original_column,
            options=RunOptions(progress=progress),
        )
    if fmt == "json":
        print(json.dumps(found.to_dict()))
        return
    figures: list[list[Any]] = [
        ["column", f"{found.table}.{found.column}"],
        ["noise", ", ".join(f"{k} {v}" for k, v in found.noise.describe().items())],
        ["values", found.values],
        ["iterations", f"{found.iterations} ({'converged' if found.converged else 'stopped at --max-iterations'})"],
        ["statements / seconds", f"{found.statements} / {found.seconds:.2f}"],
    ]
    if found.l1_reconstructed is not None:
        figures.append(["L1 to the original: published values", found.l1_perturbed])
        figures.append(["L1 to the original: reconstructed", found.l1_reconstructed])
    _print_rows("Reconstructed distribution:", ["figure", "value"], figures, fmt)
    header = ["low", "high", "published", "reconstructed"] + (
        ["original"] if found.l1_reconstructed is not None else []
    )
    rows = [[i.low, i.high, i.perturbed, i.reconstructed, i.original][: len(header)] for i in found.intervals]
    _print_rows("Shares of the values by interval:", header, rows, fmt)


@main.command("profile")
@click.argument("table")
@click.option(
    "--db", "db_url", required=True, metavar="URL", help="Database holding the table (URL or DuckDB file path)."
)
@click.option("--schema", default=None, help="Schema of the table (default: the database's current schema).")
@click.option(
    "--unit", default=None, metavar="COLUMN", help="The column naming each row's person: shares count persons."
)
@click.option(
    "--max-size", type=click.IntRange(1, 4), default=3, show_default=True, help="Largest combination of columns tried."
)
@click.option(
    "--candidates",
    type=click.IntRange(1, 40),
    default=12,
    show_default=True,
    help="Columns combined (those with the most values, identifiers and constants aside).",
)
@click.option(
    "--greedy",
    type=click.IntRange(0, 40),
    default=3,
    show_default=True,
    help="Columns then added one at a time to the best combination of --max-size, each the one of all columns "
    "that singles out the most with it.",
)
@click.option(
    "--job", "job_file", type=click.Path(dir_okay=False, path_type=Path), help="Write the suggested job here."
)
@click.option("--replace", is_flag=True, help="Overwrite --job's file if it exists.")
@output_format
def profile_command(
    table: str,
    db_url: str,
    schema: str | None,
    unit: str | None,
    max_size: int,
    candidates: int,
    greedy: int,
    job_file: Path | None,
    replace: bool,
    fmt: str,
) -> None:
    """Which columns of TABLE identify people, before writing a job.

    For every column: its distinct values, NULLs and the share of rows (of
    persons, with --unit) it singles out alone; then the combinations of up
    to --max-size columns that single out the most, and up to --greedy more
    columns added one at a time to the best of them. Suggests roles
    (identifying, quasi-identifier, ...) from the data's shape, and with
    --job writes a job file to start from. Reads the table, writes nothing
    else.
    """
    if job_file is not None and job_file.exists() and not replace:
        raise SqlanonError(f"{job_file} exists; choose another file, or pass --replace to overwrite it")
    with _progress(fmt) as progress:
        found = profile(
            db_url,
            table,
            schema,
            unit=unit,
            max_size=max_size,
            candidates=candidates,
            greedy=greedy,
            options=RunOptions(progress=progress),
        )
    if job_file is not None:
        job_file.write_text(found.job_yaml())
    columns, best = found.frames()
    if fmt == "json":
        print(
            json.dumps(
                {
                    "rows": found.rows,
                    "persons": found.persons,
                    "columns": columns.to_dict("records"),
                    "combinations": best.to_dict("records"),
                    "job": found.job(),
                },
                default=str,
            )
        )
        return
    counted = f"{found.persons:,} persons in {found.rows:,} rows" if found.unit else f"{found.rows:,} rows"

    def shown(frame: Any) -> list[list[Any]]:  # shares as percentages in a table, as they are in CSV
        share = list(frame.columns).index("singled_out")
        return [[f"{v:.1%}" if j == share and fmt == "table" else v for j, v in enumerate(r)] for r in frame.values]

    _print_rows(f"{table}: {counted}, each column alone", list(columns.columns), shown(columns), fmt)
    if fmt == "csv":
        return
    _print_rows("the combinations that single out the most, by size", list(best.columns), shown(best), fmt)
    chosen = found.suggested
    suggested = (
        "none" if chosen is None else f"{', '.join(chosen.columns)} (together alone for {chosen.singled_out:.1%})"
    )
    out.print(f"suggested quasi-identifiers: {suggested}" + (f"; job written to {job_file}" if job_file else ""))


@main.command("migrate")
@click.option("--db", "db_url", required=True, metavar="URL", help="Database to install sqlanon's schema into.")
@SCHEMA_OPTION
@click.option(
    "--downgrade",
    "down_to",
    metavar="REVISION",
    help="Downgrade instead: -1 for the previous version, base to remove the schema's tables.",
)
@click.option(
    "--python-path",
    metavar="FOLDERS",
    help="PostgreSQL with PL/Python: the site-packages folder(s) (':'-separated) where the server's Python "
    "finds sqlanon; only a superuser may set it.",
)
@click.option(
    "--runner-role",
    metavar="ROLE",
    help="PostgreSQL: the role whose members may run sqlanon in this database (default: "
    "sqlanon_runner_DATABASE); `sqlanon grant-runner` grants it.",
)
def migrate_command(
    db_url: str, metadata_schema: str, down_to: str | None, python_path: str | None, runner_role: str | None
) -> None:
    """Create or upgrade sqlanon's metadata schema (idempotent), or downgrade it.

    On PostgreSQL it also installs the routines through which every role reaches sqlanon's tables (and, as a
    superuser on a server with PL/Python, those that run jobs inside the server)."""
    db = open_database(normalize_url(db_url, Path.cwd()))
    try:
        if down_to:
            downgrade(db, metadata_schema, down_to)
        else:
            migrate(db, metadata_schema, runner_role=runner_role, python_path=python_path)
        version = current_version(db, metadata_schema)
        in_sql = stored_routines(db, metadata_schema)
    finally:
        db.dispose()
    out.print(f"schema {metadata_schema!r} is at version {version or 'base (empty)'}")
    if db.stored_routines and version:
        plpython = "run_job" in in_sql
        out.print(
            f"stored in the database: {', '.join(sorted(in_sql)) or 'none'}"
            + (
                ""
                if plpython
                else "; CALL run_job needs PL/Python (package postgresql-plpython3-NN) and a superuser to migrate once"
            )
        )


@main.command("grant-runner")
@click.argument("role")
@click.option("--db", "db_url", required=True, metavar="URL", help="PostgreSQL database whose sqlanon the role runs.")
@SCHEMA_OPTION
@click.option("--revoke", is_flag=True, help="Take it back: revoke the runner role and drop the role's work schema.")
def grant_runner_command(role: str, db_url: str, metadata_schema: str, revoke: bool) -> None:
    """Let ROLE run sqlanon in this database, with exactly what that needs (PostgreSQL; as a DBA).

    ROLE gets the database's runner role (EXECUTE on the routines that reach sqlanon's tables; no privilege on
    any table) and a work schema of its own for its runs' scratch tables. Reading the source, and creating the
    output, are yours to grant (GRANT SELECT ON ..., GRANT CREATE ON SCHEMA ...); this command prints how.
    Its SQL twin: CALL sqlanon.grant_runner(runner => CAST('ROLE' AS name)).
    """
    db = open_database(normalize_url(db_url, Path.cwd()))
    try:
        done = grant_runner(db, metadata_schema, role, revoke)
    finally:
        db.dispose()
    if revoke:
        out.print(f"role {role!r} no longer runs sqlanon in schema {metadata_schema!r}; its work schema is gone")
        return
    out.print(
        f"role {role!r} may run sqlanon in schema {metadata_schema!r}: member of {done['runner_role']!r}, "
        f"scratch tables in schema {done['work_schema']!r}"
    )
    out.print(
        "Also grant it what its jobs read and write, e.g.:\n"
        f"  GRANT USAGE ON SCHEMA warehouse TO {role};  GRANT SELECT ON warehouse.census TO {role};\n"
        f"  GRANT USAGE, CREATE ON SCHEMA published TO {role};\n"
        "and, to run jobs inside the server (CALL ...run_job), a pg_ident.conf line mapping the server's OS "
        f"user to it:\n  sqlanon_loopback   postgres   {role}"
    )


@main.command("cleanup")
@click.option("--db", "db_url", required=True, metavar="URL", help="Database whose dead runs to clean up.")
@SCHEMA_OPTION
def cleanup_command(db_url: str, metadata_schema: str) -> None:
    """Close runs whose session died (killed, disconnected) and drop the tables they left.

    Every run does this when it starts; this command does it on demand.
    """
    db = open_database(normalize_url(db_url, Path.cwd()))
    try:
        migrate(db, metadata_schema)
        runs, tables = cleanup_dead_runs(db, metadata_schema)
    finally:
        db.dispose()
    closed = ", ".join(map(str, runs)) or "none"
    out.print(f"runs closed as interrupted: {closed}; tables dropped: {len(tables)}")


@main.group("job")
def job_group() -> None:
    """Jobs registered in the database, run by name (one run of a job at a time).

    A registered job keeps its configuration and hierarchy files in sqlanon's
    schema, so anyone with access to the database runs the same job without
    the files. Its progress is in the `runs` table while it runs.
    """


DB_REQUIRED = click.option(
    "--db",
    "db_url",
    metavar="URL",
    required=True,
    help="Database holding the job (SQLAlchemy URL or DuckDB file path).",
)


@job_group.command("register")
@click.argument("name")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@DB_REQUIRED
@SCHEMA_OPTION
def job_register(name: str, config: Path, db_url: str, metadata_schema: str) -> None:
    """Store job NAME from the YAML file CONFIG (replacing an earlier registration)."""
    files = register_job(name, config, db_url, metadata_schema)
    out.print(f"registered job [bold]{name}[/] with {files} file(s) in schema {metadata_schema!r}")


@main.group("key")
def key_group() -> None:
    """Pseudonym keys the database holds, for jobs that pseudonymize from SQL (identifying: {COLUMN:
    {pseudonym: {key_name: NAME}}}). The roles a key is for pseudonymize with it; no role reads it.
    Run as the owner of sqlanon's schema."""


@key_group.command("create")
@click.argument("name")
@click.option("--for", "users", multiple=True, metavar="ROLE", help="A role that may use the key (repeatable).")
@click.option(
    "--from-env",
    metavar="VARIABLE",
    default=None,
    help="Store the key in this environment variable (to keep the pseudonyms a key_env job made) instead of a "
    "random one.",
)
@DB_REQUIRED
@SCHEMA_OPTION
def key_create(name: str, users: tuple[str, ...], from_env: str | None, db_url: str, metadata_schema: str) -> None:
    """Store a new pseudonym key NAME (random, 32 bytes, unless --from-env): its pads go through the driver's bulk
    path, never in a statement; nothing prints or keeps it."""
    key = None
    if from_env is not None:
        value = os.environ.get(from_env)
        if value is None:
            raise ConfigError(
                f"environment variable {from_env!r} is not set; set it to the key, or leave --from-env out"
            )
        key = value.encode()
    create_key(name, db_url, users, key, metadata_schema)
    out.print(f"stored pseudonym key [bold]{name}[/] for {', '.join(users) or 'every user of the file'}")


@key_group.command("list")
@DB_REQUIRED
@SCHEMA_OPTION
@output_format
def key_list(db_url: str, metadata_schema: str, fmt: str) -> None:
    """The keys the database holds: name, the roles they are for, who created them (never a key)."""
    found = list_keys(db_url, metadata_schema)
    if fmt == "json":
        print(json.dumps(found))
        return
    rows = [[k["name"], ", ".join(k["users"]) or "-", k["created_by"] or "-", k["created_at"][:19]] for k in found]
    _print_rows(f"{len(found)} pseudonym key(s)", ["key", "for", "created by", "created"], rows, fmt)


@job_group.command("list")
@DB_REQUIRED
@SCHEMA_OPTION
@output_format
def job_list(db_url: str, metadata_schema: str, fmt: str) -> None:
    """The registered jobs and their latest run."""
    jobs = _registry(db_url, metadata_schema, lambda r: r.jobs())
    if fmt == "json":
        print(json.dumps(jobs))
        return
    rows = [
        [
            j["name"],
            j["registered_at"][:19],
            str(j["last_run"] or "-"),
            j["status"] or "-",
            (j["started_at"] or "-")[:19],
        ]
        for j in jobs
    ]
    _print_rows(f"{len(jobs)} registered job(s)", ["job", "registered", "last run", "status", "started"], rows, fmt)


@job_group.command("status")
@click.argument("name")
@DB_REQUIRED
@SCHEMA_OPTION
@output_format
def job_status(name: str, db_url: str, metadata_schema: str, fmt: str) -> None:
    """The latest runs of job NAME: status (an interrupted run was left by a dead session), progress."""
    runs = _registry(db_url, metadata_schema, lambda r: r.runs(name))
    if fmt == "json":
        print(json.dumps([r.to_dict() for r in runs]))
        return
    rows = [
        [
            str(r.run_id),
            r.command,
            r.status,
            str(r.iteration),
            str(r.nodes_checked),
            str(r.started_at)[:19],
            str(r.finished_at or "-")[:19],
            r.error or "",
        ]
        for r in runs
    ]
    _print_rows(
        f"job {name}: {len(runs)} latest run(s)",
        ["run", "command", "status", "iteration", "nodes checked", "started", "finished", "error"],
        rows,
        fmt,
    )


def _registered_run_command(name: str, resume: bool, help_text: str) -> None:
    """`job run` and `job resume`: the same options, one flag apart."""

    @job_group.command(name, help=help_text)
    @click.argument("job_name", metavar="NAME")
    @DB_REQUIRED
    @SCHEMA_OPTION
    @output_format
    @KEEP_OPTION
    def command(job_name: str, db_url: str, metadata_schema: str, fmt: str, keep: bool) -> None:
        _run_registered(job_name, db_url, RunOptions(metadata_schema=metadata_schema, keep=keep), fmt, resume)


_registered_run_command(
    "run", False, "Run job NAME: anonymize into its output table (replacing it), or search when it has none."
)
_registered_run_command(
    "resume", True, "Continue the interrupted last run of job NAME from its last completed iteration."
)


def _registry(db_url: str, metadata_schema: str, action: Callable[[JobRegistry], Any]) -> Any:
    with opened_registry(db_url, metadata_schema) as registry:
        return action(registry)


def _run_registered(name: str, db_url: str, options: RunOptions, fmt: str, resume: bool) -> None:
    with _progress(fmt) as progress:
        options.progress = progress
        result = run_job(name, db_url, options, resume=resume)
    _show(result, fmt)


def _show_result(result: SearchResult | AnonymizeResult, fmt: str) -> None:
    """A search or anonymize result: one JSON object, CSV rows (the minimal nodes, or the published one), or
    tables (metrics when computed)."""
    search_result = result.search if isinstance(result, AnonymizeResult) else result
    if fmt == "json":
        print(json.dumps(result.to_dict()))
    elif fmt == "csv":
        nodes = [result.node] if isinstance(result, AnonymizeResult) else search_result.minimal
        _write_csv(*_node_rows(search_result, nodes))
    elif isinstance(result, AnonymizeResult):
        _print_search(result.search)
        _print_anonymized(result)
    else:
        _print_search(result)
        if result.metrics:
            _print_metrics(result, result.minimal)


def _node_rows(result: SearchResult, nodes: list[tuple[int, ...]]) -> tuple[list[str], list[list[Any]]]:
    """One row per node: its level per QI, its height and its metrics when computed."""
    metrics = [name for name in METRICS if any(name in result.metrics.get(n, {}) for n in nodes)]
    metrics = [name for name in metrics if name != "height"]
    rows = [[*node, sum(node), *(result.metrics.get(node, {}).get(name) for name in metrics)] for node in nodes]
    return [*result.qi, "height", *metrics], rows


def _write_csv(header: list[str], rows: Sequence[Sequence[Any]]) -> None:
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow([_cell(name) for name in header])
    writer.writerows([_cell(value) for value in row] for row in rows)


#: what a spreadsheet reads as the start of a formula (OWASP's CSV injection list)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text: a value (a hierarchy label, a column name: data) that starts like a
    formula gets a leading apostrophe, unless it is a plain number (-5 stays -5)."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS) and not _plain_number(value):
        return "'" + value
    return value


def _plain_number(text: str) -> bool:
    try:
        return math.isfinite(float(text)) and text.strip() == text
    except ValueError:
        return False


def _print_rows(title: str, header: list[str], rows: Sequence[Sequence[Any]], fmt: str) -> None:
    """Rows as a table (numbers as `_shown_number` writes them, right-aligned), or as CSV (numbers as they are)."""
    if fmt == "csv":
        _write_csv(header, rows)
        return
    out.print(title, highlight=False, soft_wrap=True)  # a line of its own: a title wider than the table wraps
    table = Table()
    numeric = [all(not isinstance(row[i], str) for row in rows) for i in range(len(header))] if rows else []
    for column, right in zip(header, numeric or [False] * len(header)):
        table.add_column(column, justify="right" if right else "left")
    for row in rows:
        table.add_row(*(value if isinstance(value, str) else _shown_number(value) for value in row))
    out.print(table)


def _bundled(name: str) -> Path:
    return Path(str(resources.files("sqlanon.data").joinpath("adult", name)))


def _anonymize(job: Job, options: RunOptions, fmt: str, replace: bool) -> None:
    """Publish by the job's output method and show what it published."""
    with _progress(fmt) as progress:
        options.progress = progress
        published = anonymize(job, options, replace=replace)
    _show(published, fmt)


@functools.singledispatch
def _show(result: Any, fmt: str) -> None:
    """What a verb returned, by its kind: a search's or a generalized table's (`_show_result`), a method's own
    view (registered below), or, for a method without one, the figures of its `to_dict()`."""
    if isinstance(result, (SearchResult, AnonymizeResult)):
        _show_result(result, fmt)
    elif fmt == "json":
        print(json.dumps(result.to_dict()))
    else:
        figures = [[str(name), str(value)] for name, value in result.to_dict().items()]
        _print_rows("Published, audited:", ["figure", "value"], figures, fmt)


@_show.register
def _show_partitioned(report: MondrianReport, fmt: str) -> None:
    """What Mondrian published: the table, its partitions, the audit, the first rows."""
    if fmt == "json":
        print(json.dumps(report.to_dict()))
        return
    data = report.to_dict()
    figures = [
        ["table", report.output],
        ["rows", str(report.rows)],
        ["partitions", str(data["partitions"])],
        [
            "smallest / average / largest partition",
            f"{data['smallest_partition']} / {_shown_number(data['average_partition'])} / {data['largest_partition']}",
        ],
        ["rounds (statements)", f"{data['rounds']} ({data['statements']})"],
        [
            "seconds: partitioning / publishing",
            f"{data['partitioning_seconds']:.2f} / {data['publishing_seconds']:.2f}",
        ],
    ]
    figures += [[f"audit: {name}", "holds" if ok else "FAILS"] for name, ok in report.audit.holds.items()]
    if report.ledger is not None:
        figures.append(["ledger", _ledger_outcome(report.ledger)])
    _print_rows("Published partitioned (Mondrian), audited:", ["figure", "value"], figures, fmt)
    if fmt == "table" and report.preview:
        _print_rows(
            "First rows:", list(report.preview[0]), [[str(v) for v in row.values()] for row in report.preview], fmt
        )


@_show.register
def _show_randomized(report: RandomizationReport, fmt: str) -> None:
    """What randomization published: the two tables, each column's noise, the audit, the first rows."""
    if fmt == "json":
        print(json.dumps(report.to_dict()))
        return
    figures = [["table", report.output], ["noise table", report.noise_table], ["rows", str(report.rows)]]
    for noise in report.noise:
        spread = f"width {_shown_number(noise.scale)}" if noise.distribution == "uniform" else "sd"
        figures.append([f"noise on {noise.column}", f"{noise.distribution}, {spread} (sd {_shown_number(noise.sd)})"])
    figures.append(["the same noise again", "with the job's noise_key" if report.reproducible else "never (no key)"])
    figures += [[f"audit: {name}", "holds" if ok else "FAILS"] for name, ok in report.audit.items()]
    _print_rows("Published randomized, audited:", ["figure", "value"], figures, fmt)
    if fmt == "table" and report.preview:
        _print_rows(
            "First rows:", list(report.preview[0]), [[str(v) for v in row.values()] for row in report.preview], fmt
        )


@_show.register
def _show_condensed(report: CondensationReport, fmt: str) -> None:
    """What condensation published: the synthetic table and the groups table, the groups, the audit, the first
    rows."""
    if fmt == "json":
        print(json.dumps(report.to_dict()))
        return
    within = f", within each value of {report.label}" if report.label else ""
    figures = [
        ["synthetic table", report.output],
        ["groups table (not granted)", report.groups_table],
        ["records", str(report.rows)],
        [f"groups (at least k = {report.k}{within})", str(report.groups)],
        ["smallest / largest group", f"{report.smallest} / {report.largest}"],
        ["rounds (statements)", f"{report.rounds} ({report.statements})"],
        ["the same records again", "with the job's noise_key" if report.reproducible else "never (no key)"],
    ]
    if report.added:
        figures += [["records added", str(report.added)], ["groups split", str(report.splits)]]
    figures += [[f"audit: {name}", "holds" if ok else "FAILS"] for name, ok in report.audit.items()]
    _print_rows("Published condensed (synthetic records), audited:", ["figure", "value"], figures, fmt)
    if fmt == "table" and report.preview:
        _print_rows(
            "First rows:", list(report.preview[0]), [[str(v) for v in row.values()] for row in report.preview], fmt
        )


@_show.register
def _show_private(report: PrivateRelease, fmt: str) -> None:
    """What a differentially private publication published: the tables, the guarantee and what it implies, the
    node, the rows (sampled and suppressed: for the data owner only), the audit, the first rows."""
    if fmt == "json":
        print(json.dumps(report.to_dict()))
        return
    row = report.row
    figures = [
        ["table", report.output],
        ["privacy table", report.privacy_table],
        ["guarantee", f"({_shown_number(row['epsilon'])}, {row['delta']:g})-differential privacy"],
        ["implied: sampling probability beta, least class size k", f"{_shown_number(row['beta'])}, {row['k']}"],
    ]
    if row["search_steps"]:
        figures.append(
            [
                "node chosen by the exponential mechanism",
                f"budget {_shown_number(row['search_budget'])}, {row['search_steps']} steps, "
                f"score {row['search_score']} ({len(report.walk)} nodes stood on; "
                f"the node's {_shown_number(report.score)})",
            ]
        )
    figures += [
        ["node", row["node"]],
        ["rows: source / sampled / published", f"{report.rows} / {report.sampled} / {report.published}"],
        ["loss of the release", _shown_number(report.loss) if isinstance(report.loss, float) else str(report.loss)],
        ["the same release again", "with the job's noise_key" if report.reproducible else "never (no key)"],
        [
            "audit: every class of at least k rows",
            "holds" if report.audit.get("k_anonymity", {}).get("holds") else "FAILS",
        ],
    ]
    _print_rows("Published differentially private (sampled, generalized), audited:", ["figure", "value"], figures, fmt)
    print("The rows sampled and suppressed are for you alone: they are not differentially private.", file=sys.stderr)
    if fmt == "table" and report.preview:
        _print_rows(
            "First rows:", list(report.preview[0]), [[str(v) for v in row.values()] for row in report.preview], fmt
        )


@_show.register
def _show_bucketized(report: AnatomyReport, fmt: str) -> None:
    """What anatomy published: the two tables, the buckets' figures, the first rows of the QI table."""
    if fmt == "json":
        print(json.dumps(report.to_dict()))
        return
    figures = [
        ["QI table", report.qi_table],
        ["sensitive table", report.sensitive_table],
        ["rows", str(report.rows)],
        ["buckets", str(report.buckets)],
        ["smallest bucket", str(report.smallest_bucket)],
        [f"fewest different values in a bucket (l = {report.l})", str(report.fewest_values)],
        ["highest chance of guessing a record's value", _shown_number(report.largest_share)],
    ]
    if report.invariant is not None:
        kept = report.invariant
        figures.append(
            [
                "persons: stayed in their bucket / took a place / bucketized afresh",
                f"{kept['stayed']} / {kept['took_a_place']} / {kept['bucketized_afresh']}",
            ]
        )
    if report.counterfeit_table is not None:
        figures.append(
            ["counterfeits (values no published person holds)", f"{report.counterfeits} in {report.counterfeit_table}"]
        )
    if report.ledger is not None:
        figures.append(["ledger", _ledger_outcome(report.ledger)])
    _print_rows("Published bucketized (anatomy), audited:", ["figure", "value"], figures, fmt)
    if fmt == "table" and report.preview:
        _print_rows(
            "First rows of the QI table:",
            list(report.preview[0]),
            [[str(v) for v in row.values()] for row in report.preview],
            fmt,
        )


@contextmanager
def _progress(fmt: str) -> Iterator[Callable[[str, int, int | None], None]]:
    """Progress bars on stderr (only for the table format): one line per phase, where a verb's named steps
    ("publish: auditing", model.progress.Phases) share their verb's line and show the step it is in."""
    if fmt != "table":
        yield lambda phase, done, total: None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True) as bar:
        tasks: dict[str, Any] = {}

        def update(phase: str, done: int, total: int | None) -> None:
            line = phase.split(": ", 1)[0]
            if line not in tasks:
                tasks[line] = bar.add_task(phase, total=total)
            bar.update(tasks[line], description=phase, completed=done, total=total)

        yield update


def _print_search(result: SearchResult) -> None:
    shown = sorted(result.minimal, key=lambda node: (sum(node), node))[:MINIMAL_SHOWN]
    more = f", the {len(shown)} lowest shown (--format csv lists every one)" if len(shown) < len(result.minimal) else ""
    if not result.every_minimal_node:  # anonymize by a selection on the levels alone (SearchContext.rank)
        found = "ranked first by the selection, those ranked after a passing one left unchecked"
    elif not result.every_passing_node:  # anonymize choosing among the minimal nodes (SearchContext.minimal_only)
        found = "found, the nodes above them left unchecked"
    else:
        found = f"of {len(result.satisfying)} satisfying"
    out.print(
        f"{len(result.minimal)} minimal generalization(s) {found} (levels per quasi-identifier){more}",
        highlight=False,
        soft_wrap=True,
    )
    table = Table()
    for name, height in zip(result.qi, result.heights):
        table.add_column(f"{name}\n(0..{height})", justify="right")
    table.add_column("height", justify="right", style="bold")
    for node in shown:
        table.add_row(*map(str, node), str(sum(node)))
    out.print(table)
    _print_levels(result, shown)
    s = result.stats
    suppression = f", at most {result.max_suppressed} tuples suppressed" if result.max_suppressed else ""
    out.print(
        f"run {result.run_id} ({result.strategy}): {s.nodes_checked:,} nodes checked, {s.rollups:,} roll-ups, "
        f"{s.base_scans} base scan(s), {s.seconds:.2f} s over {result.rows:,} rows{suppression}"
    )


def _print_levels(result: SearchResult, nodes: list[tuple[int, ...]]) -> None:
    """What each level used by `nodes` looks like: a few of its labels (`sqlanon hierarchy` shows them all)."""
    if not nodes or not result.level_examples:
        return
    table = Table(title="what the levels look like (a few labels each)", box=box.SIMPLE_HEAD)
    for column in ("quasi-identifier", "level", "labels"):
        table.add_column(column)
    for attr, qi in enumerate(result.qi):
        for level in sorted({node[attr] for node in nodes}):
            table.add_row(
                qi,
                f"{level} of {result.heights[attr]}",
                ", ".join(result.level_examples[attr][level]) + (", ..." if level < result.heights[attr] else ""),
            )
    out.print(table)


def _print_metrics(result: SearchResult, nodes: list[tuple[int, ...]], chosen_by: str = "") -> None:
    """The nodes' metrics as a table: the usual ones, and the one that chose the node (`chosen_by`, a selection's
    description) where it is not among them (ARX's quality models)."""
    names = list(METRIC_HEADERS)
    chosen = chosen_by.removeprefix("metric ")
    if chosen in METRICS and chosen not in names:
        names.append(chosen)
    table = Table(
        title="utility metrics (prec, classes: higher is better)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("node", no_wrap=True)
    for name in names:
        table.add_column(METRIC_HEADERS.get(name, name), justify="right", no_wrap=True)
    for node in nodes:
        values = result.metrics[node]
        table.add_row(node_label(node), *(_shown_number(values[name]) for name in names))
    out.print(table)


# shown in the terminal (--json has every metric: relative distance and completeness too)
METRIC_HEADERS = {
    "height": "height",
    "precision": "prec",
    "suppressed": "supp",
    "classes": "classes",
    "avg_class_size": "avg size",
    "c_avg": "C_avg",
    "discernibility": "DM",
    "kl_divergence": "KL",
}


def _shown_number(value: Any) -> str:
    """A figure as the tables show it: whole numbers with thousands separators (a float that is one too), others to
    3 significant digits, from 1,000 up without a fraction (never in exponent form there); None as -."""
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, int) or (value.is_integer() and abs(value) < 1e15):
        return f"{int(value):,}"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


AUDIT_COLUMNS = ["criterion", "parameters", "figure", "value", "holds", "violating_classes", "violating_tuples"]


def _audit_rows(report: AuditReport) -> list[list[Any]]:
    """One row per criterion: its parameters, its worst class's figure, whether it holds, what violates it."""
    return [
        [
            name,
            " ".join(f"{k}={v}" for k, v in c.params.items()),
            c.figure_name,
            c.figure,
            c.holds,
            c.violating_classes,
            c.violating_tuples,
        ]
        for name, c in report.criteria.items()
    ]


def _print_audit(table_name: str, report: AuditReport) -> None:
    table = Table(
        title=f"{table_name}: {report.rows:,} {report.counted} in {report.classes:,} classes, "
        f"smallest {report.min_class_size:,}"
    )
    for column in ("criterion", "parameters", "worst class", "holds", "violating classes", "violating tuples"):
        table.add_column(column)
    for name, c in report.criteria.items():
        figure = "none (no c works)" if c.figure is None else f"{c.figure_name} = {c.figure:.4g}"
        params = ", ".join(f"{k}={v}" for k, v in c.params.items())
        table.add_row(
            name,
            params,
            figure,
            "yes" if c.holds else "[bold red]NO[/]",
            _shown_number(c.violating_classes),
            _shown_number(c.violating_tuples),
        )
    out.print(table)
    if report.suppressed is not None:
        verdict = "within" if report.suppression_ok else "[bold red]ABOVE[/]"
        out.print(f"suppressed tuples: {report.suppressed}, {verdict} the limit of {report.max_suppressed}")
    if report.split_persons:
        out.print(f"[bold red]{report.split_persons} person(s) have rows in more than one class[/]")
    if report.population_node is not None:
        out.print(f"the population's classes generalized to node {node_label(report.population_node)}")


FIRST = "the job's first release"


def _ledger_outcome(check: LedgerCheck) -> str:
    """What the release ledger did for a publication, in a line."""
    earlier = ", ".join(map(str, check.earlier))
    if not check.checked:
        outcome = f"not checked (ledger.check is false; earlier: run {earlier})" if check.earlier else FIRST
    elif check.principle == "m-invariance":
        kept = f"every person of run {check.earlier[-1]} keeping their signature" if check.earlier else FIRST
        outcome = f"m-invariant: every group m-unique, {kept}"
    else:
        outcome = f"checked against the release(s) of run {earlier}: nothing disclosed beyond any one release"
        if check.suppressed:
            outcome += f", once {check.suppressed:,} persons at stake were removed (ledger.suppress)"
    return f"recorded with {check.persons:,} persons; {outcome}"


def _print_anonymized(result: AnonymizeResult) -> None:
    levels = result.search.describe(result.node)
    node = ", ".join(
        f"{q}={d['level']}" + (f" (e.g. {d['examples'][0]})" if d["examples"] else "") for q, d in levels.items()
    )
    audit_report = result.audit
    checks = ", ".join(f"{name} {'holds' if ok else 'FAILS'}" for name, ok in audit_report.holds.items())
    _print_metrics(result.search, [result.node], result.selection)
    counted = audit_report.counted
    suppressed = (
        f", {result.suppressed} {counted.replace('rows', 'tuples')} suppressed" if result.search.max_suppressed else ""
    )
    out.print(
        f"wrote [bold]{result.output}[/]: node ({node}) chosen by {result.selection}, {audit_report.rows:,} {counted} "
        f"in {audit_report.classes:,} classes, smallest class {audit_report.min_class_size:,}{suppressed}; "
        f"audit: {checks}"
    )
    if result.ledger is not None:
        out.print(f"ledger: {_ledger_outcome(result.ledger)}")
    if result.preview:
        table = Table(title=f"the first {len(result.preview)} rows of {result.output}", box=box.SIMPLE_HEAD)
        for column in result.preview[0]:
            table.add_column(column)
        for row in result.preview:
            table.add_row(*("NULL" if value is None else str(value) for value in row.values()))
        out.print(table)
