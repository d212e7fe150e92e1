"""`python -m sqlanon.cli`: the same command line as the `sqlanon` script (kept from when the CLI was a module)."""

from . import main

main(prog_name="sqlanon")
