#!/bin/sh
# Wall time of `kleene run` on a 200-task plan of no-op commands against a shell script that
# runs the same 200 commands in order (`sh -c true`, as kleene runs each command).
# Needs hyperfine (apt-get install hyperfine). Usage: sh benches/cli_run.sh [TASKS]
set -eu
tasks=${1:-200}
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release --quiet --manifest-path "$root/Cargo.toml"
kleene="$root/target/release/kleene"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
{
    echo '{"tasks": ['
    i=0
    while [ "$i" -lt "$tasks" ]; do
        after=''
        [ "$i" -gt 0 ] && after="\"t$((i - 1))\""
        sep=','
        [ "$i" -eq $((tasks - 1)) ] && sep=''
        echo "{\"id\": \"t$i\", \"kind\": {\"lane\": \"config\"}, \"owner\": \"shell\","
        echo " \"spec\": {\"intent\": \"no-op $i\"}, \"depends_on\": [$after], \"run\": \"true\"}$sep"
        i=$((i + 1))
    done
    echo ']}'
} > "$work/plan.json"
{
    i=0
    while [ "$i" -lt "$tasks" ]; do
        echo "sh -c true"
        i=$((i + 1))
    done
} > "$work/script.sh"
"$kleene" validate "$work/plan.json" | head -n 1
cd "$work"
hyperfine --warmup 2 --min-runs 10 --export-json "$work/result.json" \
    --prepare 'rm -rf st' \
    "$kleene run plan.json --state st" \
    'sh script.sh'
sed -n 's/.*"mean": \([0-9.]*\).*/\1/p' "$work/result.json" | {
    read -r kleene_mean
    read -r script_mean
    echo "ratio kleene/script: $(echo "$kleene_mean $script_mean" | awk '{ printf "%.2f", $1 / $2 }')"
}
