#!/usr/bin/env bash
# Three .ci/run in a row on fresh clones of one commit, under two CPU hogs and a fork loop (the
# load issue 41 asks the suite to hold under); stops at the first failure. Usage: scripts/ci-under-load.sh COMMIT
# (results in /tmp/ci3.results). Each run takes 33–50 minutes on 2 cores.
commit=$1
for n in ${RUNS:-a b c}; do
  root=/tmp/ciroot-$n
  rm -rf "$root"; mkdir -p "$root"
  git clone -q /work/main "$root/main" && git -C "$root/main" checkout -q "$commit"
  cp -r /work/shared "$root/shared"; chmod -R a-w "$root/shared"
  ( timeout 5400 sh -c 'while :; do :; done' ) & h1=$!
  ( timeout 5400 sh -c 'while :; do :; done' ) & h2=$!
  ( timeout 5400 sh -c 'while :; do sh -c true; done' ) & f=$!
  start=$(date +%s)
  ( cd "$root/main" && CI=true bash .ci/run < /dev/null ) > "$root/ci.log" 2>&1
  rc=$?
  end=$(date +%s)
  kill $h1 $h2 $f 2>/dev/null; pkill -P $h1; pkill -P $h2; pkill -P $f
  echo "run $n at $commit: rc=$rc in $((end-start)) s (started $(date -d @$start +%H:%M))" >> /tmp/ci3.results
  [ $rc -eq 0 ] || exit 1
done
