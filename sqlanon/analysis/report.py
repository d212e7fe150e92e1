"""One self-contained HTML page about a job's releases, for a data owner to read instead of JSON.

The figures come from the database (a search, the analyses of sqlanon.analysis.attacks,
the chosen node's class sizes and worst classes, all small results); this
module only lays them out. Charts are drawn by Plotly, whose JavaScript is
embedded in the page, so it opens without a network.
"""

from __future__ import annotations

import html
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, SqlanonError
from ..model.job import Job
from .attacks import AnalysisReport
from .releases import DISTRIBUTION_SHOWN

SECTIONS = (
    "What this release guarantees",
    "Before and after",
    "The job",
    "The lattice",
    "The chosen release",
    "Minimal releases side by side",
    "Attacks and risk",
)


@dataclass(kw_only=True)
class ReportData:
    """What the page shows, gathered by sqlanon.api.report."""

    job_name: str
    columns: list[tuple[str, str, str]]  # (column, role, what the release does to it), without machine paths
    settings: list[tuple[str, str]]  # (setting, value): criteria, suppression, selection, search
    guarantees: list[str]  # each criterion in plain words (Criterion.guarantee)
    qi: list[str]
    analysis: AnalysisReport
    #: a publication without a lattice (Mondrian, anatomy): its method and the table it wrote, which the page
    #: reads; None: a generalization chosen from the lattice (the fields below)
    published: tuple[str, str] | None = None
    levels: dict[str, dict[str, Any]] = field(default_factory=dict)  # each QI's level in the chosen node
    heights: list[int] = field(default_factory=list)
    satisfying: list[tuple[int, ...]] = field(default_factory=list)
    minimal: list[tuple[int, ...]] = field(default_factory=list)
    chosen: tuple[int, ...] = ()
    selection: str = ""
    metrics: dict[tuple[int, ...], dict[str, Any]] = field(default_factory=dict)
    level_examples: list[list[list[str]]] = field(default_factory=list)  # per QI, per level: a few labels
    class_sizes: list[tuple[int, int]]  # (class size, classes of that size) of the chosen node
    worst_classes: list[tuple[str, list[tuple[str, int]]]] = field(default_factory=list)  # label, value counts
    #: per attribute (QIs, then sensitive ones): its most frequent values in the table, and its most frequent
    #: labels or values among the published records (analysis.releases.NodeAnalysis.chosen)
    distributions: dict[str, tuple[list[tuple[str, int]], list[tuple[str, int]]]] = field(default_factory=dict)
    unit: str | None = None  # the job's `unit` ("rows": a person may have several records)
    unit_column: str | None = None  # the column naming each record's person, when the job counts persons by it


def job_fields(job: Job) -> dict[str, Any]:
    """What the page shows of the job itself (ReportData's job_name, columns, settings, qi and unit): each
    column's role and treatment, and the settings, with files by their names only (the page travels; the
    machine's paths stay on it)."""
    columns = [
        (
            qi.column,
            "quasi-identifier",
            f"generalized by the hierarchy {qi.hierarchy.name}"
            if qi.hierarchy
            else f"generalized by the generated hierarchy '{qi.generate}'"
            if qi.generate
            else "published as it is",
        )
        for qi in job.quasi_identifiers
    ]
    columns += [(c, "sensitive", "published as it is, protected by the criteria") for c in job.sensitive]
    columns += [(c, "insensitive", "published as it is") for c in job.insensitive]
    columns += [
        (i.column, "identifying", "removed" if i.action == "drop" else "replaced by a keyed pseudonym")
        for i in job.identifying
    ]
    settings = [("criteria", "; ".join(c.describe() for c in job.criteria))]
    limit = job.suppression.limit
    if limit:
        share = f"{limit:.2%} of the records" if isinstance(limit, float) else f"{limit:,} records"
        settings.append(("suppression", f"up to {share}, {'masked' if job.suppression.mode == 'mask' else 'removed'}"))
    settings += [("selection", job.select.describe()), ("search", job.strategy)]
    if job.others == "drop":
        settings.append(("other columns", "left out of the release"))
    if job.unit == "rows":
        settings.append(("unit", "rows: a person may have several records"))
    if job.unit_column:
        settings.append(("unit", f"persons, named by {job.unit_column}: a person may have several records"))
    return {
        "job_name": job.name,
        "columns": columns,
        "settings": settings,
        "qi": job.qi_names,
        "unit": job.unit,
        "unit_column": job.unit_column,
    }


#: how a page says sqlanon wrote it (the only kind of existing file `report --replace` overwrites)
GENERATOR = "<meta name='generator' content='sqlanon report'>"


def check_report_path(path: Path, replace: bool, protected: dict[Path, str]) -> None:
    """Refuse, before any work, a report path that would overwrite what sqlanon did not write: an existing file
    unless `replace` and it is a report of sqlanon's, and never one of `protected` (the job's file and database,
    what they are)."""
    resolved = path.resolve()
    for other, what in protected.items():
        if resolved == other.resolve():
            raise ConfigError(f"--out {path} is {what}; write the report to a file of its own")
    if not path.parent.is_dir():
        raise ConfigError(f"cannot write the report to {path}: folder {path.parent} does not exist")
    if not (path.exists() or path.is_symlink()):
        return
    if not replace:
        raise ConfigError(f"{path} exists; choose another file, or pass --replace to overwrite a report sqlanon wrote")
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError as exc:
        raise ConfigError(f"cannot read {path} ({exc.strerror}); choose another file") from None
    if not path.is_file() or GENERATOR.encode() not in head:
        raise ConfigError(
            f"{path} is not a report sqlanon wrote; sqlanon overwrites only its own reports: choose another file"
        )


def write_report(data: ReportData, path: Path) -> Path:
    """Write the page to `path` atomically (a temporary file beside it, then renamed); returns the path."""
    try:
        import plotly
    except ImportError:
        raise SqlanonError("sqlanon report draws its charts with Plotly: pip install 'sqlanon[report]'") from None
    path = Path(path)
    if not path.parent.is_dir():
        raise ConfigError(f"cannot write the report to {path}: folder {path.parent} does not exist")
    page = _page(data, plotly.offline.get_plotlyjs())
    try:
        handle, partial = tempfile.mkstemp(prefix=".report-", suffix=".html", dir=path.parent)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(page)
        os.replace(partial, path)
    except OSError as exc:
        raise ConfigError(f"cannot write the report to {path}: {exc.strerror}") from None
    return path


def _page(data: ReportData, plotly_js: str) -> str:
    body = [
        _section("What this release guarantees", _summary(data)),
        _section("Before and after", _before_after(data)),
        _section("The job", _job(data)),
    ]
    if data.published is not None:  # no lattice: the table as published
        sizes = _class_sizes(data) + _risk_chart(data)
        body += [_section("The published table", sizes), _section("Attacks and risk", _attacks(data))]
    else:
        body += _lattice_sections(data)
    title = f"sqlanon report: {html.escape(data.job_name)}"
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>{GENERATOR}<title>{title}</title>"
        f"<style>{STYLE}</style><script>{plotly_js}</script></head><body><h1>{title}</h1>"
        + "".join(body)
        + "</body></html>"
    )


def _lattice_sections(data: ReportData) -> list[str]:
    """The sections of a generalization: the lattice, the chosen release, the alternatives, their attacks."""
    return [
        _section(
            "The lattice",
            "<p>Every generalization by height (the sum of its levels). Grey: fails the "
            "criteria; blue: passes; orange: minimal; red: chosen. Each point names its level of every "
            "quasi-identifier; the table below shows what each level publishes.</p>"
            + _lattice(data)
            + _level_table(data),
        ),
        _section("The chosen release", _chosen(data)),
        _section("Minimal releases side by side", _minimal(data)),
        _section("Attacks and risk", _attacks(data)),
    ]


STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1180px;padding:0 1em;line-height:1.4}"
    ".scroll{overflow-x:auto}"
    "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
    "th{background:#f3f3f3}td.text,th.text{text-align:left}pre{background:#f7f7f7;padding:1em;overflow:auto}"
    ".summary li{margin:.3em 0}tr.chosen td{background:#fde8e8;font-weight:bold}"
    "@media print{body{margin:0;max-width:none}section{break-inside:avoid-page}.js-plotly-plot{break-inside:avoid}"
    "a{color:inherit;text-decoration:none}}"
)


def _who(data: ReportData) -> str:
    """Whose the records are: one per person where the job's identifier repeats in no row (checked before
    every run), else said as it is."""
    identifiers = [c for c, role, _ in data.columns if role == "identifying"]
    if data.unit == "rows":
        return "the job counts rows, not persons (unit: rows): a person with several rows counts once for each"
    if data.unit_column:
        return (
            f"persons, each counted once whatever their number of records ({html.escape(data.unit_column)} names "
            "the person of each record; a person's records are published together, or not at all)"
        )
    if identifiers:
        return (
            f"one record per person ({html.escape(', '.join(identifiers))} repeats in no row, checked before the run)"
        )
    return "the job names no direct identifier, so whether a person has several records is not known"


def _section(title: str, content: str) -> str:
    anchor = title.lower().replace(" ", "-")
    return f"<section id='{anchor}'><h2>{html.escape(title)}</h2>{content}</section>"


def _summary(data: ReportData) -> str:
    """The page's first lines, in plain words: what holds, against whom, what was given up, what is kept."""
    chosen = (
        data.analysis.tables[0]
        if data.published
        else next((t for t in data.analysis.tables if t.label == _node(data.chosen)), None)
    )
    metrics = data.metrics.get(data.chosen, {})
    items = [f"<li>{html.escape(g[0].upper() + g[1:])}.</li>" for g in data.guarantees]
    qis = ", ".join(data.qi)
    if chosen is not None and chosen.rows:
        smallest = round(1 / chosen.highest_risk) if chosen.highest_risk else 0
        items.append(
            f"<li>Against someone who knows that a person is in the table and knows their {html.escape(qis)}: "
            f"the smallest published group holds {_records(smallest)}, so the highest re-identification risk is "
            f"{chosen.highest_risk:.3g} (1 in {smallest:,}); {chosen.records_at_risk:,} records are above the "
            f"{data.analysis.settings.risk_threshold} threshold.</li>"
        )
        published, suppressed = chosen.rows, chosen.suppressed
        items.append(
            f"<li>{_records(published + suppressed)}: {published:,} published, {suppressed:,} suppressed (their "
            f"groups would break the criteria); {_who(data)}.</li>"
            if suppressed
            else f"<li>{_records(published)}, every one published; {_who(data)}.</li>"
        )
    items.append(f"<li>The quasi-identifiers: {_quasi_identifiers(data)}.</li>")
    kept = [c for c, role, _ in data.columns if role in ("sensitive", "insensitive")]
    precision = metrics.get("precision")
    how = (
        f"published by {data.published[0]} as {html.escape(data.published[1])}"
        if data.published
        else f"the node was chosen by {html.escape(data.selection)} among {len(data.minimal)} minimal release(s) "
        "(see below)"
    )
    items.append(
        "<li>The release keeps "
        + (f"{precision:.0%} of the quasi-identifiers' detail (precision) and " if precision is not None else "")
        + (f"{html.escape(', '.join(kept))} unchanged" if kept else "what the job publishes")
        + f"; {how}.</li>"
    )
    return f"<ul class='summary'>{''.join(items)}</ul>"


#: how each publication without a lattice shows the quasi-identifiers, for the summary
PUBLISHED_QIS = {
    "mondrian": "each record shows its partition's range (numbers) or group (a hierarchy's label) of every one; "
    "the partitions are cut until a cut would break the criteria",
    "anatomy": "published exact, each record with its bucket; the sensitive values are published per bucket in a "
    "table of their own, so a record links to its bucket's values only",
}


def _records(count: int) -> str:
    return f"{count:,} record{'' if count == 1 else 's'}"


def _quasi_identifiers(data: ReportData) -> str:
    """How far each quasi-identifier went, in words (for a publication without a lattice, how its method shows
    them)."""
    if data.published:
        return PUBLISHED_QIS.get(data.published[0], f"published by {data.published[0]}")
    shown = {q: [label for label, _ in after] for q, (_, after) in data.distributions.items()}
    return "; ".join(
        f"{html.escape(q)} {_how_far(v, shown.get(q) or v.get('examples', []))}" for q, v in data.levels.items()
    )


def _before_after(data: ReportData) -> str:
    """Per attribute, its distribution in the table beside the release's: a quasi-identifier's values beside the
    labels it is published as, a sensitive attribute's values among all records beside the published ones."""
    charts = []
    for name, (before, after) in data.distributions.items():
        role = "quasi-identifier" if name in data.qi else "sensitive attribute"
        panels = [
            (before, "table", f"in the table ({sum(n for _, n in before):,} records shown)"),
            (after, "release", f"in the release ({sum(n for _, n in after):,} records shown)"),
        ]
        charts.append(_side_by_side(f"{name} ({role})", panels))
    return (
        "<p>Each attribute's most frequent values in the table (left) and as the release shows them (right): a "
        "quasi-identifier by the labels it is generalized to, a sensitive attribute among the published records "
        f"(at most {DISTRIBUTION_SHOWN} values each, the most frequent).</p>" + "".join(charts)
    )


SIDE_BY_SIDE = ([0.0, 0.45], [0.55, 1.0])  # the x domains of two charts side by side, a gap between


def _side_by_side(title: str, panels: list[tuple[list[tuple[str, int]], str, str]]) -> str:
    """Two bar charts of (label, records) side by side, each given as (counts, trace name, subtitle): the second
    on axes x2 and y2, each subtitle an annotation above its chart (what plotly's make_subplots lays out, written
    here as data)."""
    layout: dict[str, Any] = {"title": {"text": title}, "height": 380, "margin": {"t": 70}, "showlegend": False}
    traces, subtitles = [], []
    for (counts, name, subtitle), domain, axis in zip(panels, SIDE_BY_SIDE, ("", "2"), strict=True):
        traces.append(_counts_bar(counts, name=name, xaxis=f"x{axis}", yaxis=f"y{axis}"))
        layout[f"xaxis{axis}"] = {"domain": domain, "anchor": f"y{axis}", "type": "category"}
        layout[f"yaxis{axis}"] = {"anchor": f"x{axis}", "title": {"text": "" if axis else "records"}}
        place = {"x": sum(domain) / 2, "y": 1.0, "xref": "paper", "yref": "paper", "xanchor": "center"}
        subtitles.append({"text": subtitle, **place, "yanchor": "bottom", "showarrow": False, "font": {"size": 16}})
    layout["annotations"] = subtitles
    return _html({"data": traces, "layout": layout})


def _how_far(level: dict[str, Any], labels: list[str]) -> str:
    """How far a QI is generalized in the chosen release, in words, with a few of the labels it shows (the most
    frequent published ones, where the page has them)."""
    examples = ", ".join(map(str, labels[:3]))
    if level["level"] == 0:
        return "exact"
    if level["level"] == level["height"]:
        return "hidden (every value shown as its hierarchy's top)"
    return f"generalized to level {level['level']} of {level['height']}" + (
        f" (labels such as {html.escape(examples)})" if examples else ""
    )


def _job(data: ReportData) -> str:
    """The job as a data owner reads it: each column's role and treatment, then the settings (no paths)."""
    rows = "".join(
        f"<tr><td class='text'>{html.escape(c)}</td><td class='text'>{html.escape(r)}</td>"
        f"<td class='text'>{html.escape(t)}</td></tr>"
        for c, r, t in data.columns
    )
    settings = "".join(
        f"<tr><th class='text'>{html.escape(k)}</th><td class='text'>{html.escape(v)}</td></tr>"
        for k, v in data.settings
    )
    header = "<tr><th class='text'>column</th><th class='text'>role</th><th class='text'>in the release</th></tr>"
    chosen = (
        f"Published by {data.published[0]} as <b>{html.escape(data.published[1])}</b>."
        if data.published
        else f"Release chosen by {html.escape(data.selection)}: node <b>{_node(data.chosen)}</b> "
        f"({_levels(data, data.chosen)})."
    )
    return f"<p>{chosen}</p><div class='scroll'><table>{header}{rows}</table><table>{settings}</table></div>"


def _node(node: tuple[int, ...]) -> str:
    return ",".join(map(str, node))


def _levels(data: ReportData, node: tuple[int, ...]) -> str:
    return ", ".join(f"{html.escape(q)}={lv}/{h}" for q, lv, h in zip(data.qi, node, data.heights))


def _labelled(data: ReportData, node: tuple[int, ...]) -> str:
    """A node as its hover text reads: each QI's level with labels of that level (plotly's <br> breaks lines)."""
    parts = []
    for i, (q, level) in enumerate(zip(data.qi, node)):
        examples = data.level_examples[i][level][:2] if data.level_examples else []
        parts.append(f"{html.escape(q)}={level}" + (f" (e.g. {html.escape(', '.join(examples))})" if examples else ""))
    return f"{_node(node)}<br>" + "<br>".join(parts)


# The charts are Plotly figures written as data (traces and layout as dicts) and drawn by Plotly's JavaScript:
# plotly's Python figure objects validate every property as it is set, which took 0.25 s of a report's 0.45 s
# page (hospital 1M, 13 charts) for nothing the page needs


def _bar(x: list[Any], y: list[Any], **extra: Any) -> dict[str, Any]:
    return {"type": "bar", "x": x, "y": y, **extra}


def _counts_bar(counts: list[tuple[str, int]], **extra: Any) -> dict[str, Any]:
    """A bar per (label, count)."""
    return _bar([label for label, _ in counts], [n for _, n in counts], **extra)


def _figure(traces: list[dict[str, Any]], title: str, x: str, y: str) -> str:
    # a bar's x is a label (a value, a band, a node): a category, never read as a number or a date
    categories = {"type": "category"} if all(t["type"] == "bar" for t in traces) else {}
    layout = {
        "title": {"text": title},
        "xaxis": {"title": {"text": x}, **categories},
        "yaxis": {"title": {"text": y}},
        "height": 420,
        "margin": {"t": 50},
    }
    return _html({"data": traces, "layout": layout})


def _html(figure: dict[str, Any]) -> str:
    """A figure as a div and the script that draws it (the page holds Plotly's JavaScript once)."""
    import plotly.io

    return str(plotly.io.to_html(figure, full_html=False, include_plotlyjs=False, validate=False))


def _lattice(data: ReportData) -> str:
    """Nodes as points: x their height, y their rank within the height (every node, so the shape shows)."""
    from itertools import product

    passing, minimal = set(data.satisfying), set(data.minimal)
    by_height: dict[int, list[tuple[int, ...]]] = {}
    for node in product(*(range(h + 1) for h in data.heights)):
        by_height.setdefault(sum(node), []).append(node)
    groups: dict[str, list[tuple[int, int, tuple[int, ...]]]] = {"fails": [], "passes": [], "minimal": [], "chosen": []}
    for height, nodes in by_height.items():
        for rank, node in enumerate(nodes):
            kind = (
                "chosen"
                if node == data.chosen
                else "minimal"
                if node in minimal
                else "passes"
                if node in passing
                else "fails"
            )
            groups[kind].append((height, rank - len(nodes) // 2, node))
    colors = {"fails": "#bbbbbb", "passes": "#4c78a8", "minimal": "#f58518", "chosen": "#e45756"}
    # every point's hover names its level of each QI: the QI names travel once per trace (meta, never read as a
    # template) and each point carries its levels alone (a 9-QI lattice has 13k points); the few minimal and
    # chosen ones add labels of their levels
    named_levels = "<br>".join(f"%{{meta[{i}]}}=%{{customdata[{i}]}}" for i in range(len(data.qi)))
    traces = []
    for kind, points in groups.items():
        if not points:
            continue
        marked = kind in ("minimal", "chosen")
        traces.append(
            {
                "type": "scatter",
                "x": [p[0] for p in points],
                "y": [p[1] for p in points],
                "text": [_labelled(data, p[2]) if marked else _node(p[2]) for p in points],
                "customdata": [p[2] for p in points],
                "meta": [html.escape(q) for q in data.qi],
                "hovertemplate": "%{text}<extra>%{fullData.name}</extra>" if marked else "%{text}<br>" + named_levels,
                "mode": "markers",
                "name": f"{kind} ({len(points)})",
                "marker": {"color": colors[kind], "size": 9 if marked else 4},
            }
        )
    return _figure(traces, "generalization lattice", "height", "nodes of that height")


def _level_table(data: ReportData) -> str:
    """Each quasi-identifier's levels, with labels each publishes (the lattice's points name levels)."""
    if not data.level_examples:
        return ""
    levels = range(max(data.heights) + 1)
    head = "<th class='text'>quasi-identifier (a few labels of each level)</th>" + "".join(
        f"<th class='text'>level {lv}</th>" for lv in levels
    )
    rows = [f"<tr>{head}</tr>"]
    for q, examples in zip(data.qi, data.level_examples):
        cells = [html.escape(", ".join(labels[:3])) for labels in examples]
        cells += [""] * (len(levels) - len(cells))
        rows.append(
            f"<tr><th class='text'>{html.escape(q)}</th>"
            + "".join(f"<td class='text'>{c}</td>" for c in cells)
            + "</tr>"
        )
    return f"<div class='scroll'><table>{''.join(rows)}</table></div>"


def _class_sizes(data: ReportData) -> str:
    """The histogram of the release's published classes by size."""
    return _figure(
        [
            {
                "type": "histogram",
                "x": [s for s, _ in data.class_sizes],
                "y": [c for _, c in data.class_sizes],
                "histfunc": "sum",
                "nbinsx": 40,
                "name": "classes",
            }
        ],
        "class sizes of the release (published classes)",
        "class size",
        "classes",
    )


def _chosen(data: ReportData) -> str:
    metrics = data.metrics.get(data.chosen, {})
    figures = "".join(f"<tr><th>{html.escape(k)}</th><td>{_fmt(v)}</td></tr>" for k, v in metrics.items())
    sizes = _class_sizes(data) + _risk_chart(data)
    attribute = data.analysis.sensitive
    if attribute is None:
        return f"<table>{figures}</table>{sizes}"
    worst = "".join(
        _figure(
            [_counts_bar(counts)],
            f"{attribute} in class {label}",
            attribute,
            "tuples",
        )
        for label, counts in data.worst_classes
    )
    return (
        f"<table>{figures}</table>{sizes}<h3>The least diverse classes</h3>"
        f"<p>The classes of the chosen release with the fewest distinct values of "
        f"{html.escape(attribute)}, and how those values are spread.</p>{worst}"
    )


#: re-identification risk bands of the risk chart: (label, the smallest class size in the band)
RISK_BANDS = (
    ("100% (unique)", 1),
    ("50%", 2),
    ("25-33%", 3),
    ("11-20%", 5),
    ("5-10%", 10),
    ("2-5%", 20),
    ("1-2%", 50),
    ("under 1%", 101),
)


def _risk_chart(data: ReportData) -> str:
    """The published records by re-identification risk (1 / their class's size), in bands, as ARX plots them."""
    records = dict.fromkeys((label for label, _ in RISK_BANDS), 0)
    for size, classes in data.class_sizes:
        label = next(label for label, smallest in reversed(RISK_BANDS) if size >= smallest)
        records[label] += size * classes
    return _figure(
        [_bar(list(records), list(records.values()), name="records")],
        "published records by re-identification risk (1 / the size of their group)",
        "risk",
        "records",
    )


def _minimal(data: ReportData) -> str:
    """The alternatives the lattice offered: each minimal release's utility beside its risk, the chosen one
    marked, and the rule that chose it."""
    names = ["height", "precision", "suppressed", "classes", "avg_class_size", "discernibility", "kl_divergence"]
    risks = {t.label: t for t in data.analysis.tables}
    rows = "".join(
        f"<tr{' class=chosen' if n == data.chosen else ''}><td class='text'>{_node(n)}"
        f"{' (chosen)' if n == data.chosen else ''}</td>"
        + "".join(f"<td>{_fmt(data.metrics[n].get(m))}</td>" for m in names)
        + "".join(
            f"<td>{_fmt(getattr(risks.get(_node(n)), r, None))}</td>" for r in ("highest_risk", "records_at_risk")
        )
        + "</tr>"
        for n in data.minimal
        if n in data.metrics
    )
    header = (
        f"<tr><th class='text'>{_label_header(data)}</th>"
        + "".join(f"<th>{m.replace('_', ' ')}</th>" for m in names)
        + "<th>highest risk</th><th>records at risk</th></tr>"
    )
    why = (
        f"<p>Every minimal release satisfies the criteria; none can be made more precise without breaking them. "
        f"{html.escape(data.selection[0].upper() + data.selection[1:])} chose node {_node(data.chosen)}: the "
        "others trade one quasi-identifier's detail for another's.</p>"
    )
    nodes = [_node(n) for n in data.minimal]
    chart = _figure(
        [
            _bar(nodes, [data.metrics[n]["precision"] for n in data.minimal], name="precision"),
            _bar(nodes, [data.metrics[n]["kl_divergence"] for n in data.minimal], name="KL divergence"),
        ],
        "precision (higher is better) and KL divergence (lower is better)",
        "minimal node",
        "",
    )
    return f"{why}<div class='scroll'><table>{header}{rows}</table></div>{chart}"


def _label_header(data: ReportData) -> str:
    """What names a release in a table's first column: a node by its levels of the QIs, in order, or the table
    a method published."""
    return "release" if data.published else f"node ({html.escape(', '.join(data.qi))})"


def _header(data: ReportData, name: str) -> str:
    return f"<th>{_label_header(data) if name == 'label' else name.replace('_', ' ')}</th>"


def _attacks(data: ReportData) -> str:
    report = data.analysis
    if report.sensitive is None:
        return _risks(data)
    names = [
        "label",
        "rows",
        "classes",
        "suppressed",
        "homogeneous_classes",
        "homogeneous_tuples",
        "nearly_homogeneous_tuples",
        "highest_risk",
        "average_risk",
        "records_at_risk",
        "unique_share",
    ]
    header = "<tr>" + "".join(_header(data, n) for n in names) + "<th>revealed</th></tr>"
    bayes = ["positive_disclosure_tuples", "negative_disclosure_tuples", "rho_breach_tuples"]
    header = header.replace("</tr>", "".join(f"<th>Bayes: {b.replace('_', ' ')}</th>" for b in bayes) + "</tr>")
    rows = "".join(
        "<tr>"
        + "".join(f"<td>{_fmt(getattr(t, n))}</td>" for n in names)
        + f"<td>{html.escape(', '.join(t.revealed_values))}</td>"
        + "".join(f"<td>{_fmt(t.bayes.get(b))}</td>" for b in bayes)
        + "</tr>"
        for t in report.tables
    )
    summary = report.summary()
    return (
        f"<p>Sensitive attribute: <b>{html.escape(report.sensitive)}</b>. {summary['affected_tables']} of "
        f"{summary['tables']} release(s) have a homogeneous class (every tuple the same value).</p>"
        f"<div class='scroll'><table>{header}{rows}</table></div>"
    )


def _risks(data: ReportData) -> str:
    """The re-identification risk of each minimal release, for a job without a sensitive attribute."""
    names = [
        "label",
        "rows",
        "classes",
        "suppressed",
        "highest_risk",
        "average_risk",
        "records_at_risk",
        "unique_share",
    ]
    header = "<tr>" + "".join(_header(data, n) for n in names) + "</tr>"
    rows = "".join(
        "<tr>" + "".join(f"<td>{_fmt(getattr(t, n))}</td>" for n in names) + "</tr>" for t in data.analysis.tables
    )
    return (
        "<p>The job has no sensitive attribute: no attack on a sensitive value applies; the re-identification "
        f"risk of each release follows.</p><div class='scroll'><table>{header}{rows}</table></div>"
    )


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))
