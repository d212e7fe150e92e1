"""`sqlanon report`: one self-contained HTML page, checked in a real (headless) browser."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, ClassVar

import pytest
from rich.progress import Progress, TaskID

import sqlanon.cli as cli
from sqlanon.analysis.report import SECTIONS

from .test_cli import run, write_config

OTHERS = ["marital-status", "education", "native-country", "workclass", "salary-class"]


def _config(tmp_path: Path) -> Path:
    return write_config(tmp_path, sensitive=["occupation"], insensitive=OTHERS)


def _browser() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if found is None:
        message = "no headless browser (Debian package chromium) to render the report"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


class RecordingBar(Progress):
    """The CLI's progress bar, keeping every description it showed."""

    shown: ClassVar[list[str]] = []

    def update(self, task_id: TaskID, **changes: Any) -> None:
        if changes.get("description"):
            self.shown.append(changes["description"])
        super().update(task_id, **changes)


@pytest.fixture(scope="module")
def report_page(tmp_path_factory) -> Path:
    pytest.importorskip("plotly", reason="sqlanon report needs Plotly: pip install 'sqlanon[report]'")
    tmp_path = tmp_path_factory.mktemp("report")
    out = tmp_path / "report.html"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cli, "Progress", RecordingBar)
        result = run("report", str(_config(tmp_path)), "--out", str(out))
    assert result.exit_code == 0, result.output
    return out


def test_the_report_shows_its_steps_on_its_bar(report_page: Path):
    steps = [shown for shown in dict.fromkeys(RecordingBar.shown) if shown.startswith("report: ")]
    expected = ["searching", "attacks, risk and metrics", "the chosen release's classes", "writing the page"]
    assert steps == [f"report: {step}" for step in expected]
    assert "analysis" in RecordingBar.shown  # the inner phase has a line of its own


def test_the_page_is_self_contained(report_page: Path):
    page = report_page.read_text()
    for title in SECTIONS:
        assert f"<h2>{title}</h2>" in page
    # it opens with what the release guarantees in plain words, and names files without the machine's paths
    assert "Every group holds at least 5 records" in page and "highest re-identification risk is" in page
    assert "every one published; the job names no direct identifier, so whether a person has several" in page
    assert "generalized by the hierarchy sex.csv" in page and str(report_page.parent) not in page
    assert str(Path(__file__).parent) not in page and "@media print" in page
    assert re.search(r"sex=\d \(e\.g\. ", page)  # the lattice's minimal nodes name their levels' labels
    # every other point names its levels (the QI names once per trace), a table shows what each level publishes,
    # and the tables of releases say what a node's digits are
    assert page.count('"meta":["sex","age","race"]') >= 3 and "%{meta[2]}=%{customdata[2]}" in page
    assert "<th class='text'>level 4</th>" in page and "<th class='text'>age</th><td class='text'>1, 2, 3</td>" in page
    assert page.count("node (sex, age, race)</th>") == 2
    assert not re.search(r"<script[^>]+src=", page)  # Plotly's JavaScript is inside the page
    assert "Plotly.newPlot" in page and "k_anonymity" in page


def test_the_page_renders_in_a_browser(report_page: Path, tmp_path: Path):
    browser = _browser()
    common = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=5000",
    ]
    dom = subprocess.run(common + ["--dump-dom", report_page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    # Plotly drew every chart (an svg per figure), and the page logged nothing (no error, no warning)
    assert dom.stdout.count('class="main-svg"') >= 8
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line]
    assert console == [], console
    for title in SECTIONS:
        assert title in dom.stdout
    for width in (1280, 1920):  # a laptop's and a desktop's width
        shot = tmp_path / f"report-{width}.png"
        subprocess.run(
            common + [f"--window-size={width},3000", f"--screenshot={shot}", report_page.as_uri()],
            capture_output=True,
            timeout=120,
            check=True,
        )
        assert shot.stat().st_size > 20_000  # a rendered page, not a blank one


# run in the page after it is drawn: how wide the page is, and each element that reaches past the body's right edge
# outside a box that scrolls sideways (the wide tables' .scroll)
MEASURE_OVERFLOW = """<script>window.addEventListener("load", () => setTimeout(() => {
  const edge = document.body.getBoundingClientRect().right + 1;
  const wide = [...document.querySelectorAll("body *")]
    .filter(e => e.getBoundingClientRect().right > edge && !e.closest(".scroll"))
    .map(e => e.tagName + (e.className && e.className.baseVal === undefined ? "." + e.className : ""));
  const out = document.createElement("pre");
  out.id = "overflow";
  out.textContent = JSON.stringify({page: document.documentElement.scrollWidth,
    window: document.documentElement.clientWidth, wide: wide.slice(0, 10)});
  document.body.appendChild(out);
}, 500));</script>"""


@pytest.mark.parametrize("width", [1280, 1920])
def test_nothing_on_the_page_overflows(report_page: Path, tmp_path: Path, width: int):
    """At a laptop's and a desktop's width the page does not scroll sideways and no chart, table or text reaches
    past its column, but inside the boxes made to scroll (wide tables)."""
    measured = tmp_path / "measured.html"
    measured.write_text(report_page.read_text().replace("</body>", MEASURE_OVERFLOW + "</body>"))
    command = [_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000"]
    command += [f"--window-size={width},2000", "--dump-dom", measured.as_uri()]
    dom = subprocess.run(command, capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="overflow">(.*?)</pre>', dom.stdout)
    assert found is not None, dom.stderr[-2000:]
    figures = json.loads(html.unescape(found.group(1)))
    assert figures["window"] > 1000 and figures["page"] <= figures["window"], figures
    assert figures["wide"] == [], figures


def test_a_report_that_cannot_be_written_leaves_nothing(tmp_path: Path):
    config = _config(tmp_path)
    result = run("report", str(config), "--out", str(tmp_path / "missing" / "report.html"))
    assert result.exit_code == 2 and "folder" in result.stderr and "does not exist" in result.stderr
    assert not (tmp_path / "missing").exists()
    unknown = run("report", str(config), "--out", str(tmp_path / "r.html"), "--sensitive", "age")
    assert unknown.exit_code == 2 and "not a sensitive attribute" in unknown.stderr
    assert not (tmp_path / "r.html").exists()


def test_a_job_without_a_sensitive_attribute_gets_a_report_of_its_risk(tmp_path: Path):
    pytest.importorskip("plotly", reason="sqlanon report needs Plotly: pip install 'sqlanon[report]'")
    config = write_config(tmp_path, insensitive=OTHERS + ["occupation"])
    out = tmp_path / "report.html"
    result = run("report", str(config), "--out", str(out))
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert "no attack on a sensitive value applies" in page and "highest risk" in page
    assert "least diverse classes" not in page


def test_the_chosen_release_shows_its_published_classes_only(adult_duck: str):
    """With suppression, the classes the criteria suppress are not published: the chosen release's class sizes
    (and the risk chart drawn from them) and its least diverse classes are the published ones."""
    from sqlanon import Suppression, anonymize
    from sqlanon.criteria import DistinctLDiversity

    from .conftest import adult_job, chosen_release, reclassified

    job = reclassified(
        adult_job(adult_duck, ["sex", "age", "race", "education"], k=10, load_csv=False),
        sensitive=["occupation"],
        suppression=Suppression(0.05),
    )
    job = reclassified(job, criteria=[*job.criteria, DistinctLDiversity("occupation", 3)])
    node, chosen = chosen_release(job)
    sizes, worst = chosen.class_sizes, chosen.worst_classes
    published = anonymize(reclassified(job, output=__import__("sqlanon").Output(table="chosen_classes")), replace=True)
    assert published.node == node
    assert sum(size * classes for size, classes in sizes) == published.audit.rows < 30162
    assert min(size for size, _ in sizes) >= 10
    assert worst and all(len(counts) >= 3 and sum(n for _, n in counts) >= 10 for _, counts in worst)


def test_before_and_after_are_the_tables_and_the_releases_counts(adult_duck: str):
    """The report's distributions: each attribute's most frequent values in the table and in the published
    release, as pandas counts them in the source and in the table `anonymize` writes for the same node."""
    import pandas as pd

    from sqlanon import Output, Suppression, anonymize
    from sqlanon.analysis.releases import DISTRIBUTION_SHOWN

    from .conftest import ADULT_DIR, adult_job, chosen_release, reclassified

    qis = ["sex", "age", "race", "education"]
    job = reclassified(
        adult_job(adult_duck, qis, k=10, load_csv=False), sensitive=["occupation"], suppression=Suppression(0.05)
    )
    node, chosen = chosen_release(job)
    found = chosen.distributions
    release = anonymize(reclassified(job, output=Output(table="before_after")), replace=True)
    assert release.node == node
    source, published = pd.read_csv(ADULT_DIR / "adult.csv.gz", sep=";"), release.frame()

    def top(frame: pd.DataFrame, column: str) -> dict[str, int]:
        counts = frame[column].astype(str).value_counts()
        return {str(v): int(n) for v, n in counts.items() if n >= counts.iloc[min(len(counts), DISTRIBUTION_SHOWN) - 1]}

    for column in qis + ["occupation"]:
        before, after = found[column]
        assert len(before) <= DISTRIBUTION_SHOWN and dict(before).items() <= top(source, column).items(), column
        assert dict(after).items() <= top(published, column).items(), column
        assert [n for _, n in after] == sorted((n for _, n in after), reverse=True)


@pytest.mark.parametrize("method", ["mondrian", "anatomy"])
def test_mondrian_and_anatomy_jobs_get_a_report_of_their_published_table(tmp_path: Path, method: str):
    """A publication without a lattice: the page reads the table the job published (after `anonymize`), says what
    it guarantees in plain words, charts each attribute before and after, and has no lattice."""
    pytest.importorskip("plotly", reason="sqlanon report needs Plotly: pip install 'sqlanon[report]'")
    if method == "mondrian":
        config = write_config(
            tmp_path, sensitive=["occupation"], insensitive=OTHERS, output={"table": "m", "method": "mondrian"}
        )
        guarantee = "Every group holds at least 5 records"
    else:
        config = write_config(
            tmp_path,
            sensitive=["occupation"],
            insensitive=OTHERS,
            quasi_identifiers=["sex", "age", "race"],
            criteria=None,
            output={"table": "a", "method": "anatomy", "l": 3},
        )
        guarantee = "Every bucket holds at least 3 different values of occupation"
    out = tmp_path / "report.html"
    first = run("report", str(config), "--out", str(out))
    assert first.exit_code == 2 and "publish it first" in first.stderr and not out.exists()
    assert run("anonymize", str(config), "--replace").exit_code == 0
    result = run("report", str(config), "--out", str(out))
    assert result.exit_code == 0, result.output
    page = out.read_text()
    titles = re.findall(r"<h2>([^<]+)</h2>", page)
    assert titles == [
        "What this release guarantees",
        "Before and after",
        "The job",
        "The published table",
        "Attacks and risk",
    ]
    assert guarantee in page and f"published by {method} as" in page and "30,162 records, every one published" in page
    assert "occupation (sensitive attribute)" in page and "The lattice" not in page


def test_the_summary_says_whose_records_they_are():
    """One record per person where the job's identifier repeats in no row (every run checks it first), rows
    where the job says `unit: rows`, persons where it names their column, and unknown without an identifier."""
    from sqlanon.analysis.report import ReportData, _who

    job: dict[str, Any] = {"job_name": "j", "settings": [], "guarantees": [], "qi": [], "class_sizes": []}
    person = [("pid", "identifying", "removed")]
    assert _who(ReportData(columns=person, analysis=None, **job)).startswith("one record per person (pid repeats")  # type: ignore[arg-type]
    rows = _who(ReportData(columns=person, unit="rows", analysis=None, **job))  # type: ignore[arg-type]
    assert rows.startswith("the job counts rows, not persons (unit: rows)")
    persons = _who(ReportData(columns=person, unit_column="pid", analysis=None, **job))  # type: ignore[arg-type]
    assert persons.startswith("persons, each counted once whatever their number of records (pid names")
    assert "no direct identifier" in _who(ReportData(columns=[], analysis=None, **job))  # type: ignore[arg-type]
