# Sourced by the command-line benches (POSIX sh): the best of rounds and the spread of paired
# rounds.
# Each round times kleene and its baseline one after the other, so a round's ratio is paired
# against the same moment's load; the best of each alone can come from different moments.

# best BEST NEW: the smaller time, where BEST is 0 before the first round (noise only adds).
best() { if [ "$1" -eq 0 ] || [ "$2" -lt "$1" ]; then echo "$2"; else echo "$1"; fi; }

# ratio A B: A / B, two decimals.
ratio() { echo "$1 $2" | awk '{ printf "%.2f", $1 / $2 }'; }

# spread LIST: "min / median / max" of the numbers in LIST (separated by spaces).
spread() {
    # shellcheck disable=SC2086
    printf '%s\n' $1 | sort -g | awk '
        { v[NR] = $1 }
        END {
            if (NR == 0) { print "-"; exit }
            m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
            printf "%.2f / %.2f / %.2f", v[1], m, v[NR]
        }'
}

# results_table FILE: one table row for each `result: BENCH|MEASURED|TARGET` line in FILE.
results_table() {
    echo
    echo "| bench | measured | target (at most) |"
    echo "| --- | --- | --- |"
    sed -n 's/^result: \(.*\)|\(.*\)|\(.*\)$/| \1 | \2 | \3 |/p' "$1"
}
