"""The Python API: search a job's lattice, or anonymize its table.

    >>> from sqlanon import load_job, search, anonymize
    >>> result = search(load_job("adult.yaml"))
    >>> result.minimal            # [(1, 0, 1, ...), ...] levels in QI config order

Each call migrates sqlanon's schema if needed, records a run, builds the star
schema, searches, and cleans its scratch tables up whatever happens.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .analysis.attacks import (
    AnalysisReport,
    AnalysisSettings,
    BayesSettings,
)
from .analysis.inference import InferenceReport, InferenceTarget, check_inference_job, infer
from .analysis.profile import Profile, profile_table
from .analysis.reconstruction import (
    DEFAULT_INTERVALS,
    DEFAULT_MAX_ITERATIONS,
    DEFAULT_TOLERANCE,
    Grid,
    ReconstructionReport,
    reconstruct_distribution,
)
from .analysis.releases import (
    analyze_nodes,
    analyze_published_table,
    analyzed_attribute,
    node_analysis,
    population_star,
    published_release,
)
from .analysis.report import ReportData, check_report_path, job_fields, write_report
from .backends import duckdb_file, normalize_url, open_database, qualified_name
from .config import check_key_name, job_from_dict
from .engine.audit import AuditReport, PublishedClasses
from .engine.generalize import node_of_published_table, published_population
from .engine.star import (
    needed_sensitive,
)
from .errors import ConfigError
from .model.frames import FRAME_TABLE, MEMORY_URL, READ_TABLE, SourceFrame
from .model.hierarchies import Hierarchy
from .model.job import MIN_KEY_BYTES, Job, Output
from .model.noise import Noise
from .model.progress import Phases
from .publish import ledger
from .publish.anatomy import Anatomy, AnatomyReport, BucketTargets, publish_bucketized
from .publish.batches import published_node, refuse_violating_batch
from .publish.condense import Condensation, CondensationReport, CondensedTables, add_and_publish, condense_and_publish
from .publish.differential_privacy import (
    DifferentialPrivacy,
    PrivacyPlan,
    PrivateRelease,
    chosen_node,
    privacy_row,
    sampled_table,
    write_privacy_table,
)
from .publish.generalize import Generalization
from .publish.identifiers import Pseudonyms, hmac_pads
from .publish.ledger import ReleaseLedger
from .publish.methods import METHODS, publishes
from .publish.mondrian import MondrianMethod, MondrianReport, partition_and_publish
from .publish.ownership import Ownership
from .publish.randomize import Randomization, RandomizationReport, randomize_and_publish
from .publish.staging import Destination
from .registry import opened_registry
from .session import RunOptions as RunOptions  # re-exported: every verb takes one
from .session import (
    Target,
    job_database,
    job_hierarchies,
    lattice_run,
    load_table,
    on_db,
    registered_jobs,
    require_columns,
    table_reader,
    table_run,
)
from .steps import AnonymizeResult as AnonymizeResult  # re-exported: what the verbs return
from .steps import SearchResult as SearchResult
from .steps import (
    add_metrics,
    empty_result,
    method_output,
    metrics_evaluator,
    publish_node_of_run,
    record_metrics,
    run_search,
    select_node,
    suppression_audit,
)
from .store import Store, keys
from .store.migrate import DEFAULT_SCHEMA, migrate
from .store.records import now

if TYPE_CHECKING:
    import pandas as pd
    from sqlalchemy.engine import Connection

    from .backends import Database

#: what `anonymize` returns, by the job's output method
Published = AnonymizeResult | AnatomyReport | MondrianReport
#: a job: as `load_job` or `job_from_dict` gives it, or the mapping `job_from_dict` reads (paths relative to the
#: current folder)
JobSpec = Job | Mapping[str, Any]


def framed(job: JobSpec, source: pd.DataFrame | None) -> Job:
    """The job, reading the DataFrame `source` instead of its own source table when one is given (see
    sqlanon.model.frames: in a DuckDB database in memory unless RunOptions.db_url names one)."""
    job = job if isinstance(job, Job) else job_from_dict(job)
    return job if source is None else job.with_frame(SourceFrame.of(source))


def search(job: JobSpec, options: RunOptions | None = None, *, source: pd.DataFrame | None = None) -> SearchResult:
    """Find every node satisfying the job's criteria over the full QI set, and the minimal ones (of the DataFrame
    `source` instead of the job's table, when given)."""
    options, job = options or RunOptions(), framed(job, source)
    with lattice_run(job, options, "search") as run:
        result = run_search(job, run.ctx)
        if options.metrics:
            add_metrics(job, run.ctx, result, result.minimal)
            record_metrics(run.ctx, result, None)
        run.finish(result.to_dict())
    return result


def anonymize(
    job: JobSpec, options: RunOptions | None = None, replace: bool = False, *, source: pd.DataFrame | None = None
) -> Published:
    """Publish the job's table by its output method (`output.method`, see sqlanon.publish.methods): `generalize`
    (the default), `bucketize` (anatomy) or `partition` (Mondrian), each written and audited before it is
    committed. With a DataFrame `source`, that frame is published (as SOURCE_anon when the job names no output),
    and the result's `frame()` gives the release back."""
    job = framed(job, source)
    if job.output is None and source is not None:
        job = dataclasses.replace(job, output=Output(table=f"{job.source.table}_anon"))
    if job.output is None:
        raise ConfigError("the config has no output: {table: NAME}; add one to write the anonymized table")
    if options is not None and options.resume and job.output.method != Generalization.name:
        raise ConfigError(
            f"output.method {job.output.method} searches no lattice, so there is no search to resume; run it again "
            "without --resume"
        )
    publish = METHODS[job.output.method].run
    assert publish is not None, f"no verb publishes by {job.output.method}"
    result: Published = publish(job, options, replace=replace)
    return result


def frame_read(
    job: Job, schema: str | None, table: str | pd.DataFrame
) -> tuple[Job, str | None, str, SourceFrame | None]:
    """A table to read (schema, table) and the job to read it with: a DataFrame is read as READ_TABLE in a
    database in memory (beside the job's DataFrame source, if any), a name as it is."""
    if isinstance(table, str):
        return job, schema, table, None
    if job.source.frame is None:  # the job's own source is not there: nothing is compared with it
        job = job.with_url(MEMORY_URL)
        job = dataclasses.replace(job, source=dataclasses.replace(job.source, table=job.source.table or FRAME_TABLE))
    if job.source.table == READ_TABLE:
        raise ConfigError(f"name the job's source table otherwise than {READ_TABLE!r}: the DataFrame read is that")
    return job, None, READ_TABLE, SourceFrame.of(table)


@publishes(Generalization.name)
def generalize(job: Job, options: RunOptions | None = None, replace: bool = False) -> AnonymizeResult:
    """Search, pick the node by the job's selection rule, and write the audited output table (output.method
    generalize).

    Suppressed tuples are removed or masked as the job says; the output is
    audited (criteria on the released classes, suppressed count within the
    limit) before it is committed."""
    options = options or RunOptions()
    assert job.output is not None and job.output.method == Generalization.name, "anonymize(job) dispatches by method"
    output: Output = job.output
    if output.schema is None and job.source.schema is not None:
        output = dataclasses.replace(output, schema=job.source.schema)
    target = Target(output=output, replace=replace)
    with lattice_run(job, options, "anonymize", target) as run:
        result = run_search(job, run.ctx)
        searched = time.perf_counter()
        node = select_node(job, run.ctx, result)
        selected = time.perf_counter()
        anonymized = publish_node_of_run(job, run.ctx, target, result, node, job.select.describe())
        anonymized.selection_seconds = selected - searched
        anonymized.publishing_seconds = time.perf_counter() - searched
        run.finish(anonymized.to_dict())
    return anonymized


def hierarchies(
    job: JobSpec, options: RunOptions | None = None, *, source: pd.DataFrame | None = None
) -> dict[str, Hierarchy]:
    """Every QI's hierarchy as a search would use it, in QI order: read from its file, or generated from the
    column's distinct values (read from the source table, or from source.csv when the table is not loaded
    yet: into a temporary table, dropped with the transaction; or from the DataFrame `source`). Nothing is
    written."""
    return job_hierarchies(on_db(framed(job, source), (options or RunOptions()).db_url))


def node_metrics(
    job: JobSpec, nodes: list[tuple[int, ...]], options: RunOptions | None = None, *, source: pd.DataFrame | None = None
) -> dict[tuple[int, ...], dict[str, Any]]:
    """Utility metrics (see sqlanon.engine.metrics.METRICS) of any nodes, levels in QI config order, computed in SQL."""
    options, job = options or RunOptions(), framed(job, source)
    with lattice_run(job, options, "metrics") as run:
        result = empty_result(job, run.ctx, nodes)
        add_metrics(job, run.ctx, result, list(nodes))
        run.finish({"nodes": len(result.metrics)})
    return result.metrics


AUDITED = "audit a table with the job's quasi-identifiers and sensitive attributes (and its unit column)"


def audit(
    job: JobSpec,
    table: str | pd.DataFrame,
    schema: str | None = None,
    options: RunOptions | None = None,
    *,
    source: pd.DataFrame | None = None,
    node: tuple[int, ...] | None = None,
) -> AuditReport:
    """Evaluate the job's criteria on an existing table (published, or the source) without searching.

    The table needs the job's QI and sensitive columns; nothing is written.
    With a suppression limit, masked tuples (every QI at its hierarchy's top)
    are counted instead of checked (mask mode), or the tuples missing from the
    source are (remove mode, when the source is there); the audit fails when
    they exceed the limit. `table` may be a DataFrame (and the job's source the
    DataFrame `source`): both are then read in a database in memory.

    Criteria that compare a research subset's classes with the population's
    (delta-presence, k-map and the journalist's profitability over a `subset:`)
    read the population generalized as the table is: at `node`, or at the node
    its values show (`AuditReport.population_node`).
    """
    options, job = options or RunOptions(), framed(job, source)
    if any(c.reads_population for c in job.criteria):
        return _audit_with_population(job, table, schema, options, node)
    job, schema, table, read = frame_read(job, schema, table)
    with table_reader(job, options, schema, table, _audited_columns(job), AUDITED, read) as (db, conn):
        options.progress("audit: one grouping of the table", 0, 1)
        return _audited(db, conn, job, schema, table)


def _audited_columns(job: Job) -> list[str]:
    """The columns an audited table needs: the job's QIs, the sensitive columns its criteria read, its unit."""
    return job.qi_names + needed_sensitive(job.criteria) + ([job.unit_column] if job.unit_column else [])


def _audited(
    db: Database,
    conn: Connection,
    job: Job,
    schema: str | None,
    table: str,
    population: Callable[[str, dict[str, list[str]] | None], tuple[str, tuple[int, ...]]] | None = None,
) -> AuditReport:
    """The audit of the table (see `audit`); `population`, given the table's reference and how its masked tuples
    are told, the FROM item of the population's classes as the table publishes them and the node it found."""
    masked_top, reference, source_rows = suppression_audit(db, conn, job, (schema, table))
    fitted = [c for c in job.criteria if c.fits_table]  # k-map's estimate depends on the sample's size
    if fitted:
        sample_rows = source_rows if source_rows is not None else db.count_rows(conn, db.q(schema, table))
        for criterion in fitted:
            criterion.fit_table(sample_rows)
    table_ref = db.q(db.resolved_schema(conn, schema), table)  # qualified: no name of the audit's WITH hides it
    classes, node = population(table_ref, masked_top) if population is not None else (None, None)
    report = PublishedClasses(
        qi_columns=job.qi_names,
        sensitive=needed_sensitive(job.criteria),
        criteria=job.criteria,
        masked_top=masked_top,
        reference=reference,
        unit=job.unit_column,
        holders=job.unit_column is not None,  # whether persons hold several values: the audit does not assume
        population=classes,
    ).audit(db, conn, table_ref)
    report.population_node = node
    if source_rows is not None and report.suppressed is None:
        report.suppressed = source_rows - report.rows
    if report.suppressed is not None:
        report.max_suppressed = job.suppression.max_suppressed(source_rows or report.rows)
    return report


def _audit_with_population(
    job: Job, table: str | pd.DataFrame, schema: str | None, options: RunOptions, node: tuple[int, ...] | None
) -> AuditReport:
    """`audit` with criteria that read the population: a run over the job's star schema (its hierarchies and the
    population of its research subset), whose classes at the table's node the criteria compare with."""
    if not isinstance(table, str):
        raise ConfigError(
            "criteria that compare with the population audit a table of the job's database, not a DataFrame: "
            "write it there and give its name"
        )
    with lattice_run(job, options, "audit") as run:
        ctx = run.search
        assert ctx is not None, "a lattice run has its search context"
        require_columns(run.db, run.conn, schema, table, _audited_columns(job), AUDITED)
        options.progress("audit: the table's node, its population and one grouping of the table", 0, 1)
        if node is not None:
            empty_result(job, ctx, [node])  # checked to be in the lattice

        def population(table_ref: str, masked_top: dict[str, list[str]] | None) -> tuple[str, tuple[int, ...]]:
            found = node_of_published_table(run.db, run.conn, ctx.star, table_ref, masked_top, node)
            return published_population(run.db, run.conn, ctx.star, found), found

        # hash joins, as the publication's own audit: the population joined with its dimensions and grouped, against
        # the published classes, was nested by PostgreSQL (1M hospital rows: 88 s)
        with run.db.hash_joins(run.conn):
            report = _audited(run.db, run.conn, job, schema, table, population)
        run.finish(report.to_dict())
        return report


@publishes(Anatomy.name)
def bucketize(job: Job, options: RunOptions | None = None, replace: bool = False) -> AnatomyReport:
    """Publish the job's table bucketized (output.method anatomy): a QI table and a sensitive table, written
    and audited in one transaction. Suppression, criteria and the lattice play no part."""
    options = options or RunOptions()
    output = method_output(job, "anatomy", "l: L")
    qi_target = Target(output=output, replace=replace, pseudonyms=Pseudonyms.of(job))
    sensitive = dataclasses.replace(output, table=Anatomy.companion_table(output))
    sa_target = Target(output=sensitive, replace=replace, setting="output.sensitive_table")
    targets = [qi_target, sa_target]
    counterfeit_table = Anatomy.counterfeit_table(output)
    if counterfeit_table is not None:
        fakes = dataclasses.replace(output, table=counterfeit_table)
        targets.append(Target(output=fakes, replace=replace, setting="output.invariant's counterfeits table"))
    with table_run(job, options, "anatomy", targets=targets, transactional="an anatomy publication") as run:
        report = publish_bucketized(
            run.db,
            run.conn,
            job=run.job,
            source=qi_target.source,
            targets=BucketTargets(
                qi=qi_target.name,
                sensitive=sa_target.name,
                counterfeits=targets[2].name if counterfeit_table is not None else None,
            ),
            pseudonyms=qi_target.pseudonyms,
            columns=list(run.columns),
            run_id=run.id,
            ownership=run.ownership,
            replace=replace,
            progress=options.progress,
            ledger=ReleaseLedger.of(run.db, options.metadata_schema, run.job, run.id),
        )
        run.finish(report.to_dict())
    return report


@publishes(MondrianMethod.name)
def partition(job: Job, options: RunOptions | None = None, replace: bool = False) -> MondrianReport:
    """Publish the job's table partitioned by Mondrian (output.method mondrian): QIs with a hierarchy split
    along it, the others at their median, every partition satisfying the criteria; written and audited in one
    transaction."""
    options = options or RunOptions()
    output = method_output(job, "mondrian")
    target = Target(output=output, replace=replace, pseudonyms=Pseudonyms.of(job))
    found = hierarchies(job, options)
    with table_run(job, options, "mondrian", targets=[target], transactional="Mondrian partitioning") as run:
        db, conn = run.db, run.conn
        # the output appears whole and audited, or not at all; the rounds sort and group a table's every row
        with conn.begin(), db.large_sorts(conn), target.pseudonyms.loaded(db, conn) as pseudonyms:
            destination = Destination(name=target.name, source=target.source, replace=replace, grant_to=output.grant_to)
            published = partition_and_publish(
                db,
                conn,
                job=run.job,
                columns=run.columns,
                hierarchies=found,
                destination=destination,
                pseudonyms=pseudonyms,
                ownership=run.ownership,
                run_id=run.id,
                progress=options.progress,
                ledger=ReleaseLedger.of(db, options.metadata_schema, run.job, run.id),
            )
        run.finish(published.to_dict())
    return published


@publishes(Randomization.name)
def randomize(job: Job, options: RunOptions | None = None, replace: bool = False) -> RandomizationReport:
    """Publish the job's table with additive noise on the columns `output.noise` names, and the noise's
    distribution in `output.noise_table` (output.method randomize): both written and audited in one transaction.
    Criteria, suppression and the lattice play no part."""
    options = options or RunOptions()
    output = method_output(job, Randomization.name, "noise: {COLUMN: {distribution: uniform, width: NUMBER}}")
    target = Target(output=output, replace=replace, pseudonyms=Pseudonyms.of(job))
    described = dataclasses.replace(output, table=Randomization.companion_table(output))
    noise_target = Target(output=described, replace=replace, setting="output.noise_table")
    what = "a randomized publication"
    with table_run(job, options, Randomization.name, targets=[target, noise_target], transactional=what) as run:
        db, conn = run.db, run.conn
        with conn.begin(), target.pseudonyms.loaded(db, conn) as pseudonyms:  # both tables, audited, or nothing
            report = randomize_and_publish(
                db,
                conn,
                job=run.job,
                columns=run.columns,
                destination=Destination(
                    name=target.name, source=target.source, replace=replace, grant_to=output.grant_to
                ),
                noise_destination=Destination(
                    name=noise_target.name, source=target.source, replace=replace, grant_to=output.grant_to
                ),
                pseudonyms=pseudonyms,
                ownership=run.ownership,
                run_id=run.id,
                progress=options.progress,
            )
        run.finish(report.to_dict())
    return report


@publishes(Condensation.name)
def condense(job: Job, options: RunOptions | None = None, replace: bool = False) -> CondensationReport:
    """Publish synthetic records of the job's numeric QIs drawn from groups of at least `output.k` records
    (output.method condense), and keep the groups' statistics in `output.groups_table` (never granted): both
    written and audited in one transaction."""
    options = options or RunOptions()
    output = method_output(job, Condensation.name, "k: K")
    return _condensed(job, output, options, Condensation.name, replace, condense_and_publish)


@publishes(DifferentialPrivacy.name)
def differentially_private(job: Job, options: RunOptions | None = None, replace: bool = False) -> PrivateRelease:
    """Publish a random sample of the job's table generalized to one node, every class below the k that
    (`output.epsilon`, `output.delta`) imply suppressed, for (epsilon, delta)-differential privacy (output.method
    differential_privacy, SafePub): the node the job fixes (`generalization`) or the exponential mechanism's
    (`search`); the table and its privacy table (the guarantee's parameters) written and audited in one
    transaction."""
    started = time.perf_counter()
    options = options or RunOptions()
    output = method_output(job, DifferentialPrivacy.name, "epsilon: E, delta: D, generalization: low_medium")
    plan = PrivacyPlan.of(job)
    sampled = plan.sampled_job(job)
    target = Target(output=output, replace=replace)
    kept = dataclasses.replace(output, table=DifferentialPrivacy.companion_table(output))
    privacy = Target(output=kept, replace=replace, setting="output.privacy_table")
    with lattice_run(sampled, options, "anonymize", target, companions=[privacy]) as run:
        ctx, src = run.ctx, run.job.source
        table = sampled_table(ctx.star, ctx.db.count_rows(ctx.conn, ctx.db.q(src.schema, src.table)), plan)
        evaluator = metrics_evaluator(ctx, job.sensitive, job.select.quality)
        try:
            choice = chosen_node(plan, evaluator, table, job.qi_names, options.progress)
            node, walk = choice.node, choice.walk
            sums = choice.sums or evaluator.class_sums([node])[node]
            result = empty_result(sampled, ctx, [node])
            result.metrics[node] = evaluator.figures(node, sums)
        finally:
            evaluator.close()
        row = privacy_row(plan, job.qi_names, node)
        destination = Destination(name=privacy.name, source=target.source, replace=replace, grant_to=output.grant_to)
        ownership = Ownership(ctx.db, ctx.schema)
        published = publish_node_of_run(
            sampled,
            ctx,
            target,
            result,
            node,
            plan.describe(),
            beside=lambda: write_privacy_table(ctx.db, ctx.conn, destination, row, ownership, run.id),
        )
        report = PrivateRelease(
            output=published.output,
            privacy_table=str(privacy.name),
            row=row,
            node_levels=dict(zip(job.qi_names, node)),
            rows=table.rows,
            sampled=table.sampled,
            published=published.audit.rows,
            walk=walk.pivots if walk else [],
            walk_scores=[walk.scores[p] for p in walk.pivots] if walk else [],
            score=walk.scores[node] if walk else None,
            loss=result.metrics[node]["loss"],
            reproducible=plan.reproducible,
            audit=published.audit.to_dict(),
            preview=published.preview,
            seconds=time.perf_counter() - started,
            release=published.release,
        )
        run.finish(report.to_dict())
    return report


def condense_add(
    job: Job, batch: str, batch_schema: str | None = None, options: RunOptions | None = None
) -> CondensationReport:
    """Condensation's dynamic version: the records of `batch` (a table with the job's QIs) join the groups that
    `condense` kept in `output.groups_table`, each its nearest group, a group of 2k splitting in two along its
    longest eigenvector; the groups table and the synthetic table are written anew, audited, in one transaction.
    The job's source is not read: only the groups' statistics are kept of earlier records."""
    options = options or RunOptions()
    output = method_output(job, Condensation.name, "k: K")
    job = on_db(job, options.db_url)
    source = dataclasses.replace(job.source, table=batch, schema=batch_schema or job.source.schema, csv=None)
    return _condensed(dataclasses.replace(job, source=source), output, options, "condense-add", True, add_and_publish)


def _condensed(
    job: Job, output: Output, options: RunOptions, command: str, replace: bool, publish: Callable[..., Any]
) -> CondensationReport:
    """Run `publish` (condense_and_publish, add_and_publish) on the job's source into the output's two tables (the
    groups table never granted), in one transaction, and record the run."""
    target = Target(output=output, replace=replace)
    kept = dataclasses.replace(output, table=Condensation.companion_table(output))
    groups_target = Target(output=kept, replace=replace, setting="output.groups_table")
    what = "a condensed publication"
    with table_run(job, options, command, targets=[target, groups_target], transactional=what) as run:
        with run.conn.begin():  # both tables, audited, or nothing
            synthetic = Destination(name=target.name, source=target.source, replace=replace, grant_to=output.grant_to)
            groups = Destination(name=groups_target.name, source=target.source, replace=replace)
            report: CondensationReport = publish(
                run.db,
                run.conn,
                job=run.job,
                columns=run.columns,
                tables=CondensedTables(synthetic=synthetic, groups=groups),
                ownership=run.ownership,
                run_id=run.id,
                progress=options.progress,
            )
        run.finish(report.to_dict())
    return report


def inference(job: Job, options: RunOptions | None = None, replace: bool = False) -> InferenceReport:
    """Maximum-entropy inference across the job's releases (`releases:`), solved in the database.

    P(s | person) goes to `inference.table` when the job names one (written
    and recorded in one transaction; replaced only with `replace` and only if
    sqlanon wrote it); the report lists the entropies and the disclosures."""
    options = options or RunOptions()
    check_inference_job(job)
    assert job.releases is not None
    found = hierarchies(job, options) if any(not r.bucketized for r in job.releases.releases) else {}
    target = InferenceTarget(job=on_db(job, options.db_url), replace=replace)  # checked before any work
    what = "inference across releases"
    with table_run(job, options, "inference", targets=[target], transactional=what, reads_source=False) as run:
        with run.conn.begin():  # the probability table appears whole, or not at all
            report = infer(
                run.db,
                run.conn,
                job=run.job,
                hierarchies=found,
                target=target.name,
                ownership=run.ownership,
                replace=replace,
                run_id=run.id,
                progress=options.progress,
            )
        run.finish(report.to_dict())
    return report


def register_job(name: str, config_file: str | Path, db_url: str, metadata_schema: str = DEFAULT_SCHEMA) -> int:
    """Store a job (its config and the hierarchy files it names) in the database; returns the file count."""
    with opened_registry(db_url, metadata_schema) as registry:
        return registry.register(name, Path(config_file))


def create_key(
    name: str,
    db_url: str,
    users: Sequence[str] = (),
    key: bytes | None = None,
    metadata_schema: str = DEFAULT_SCHEMA,
) -> None:
    """Store a pseudonym key in the database under `name`, for the roles `users` (on PostgreSQL at least one:
    they, or roles with their rights, may pseudonymize with it; none may read it). A random key of 32 bytes unless
    `key` is given (to keep the pseudonyms an earlier key_env or key_file made). Its pads reach the database
    through the driver's bulk path, never in a statement or its parameters; sqlanon keeps no copy and returns none.
    Run as the owner of sqlanon's schema. A name that exists is refused: its pseudonyms would change."""
    name = check_key_name(name, "the key's name")
    key = secrets.token_bytes(32) if key is None else key
    if len(key) < MIN_KEY_BYTES:
        raise ConfigError(f"the key has {len(key)} bytes; use at least {MIN_KEY_BYTES} random bytes")
    db = open_database(normalize_url(db_url, Path.cwd()))
    try:
        roles = [check_key_name(role, "--for") for role in users]
        if db.roles and not roles:
            raise ConfigError("name the roles that may pseudonymize with the key: --for ROLE (repeatable)")
        migrate(db, metadata_schema)
        store = Store(db, metadata_schema)
        with db.connect() as conn, conn.begin():
            missing = [role for role in roles if not db.role_exists(conn, role)]
            if missing:
                raise ConfigError(f"role {missing[0]!r} does not exist; create it first, or name another with --for")
            if store.call(conn, keys.USABLE, name=name).first() is not None:
                raise ConfigError(
                    f"the database already holds a pseudonym key {name!r}; a new key would change its pseudonyms: "
                    "choose another name"
                )
            columns = [("inner_pad", db.bytes_type), ("outer_pad", db.bytes_type)]
            with db.secret_table(conn, keys.IMPORT_TABLE, columns, [hmac_pads(key)]):
                store.call(conn, keys.STORE, name=name, users=",".join(roles), created_at=now())
    finally:
        db.dispose()


def list_keys(db_url: str, metadata_schema: str = DEFAULT_SCHEMA) -> list[dict[str, Any]]:
    """The pseudonym keys the database holds: name, the roles they are for, who created them and when (never a
    key). Run as the owner of sqlanon's schema."""
    db = open_database(normalize_url(db_url, Path.cwd()))
    try:
        migrate(db, metadata_schema)
        with db.connect() as conn:
            rows = Store(db, metadata_schema).call(conn, keys.LIST).all()
    finally:
        db.dispose()
    return [
        {"name": name, "users": [u for u in (users or "").split(",") if u], "created_by": owner, "created_at": str(at)}
        for name, users, owner, at in rows
    ]


def register_job_config(
    name: str, config: dict[str, Any], read: Any, db_url: str, metadata_schema: str = DEFAULT_SCHEMA
) -> int:
    """Register a parsed config; `read(path, where)` returns the text of a file it names (see JobRegistry)."""
    with opened_registry(db_url, metadata_schema) as registry:
        return registry.register_config(name, config, read)


def publish_node(
    run_id: int,
    node: tuple[int, ...],
    table: str,
    schema: str | None,
    db_url: str,
    options: RunOptions | None = None,
    replace: bool = False,
) -> AnonymizeResult:
    """Write any node of a finished run's job as an audited table (the job's suppression applies).

    The node need not be the one the run chose; the audit refuses one that
    does not satisfy the criteria, and nothing is written then.
    """
    with registered_jobs(db_url, options) as (registry, url, options):
        with registry.load(registry.job_of_run(run_id), url) as job:
            grants = job.output.grant_to if job.output else []
            target = Target(
                output=Output(table=table, schema=schema or job.source.schema, grant_to=grants), replace=replace
            )
            with lattice_run(job, options, "publish", target) as run:
                result = empty_result(job, run.ctx, [node])
                add_metrics(job, run.ctx, result, [node])
                published = publish_node_of_run(job, run.ctx, target, result, node, f"node of run {run_id}")
                record_metrics(run.ctx, result, node)
                run.finish(published.to_dict())
    return published


def apply(
    job: Job,
    batch: str,
    node: tuple[int, ...] | None = None,
    run_id: int | None = None,
    output: str | None = None,
    batch_schema: str | None = None,
    options: RunOptions | None = None,
    replace: bool = False,
) -> AnonymizeResult:
    """Publish `batch` (a new table with the source's columns) generalized at the node run `run_id` published, or
    at `node`, through the same audited, atomic path as `anonymize` (the job's suppression limit applies, to the
    batch's rows). A batch that violates the criteria at that node beyond the limit is refused, nothing written,
    and the error names the tuples and the classes. The output defaults to `<batch>_anon`."""
    options = options or RunOptions()
    if (node is None) == (run_id is None):
        raise ConfigError(
            "give the transformation to apply: a run that published one (--run ID) or a node (--node 0,1,...), not both"
        )
    job = on_db(job, options.db_url)
    src = dataclasses.replace(job.source, table=batch, schema=batch_schema or job.source.schema, csv=None)
    batch_job = dataclasses.replace(job, source=src)
    if node is None:
        assert run_id is not None
        node = published_node(batch_job, run_id, options.metadata_schema)
    grants = job.output.grant_to if job.output else []
    target = Target(output=Output(table=output or f"{batch}_anon", schema=src.schema, grant_to=grants), replace=replace)
    with lattice_run(batch_job, options, "apply", target) as run:
        ctx = run.ctx
        result = empty_result(batch_job, ctx, [node])
        add_metrics(batch_job, ctx, result, [node])
        refuse_violating_batch(ctx, node, batch, result.metrics[node]["suppressed"])
        source = f"node of run {run_id}" if run_id is not None else "the given node"
        published = publish_node_of_run(batch_job, ctx, target, result, node, f"{source}, applied to {batch}")
        record_metrics(ctx, result, node)
        run.finish(published.to_dict())
    return published


def report(
    job: JobSpec,
    out: str | Path,
    options: RunOptions | None = None,
    sensitive: str | None = None,
    settings: AnalysisSettings | None = None,
    replace: bool = False,
    job_file: Path | None = None,
    *,
    source: pd.DataFrame | None = None,
) -> Path:
    """Write the HTML report of the job's releases to `out` (see sqlanon.analysis.report): what the release
    guarantees, each attribute before and after, the lattice, the chosen release (by the job's selection rule)
    and the minimal releases with their attacks and risk; for Mondrian and anatomy, of the table the job
    published (anonymize first). An existing
    file is overwritten only with `replace`, and only when sqlanon wrote it (never the job's file `job_file` or
    its database); of the DataFrame `source` instead of the job's table, when given."""
    options, settings, job = options or RunOptions(), settings or AnalysisSettings(), framed(job, source)
    attribute = analyzed_attribute(job, sensitive)
    out = Path(out)
    database = duckdb_file(on_db(job, options.db_url).source.url)
    protected = {
        path: what
        for path, what in ((job_file, "the job's file"), (database, "the job's database"))
        if path is not None
    }
    check_report_path(out, replace, protected)  # before any work
    if job.output is not None and job.output.method != Generalization.name:
        return _report_published(job, out, options, attribute, settings)
    with lattice_run(job, options, "report") as run:
        ctx = run.ctx
        phases = Phases(options.progress, "report", 4)
        phases.step("searching")
        result = run_search(job, ctx)
        phases.step("attacks, risk and metrics")
        with node_analysis(ctx, attribute, job.sensitive) as analysis:
            # before the selection, which reads the metrics: the analysis computes them from its own class sums
            tables = analysis.analyze(result.minimal, settings, result.metrics)
            chosen = select_node(job, ctx, result)
            phases.step("the chosen release's classes")
            released = analysis.chosen(chosen, job.sensitive)  # from the same cube
        data = ReportData(
            **job_fields(job),
            guarantees=[c.guarantee() for c in job.criteria],
            levels=result.describe(chosen),
            level_examples=result.level_examples,
            heights=result.heights,
            satisfying=result.satisfying,
            minimal=result.minimal,
            chosen=chosen,
            selection=job.select.describe(),
            metrics=result.metrics,
            analysis=AnalysisReport(attribute, settings, tables),
            class_sizes=released.class_sizes,
            worst_classes=released.worst_classes,
            distributions=released.distributions,
        )
        phases.step("writing the page")
        path = write_report(data, out)
        run.finish({"report": str(path), "node": list(chosen)})
    return path


def _report_published(
    job: Job, out: Path, options: RunOptions, attribute: str | None, settings: AnalysisSettings
) -> Path:
    """The report of a publication without a lattice (Mondrian, anatomy): of the table the job published, read as
    it is (`anonymize` first); nothing is written but the page."""
    assert job.output is not None, "a publication's report reads its output"
    output = job.output
    needed = job.qi_names + (job.sensitive if output.method != Anatomy.name else [])
    purpose = f"report on the table {output.method} published"
    schema = output.schema or job.source.schema
    missing = (
        f"the job's output {qualified_name(schema, output.table)!r} does not exist yet: publish it first "
        "(sqlanon anonymize JOB), then report on it"
    )
    with table_reader(job, options, schema, output.table, needed, purpose, missing=missing) as (db, conn):
        options.progress("report: the published table", 0, 1)
        analysis, released = published_release(db, conn, job, attribute, settings)
    guarantees = [c.guarantee() for c in job.criteria]
    if output.method == Anatomy.name:
        l_value, values = output.settings["l"], " and ".join(job.sensitive) or "the sensitive attribute"
        guarantees.append(
            f"every bucket holds at least {l_value} different values of {values}: a record links to its bucket's "
            f"values only, so no one names its value with a probability above 1/{l_value}"
        )
    data = ReportData(
        **job_fields(job),
        guarantees=guarantees,
        analysis=AnalysisReport(attribute if output.method != Anatomy.name else None, settings, [analysis]),
        published=(output.method, qualified_name(schema, output.table)),
        class_sizes=released.class_sizes,
        distributions=released.distributions,
    )
    return write_report(data, out)


def analyze(
    job: JobSpec,
    options: RunOptions | None = None,
    node: tuple[int, ...] | None = None,
    sensitive: str | None = None,
    settings: AnalysisSettings | None = None,
    bayes: BayesSettings | None = None,
    *,
    source: pd.DataFrame | None = None,
) -> AnalysisReport:
    """Attacks, risk and utility of every minimal node of the job (or of `node`), computed in SQL.

    `sensitive` is the attribute the attacks target (default: the job's first sensitive attribute). With a
    suppression limit, the classes the criteria suppress are left out of each release. Nothing is written
    but the run's records. Of the DataFrame `source` instead of the job's table, when given."""
    options, settings, job = options or RunOptions(), settings or AnalysisSettings(), framed(job, source)
    attribute = analyzed_attribute(job, sensitive)
    with lattice_run(job, options, "analyze") as run:
        ctx = run.ctx
        if node is not None:
            result = empty_result(job, ctx, [node])
            nodes = [node]
        else:
            result = run_search(job, ctx)
            nodes = result.minimal
        searched = time.perf_counter()
        if node is not None and not ctx.max_suppressed:  # a node given may fail the criteria (analyze_nodes)
            add_metrics(job, ctx, result, nodes)
        population = population_star(job, ctx)
        tables = analyze_nodes(ctx, nodes, attribute, settings, result.metrics, job.sensitive, population, bayes)
        report = AnalysisReport(attribute, settings, tables, result.stats.seconds if node is None else 0.0)
        report.analysis_seconds = time.perf_counter() - searched
        run.finish(report.summary())
    return report


def analyze_registered(
    name: str,
    db_url: str,
    options: RunOptions | None = None,
    node: tuple[int, ...] | None = None,
    settings: AnalysisSettings | None = None,
) -> AnalysisReport:
    """`analyze` of a job registered in the database (as its registrant, one run of the job at a time)."""
    with registered_jobs(db_url, options) as (registry, url, options):
        with registry.exclusive(name), registry.load(name, url) as job:
            return analyze(job, options, node, settings=settings)


def analyze_table(
    job: JobSpec,
    table: str | pd.DataFrame,
    schema: str | None = None,
    options: RunOptions | None = None,
    sensitive: str | None = None,
    settings: AnalysisSettings | None = None,
) -> AnalysisReport:
    """The attacks and risk of a table already published (its QI columns as they are), without the lattice;
    `table` may be a DataFrame (read in a database in memory)."""
    options, settings = options or RunOptions(), settings or AnalysisSettings()
    job, schema, table, read = frame_read(framed(job, None), schema, table)
    attribute = analyzed_attribute(job, sensitive)
    purpose = "analyze a table with the job's quasi-identifiers and the sensitive attribute"
    needed = job.qi_names + ([attribute] if attribute else [])
    with table_reader(job, options, schema, table, needed, purpose, read) as (db, conn):
        options.progress("analysis: attacks and risk of the table", 0, 1)
        return AnalysisReport(
            attribute, settings, [analyze_published_table(db, conn, job, schema, table, attribute, settings)]
        )


def run_job(
    name: str, db_url: str, options: RunOptions | None = None, resume: bool = False
) -> SearchResult | Published:
    """Run a registered job by name: anonymize when it has an output, else search.

    One run of a job at a time (PostgreSQL advisory lock). A run left behind by
    a killed client is closed as failed when a new run starts; `resume=True`
    continues it instead, from its last completed Incognito iteration (other
    strategies start over).
    """
    with registered_jobs(db_url, options) as (registry, url, options):
        with registry.exclusive(name), registry.load(name, url) as job:
            if resume:
                options = dataclasses.replace(options, resume_run=registry.resumable_run(name))
            else:
                registry.mark_interrupted(name, "a new run started")
            if job.output is not None:
                return anonymize(job, options, replace=True)
            return search(job, options)


def releases(job: Job, options: RunOptions | None = None, *, forget: int | None = None) -> list[dict[str, Any]]:
    """The job's release ledger (`ledger:` in the job), oldest first: each release's run, when, method, tables,
    node, criteria, persons and rows, and its `state` (present, or dropped or changed since). With `forget`, the
    release of that run is taken out of the ledger first (one withdrawn before anyone read it: later releases are
    no longer checked against it)."""
    options = options or RunOptions()
    job = on_db(job, options.db_url)
    with job_database(job, options) as db:
        migrate(db, options.metadata_schema)
        with db.connect() as conn:
            if forget is not None:
                with conn.begin():
                    ledger.forget(db, conn, options.metadata_schema, job.name, forget)
            listed = ledger.entries(db, conn, options.metadata_schema, job.name)
            return [{**entry.describe(), "state": entry.state(db, conn)} for entry in listed]


def profile(
    db_url: str,
    table: str,
    schema: str | None = None,
    *,
    unit: str | None = None,
    max_size: int = 3,
    candidates: int = 12,
    greedy: int = 3,
    options: RunOptions | None = None,
) -> Profile:
    """Which columns of `table` identify people, before any job: each column's distinct values and the share of
    rows (or of persons, named by `unit`) it singles out, the same for every combination of up to `max_size` of
    the `candidates` columns that may be quasi-identifiers and for up to `greedy` more columns added one at a time
    to the best of them, suggested roles, and a job to start from (`Profile.job_yaml()`). Reads the table, writes
    nothing."""
    options = options or RunOptions()
    return profile_table(
        db_url,
        table,
        schema,
        unit=unit,
        max_size=max_size,
        candidates=candidates,
        greedy=greedy,
        progress=options.progress,
    )


def reconstruct(
    db_url: str,
    table: str,
    column: str,
    schema: str | None = None,
    *,
    noise: Mapping[str, Any] | None = None,
    noise_table: str | None = None,
    intervals: int = DEFAULT_INTERVALS,
    tolerance: float = DEFAULT_TOLERANCE,
    max_iterations: int = DEFAULT_MAX_ITERATIONS,
    original: str | None = None,
    original_schema: str | None = None,
    original_column: str | None = None,
    options: RunOptions | None = None,
) -> ReconstructionReport:
    """The original distribution of a randomized `column` of `table`, reconstructed on a grid of `intervals`
    (see sqlanon.analysis.reconstruction). The noise is read from `noise_table` (by default TABLE_noise, as
    `anonymize` publishes it by output.method randomize) unless `noise` gives it ({distribution: uniform, width:
    W} or {distribution: gaussian, sd: S}). With the `original` table (its `original_column`, by default the same
    name), the report compares both distributions with the true one. Writes nothing."""
    options = options or RunOptions()
    given = None if noise is None else Noise.parse(column, noise, "noise")
    grid = Grid(
        intervals=intervals,
        tolerance=tolerance,
        max_iterations=max_iterations,
        original=None if original is None else (original_schema, original, original_column or column),
    )
    return reconstruct_distribution(
        db_url, table, column, schema, noise=given, noise_table=noise_table, grid=grid, progress=options.progress
    )


def load_csv(
    csv: str | Path,
    table: str,
    db_url: str,
    schema: str | None = None,
    csv_options: dict[str, Any] | None = None,
    replace: bool = False,
    metadata_schema: str = DEFAULT_SCHEMA,
) -> int:
    """Load a CSV file into a new table `schema.table` (atomically); returns its row count.

    The way to put data into the database before registering a job (a
    registered job reads tables, not files). DuckDB reads the file, whatever
    the target: type detection and `csv_options` are those of `source.csv`.
    An existing table is refused unless `replace` (the one way sqlanon
    overwrites a table it did not create: you name it here). The file's
    checksum is recorded, so a job whose `source.csv` names it reuses the table.
    """
    db = open_database(normalize_url(db_url, Path.cwd()))
    path, options = Path(csv), csv_options or {}
    try:
        migrate(db, metadata_schema)
        ownership = Ownership(db, metadata_schema)
        with db.connect() as conn, conn.begin():
            target = ownership.resolve(conn, schema, table, "table")
            if ownership.check_target(conn, target, replace, "table", replace_any=True):
                db.drop_table(conn, db.q(schema, table))
            return load_table(db, conn, ownership, path, options, target)
    finally:
        db.dispose()
