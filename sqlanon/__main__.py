"""`python -m sqlanon`: the same command line as the `sqlanon` script."""

from .cli import main

main(prog_name="sqlanon")
