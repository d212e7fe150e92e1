#!/bin/sh
# Prepare a database for the DBA path: migrate sqlanon's schema, load the bundled Adult data into
# table adult, and register it as job "adult" (9 QIs, k=5, output adult_anon).
#   sh docker/init.sh postgresql+psycopg://postgres@host:5432/db
set -eu
url="$1"
sqlanon migrate --db "$url"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sqlanon example "$work/adult" >/dev/null
# a one-QI job loads the CSV into table adult (a registered job reads tables, not files)
sed -e '/^quasi_identifiers:/,/^criteria:/{/^quasi_identifiers:\|^  [a-z-]*: {hierarchy/d}' \
    -e 's/^name: adult$/name: adult-load/' \
    -e 's/^criteria:/quasi_identifiers:\n  sex: {hierarchy: hierarchies\/sex.csv}\ncriteria:/' \
    "$work/adult/adult.yaml" > "$work/adult/load.yaml"
sqlanon search "$work/adult/load.yaml" --db "$url" --json >/dev/null
grep -v '^  csv' "$work/adult/adult.yaml" > "$work/adult/job.yaml"
sqlanon job register adult "$work/adult/job.yaml" --db "$url"
echo "ready: psql, then CALL sqlanon.run_job('adult'); or: sqlanon job run adult --db $url"
