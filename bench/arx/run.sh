#!/usr/bin/env bash
# ARX's times for bench_search.py's Adult jobs, measured on this machine (see ArxBench.java).
#
#   bash bench/arx/run.sh ARX_SOURCE [REPEAT]
#   bash bench/arx/run.sh ARX_SOURCE RUNS dp     # ARX's differential privacy cases (ArxDp.java) -> dp.tsv
#
# ARX_SOURCE: a checkout of https://github.com/arx-deidentifier/arx (its lib/ant holds the jars it needs).
# Needs a JDK 17+. Writes bench/out/arx/figures.tsv, which bench_search.py shows beside its own figures, and
# bench/out/arx/lattices.tsv, the lattices ARX tagged, which compare_arx.py checks sqlanon's answers against.
# ARX's PDF certificates are left out, and the two classes of its PDF and Hadoop libraries that its
# anonymization code names without using are compiled as empty stand-ins.
set -euo pipefail
src=$(cd "$1" && pwd)
repeat=${2:-15}
here=$(cd "$(dirname "$0")" && pwd)
out="$here/../out/arx"
mkdir -p "$out/stubs/org/apache/pdfbox/pdmodel/font" "$out/stubs/org/apache/hadoop/io" "$out/classes"
echo 'package org.apache.pdfbox.pdmodel; public class PDDocument {}' > "$out/stubs/org/apache/pdfbox/pdmodel/PDDocument.java"
echo 'package org.apache.pdfbox.pdmodel.font; public class PDFont {}' > "$out/stubs/org/apache/pdfbox/pdmodel/font/PDFont.java"
echo 'package org.apache.hadoop.io; public interface Writable { void write(java.io.DataOutput o) throws java.io.IOException;
  void readFields(java.io.DataInput i) throws java.io.IOException; }' > "$out/stubs/org/apache/hadoop/io/Writable.java"
libs=$(find "$src/lib/ant" -name '*.jar' | tr '\n' ':')
if [ ! -f "$out/classes/org/deidentifier/arx/ARXAnonymizer.class" ]; then
  echo "compiling ARX from $src ..." >&2
  javac -nowarn -encoding UTF-8 -d "$out/stubs" $(find "$out/stubs" -name '*.java')
  javac -nowarn -encoding UTF-8 -cp "$libs$out/stubs" -d "$out/classes" \
    $(find "$src/src/main" -name '*.java' | grep -v -e /certificate/ARXCertificate.java -e /certificate/resources/Watermark.java) \
    2> "$out/javac.log" || { cat "$out/javac.log" >&2; exit 1; }
  (cd "$src/src/main" && find . -type f ! -name '*.java' -exec cp --parents {} "$out/classes/" \;)
fi
adult="$here/../../sqlanon/data/adult"
gzip -dc "$adult/adult.csv.gz" > "$out/adult.csv"
if [ "${3:-}" = dp ]; then  # bench_dp.py reads dp.tsv: ARX's k for (epsilon, delta), and RUNS runs of each case
  javac -nowarn -cp "$libs$out/classes" -d "$out" "$here/ArxDp.java"
  java -cp "$libs$out/classes:$out" ArxDp "$out/adult.csv" "$adult/hierarchies" "$repeat" > "$out/dp.tsv"
  exit 0
fi
javac -nowarn -cp "$libs$out/classes" -d "$out" "$here/ArxBench.java"
java -cp "$libs$out/classes:$out" ArxBench "$out/adult.csv" "$adult/hierarchies" "$repeat" "$out/lattices.tsv" \
  | tee "$out/figures.tsv"
