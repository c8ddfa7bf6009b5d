#!/usr/bin/env bash
# A real Elasticsearch or OpenSearch (one node, or --nodes N) for local use and the tests, from Maven Central
# jars (engines/pom.xml) started by engines/src/main/java/esrr/engines/Launcher.java: HTTP on
# 127.0.0.1 only, security off (neither engine's security plugin is on the class path), data in a
# temporary folder deleted when it stops (Ctrl-C, SIGTERM). It prints
#   ESRR-ENGINE READY <engine> <version> http://127.0.0.1:<port> <its temporary home folder>
# once it answers. The jars are resolved once into ~/.m2 and engines/target/<engine>-<version>/lib.
#
#   bash scripts/engine.sh elasticsearch [--http-port 9200] [--data DIR] [--nodes 2]
#                                        [--setting thread_pool.write.queue_size=2]
#   bash scripts/engine.sh opensearch [...]
#   bash scripts/engine.sh prepare elasticsearch|opensearch   resolve and compile only, start nothing
#
# ESRR_ELASTICSEARCH_VERSION (7.17.28) and ESRR_OPENSEARCH_VERSION (2.19.3) pick other versions;
# ESRR_ENGINE_HEAP (512m) sets the heap, ESRR_ENGINE_JAVA_HOME the JDK. Needs Java 17 and Maven
# (apt-get install openjdk-17-jdk-headless maven).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
prepare_only=0
if [[ ${1:-} == prepare ]]; then
    prepare_only=1
    shift
fi
engine="${1:-}"
case "$engine" in
    elasticsearch) version="${ESRR_ELASTICSEARCH_VERSION:-7.17.28}" ;;
    opensearch) version="${ESRR_OPENSEARCH_VERSION:-2.19.3}" ;;
    *) echo "usage: $0 [prepare] elasticsearch|opensearch [launcher options]" >&2; exit 2 ;;
esac
shift
# ESRR_ENGINE_JAVA_HOME: another JDK for the node (OpenSearch 3.x needs Java 21+).
if [[ -n ${ESRR_ENGINE_JAVA_HOME:-} ]]; then
    export JAVA_HOME="$ESRR_ENGINE_JAVA_HOME" PATH="$ESRR_ENGINE_JAVA_HOME/bin:$PATH"
fi
for tool in java javac mvn; do
    command -v "$tool" >/dev/null || {
        echo "$tool is missing: apt-get install -y openjdk-17-jdk-headless maven" >&2; exit 3; }
done
target="$root/engines/target"
lib="$target/$engine-$version/lib"
classes="$target/classes"
source="$root/engines/src/main/java/esrr/engines/Launcher.java"
mkdir -p "$target"
# One resolver at a time: two test sessions starting together must not copy into the same folder.
exec 9>"$target/.lock"
flock 9
pom_hash=$(sha256sum "$root/engines/pom.xml" | cut -d' ' -f1)  # a changed pom resolves again
if [[ ! -f $lib/.complete || $(cat "$lib/.complete") != "$pom_hash" ]]; then
    rm -rf "$lib"
    echo "resolving $engine $version from Maven Central into $lib" >&2
    if ! log=$(mvn -q -B -f "$root/engines/pom.xml" -P "$engine" "-D$engine.version=$version" \
            dependency:copy-dependencies "-DoutputDirectory=$lib" 2>&1); then
        echo "$log" >&2
        echo "could not resolve $engine $version from Maven Central (is it published? is the network up?)" >&2
        exit 4
    fi
    echo "$pom_hash" > "$lib/.complete"
fi
if [[ ! -f $classes/esrr/engines/Launcher.class || $source -nt $classes/esrr/engines/Launcher.class ]]; then
    javac -d "$classes" --release 17 "$source"
fi
# Classes built against one engine's jars (Elasticsearch: the pattern analysis its Maven artefacts lack).
engine_sources=("$root/engines/src/$engine/java/esrr/engines/"*.java)
engine_classes="$target/$engine-$version/classes"
if [[ -f ${engine_sources[0]} ]]; then
    stamp="$engine_classes/.built"
    for file in "${engine_sources[@]}"; do
        if [[ ! -f $stamp || $file -nt $stamp ]]; then
            rm -rf "$engine_classes"
            javac -d "$engine_classes" --release 17 -cp "$lib/*" "${engine_sources[@]}"
            touch "$stamp"
            break
        fi
    done
fi
flock -u 9
exec 9>&-
(( prepare_only )) && exit 0
heap="${ESRR_ENGINE_HEAP:-512m}"
exec java "-Xms$heap" "-Xmx$heap" -XX:+UseSerialGC -Xss1m -Djava.awt.headless=true \
    -Dfile.encoding=UTF-8 -Dlog4j2.disable.jmx=true -Dlog4j.shutdownHookEnabled=false \
    -cp "$lib/*:$classes:$engine_classes" esrr.engines.Launcher "$engine" "$@"
