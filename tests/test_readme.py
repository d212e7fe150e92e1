"""The README's quick start, run as a newcomer would: every sqlanon command of its shell blocks."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from click.testing import CliRunner

from sqlanon.cli import main

README = Path(__file__).parent.parent / "README.md"


def quick_start_commands() -> list[list[str]]:
    """The `sqlanon ...` commands of the shell blocks in the Quick start section, in order."""
    section = README.read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.S):
        for line in block.splitlines():
            for part in line.split("&&"):
                words = shlex.split(part, comments=True)
                if words[:1] == ["sqlanon"]:
                    commands.append(words[1:])
    return commands


def test_the_quick_start_commands_run(tmp_path: Path, monkeypatch):
    commands = quick_start_commands()
    assert ["demo"] in commands and any(c[:1] == ["anonymize"] for c in commands)
    monkeypatch.chdir(tmp_path)
    for args in commands:
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, (args, result.output)
    assert (tmp_path / "sqlanon-demo.duckdb").exists() and (tmp_path / "my-job" / "adult.yaml").exists()
