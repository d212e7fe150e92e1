#!/bin/sh
# Prepare a database for the DBA path: migrate sqlanon's schema, load the bundled Adult data into
# table adult, and register it as job "adult" (9 QIs, k=5, output adult_anon). Safe to run again
# (each `docker compose up` does): the schema is upgraded in place, the table reloaded, the job replaced.
#   sh docker/init.sh postgresql+psycopg://postgres@host:5432/db
set -eu
url="$1"
# the server's Python imports sqlanon from the folder this sqlanon is installed in (the image's venv, which the
# server's container has too); only a superuser may set it
site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# the server may still be starting: wait for it (up to a minute) before the first statement
tries=0
until sqlanon migrate --db "$url" --python-path "$site"; do
    tries=$((tries + 1))
    [ "$tries" -lt 30 ] || { echo "the database at $url did not answer; is the postgres service up?" >&2; exit 1; }
    sleep 2
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sqlanon example "$work/adult" >/dev/null
sqlanon load "$work/adult/adult.csv.gz" --table adult --delimiter ';' --replace --db "$url"
# a registered job reads the table just loaded, not the file: drop the source.csv lines
grep -v '^  csv' "$work/adult/adult.yaml" > "$work/adult/job.yaml"
sqlanon job register adult "$work/adult/job.yaml" --db "$url"
echo "ready: psql, then CALL sqlanon.run_job('adult'::text); or: sqlanon job run adult --db $url"
