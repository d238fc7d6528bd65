#!/bin/sh
# One task that owns and writes N files (default 100000), end to end through `kleene run`
# and `kleene accept`: the plan lists every file in `owned_paths`, so the plan loader, the
# stage walk, the ownership check and acceptance all see N paths. Before the staged
# workspaces this took 13 min at 100k (owned paths x candidate files).
# Usage: sh benches/cli_many_files.sh [N]   (WORK=DIR: plan and state under DIR, default
# /dev/shm, to measure on a disk; KLEENE_BASELINE=/old/kleene times that binary's run too)
set -eu
n=${1:-100000}
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release --quiet --manifest-path "$root/Cargo.toml"
kleene="$root/target/release/kleene"
work=$(mktemp -d "${WORK:-/dev/shm}/kleene-many.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
python3 - "$n" <<'PY'
import json, sys
n = int(sys.argv[1])
task = {"id": "many", "owner": "shell", "spec": {"intent": f"write {n} files"},
        "owned_paths": [f"out/d{i // 1000}/f{i}" for i in range(n)],
        "run": f"python3 -c \"import os\nfor i in range({n}):\n    d = f'out/d{{i // 1000}}'\n    os.makedirs(d, exist_ok=True)\n    open(f'{{d}}/f{{i}}', 'w').write(str(i))\"",
        "timeout_secs": 600}
json.dump({"inputs": [], "tasks": [task]}, open("plan.json", "w"))
PY
now() { date +%s%N; }
t0=$(now); python3 -c "
import os
for i in range($n):
    d = f'ws/out/d{i // 1000}'
    os.makedirs(d, exist_ok=True)
    open(f'{d}/f{i}', 'w').write(str(i))"; t1=$(now)
"$kleene" run plan.json --state st > /dev/null; t2=$(now)
"$kleene" accept --state st > /dev/null; t3=$(now)
echo "N=$n: the command alone $(( (t1 - t0) / 1000000 )) ms; kleene run $(( (t2 - t1) / 1000000 )) ms; kleene accept $(( (t3 - t2) / 1000000 )) ms (in ${WORK:-/dev/shm})"
if [ -n "${KLEENE_BASELINE:-}" ]; then
    rm -rf st; t4=$(now); "$KLEENE_BASELINE" run plan.json --state st > /dev/null; t5=$(now)
    echo "N=$n: baseline kleene run $(( (t5 - t4) / 1000000 )) ms"
fi
