#!/bin/sh
# Service lane: VAT arithmetic, the invoice total and their unit tests.
# The first draft carries a wrong rate; the unit tests catch it.
set -eu
mkdir -p billing/tests
cat > billing/vat.sh <<'END'
# Value-added tax: the gross amount in cents of a net amount in cents.
VAT_PERCENT=7
gross() {
    echo $(( $1 + $1 * VAT_PERCENT / 100 ))
}
END
cat > billing/invoice.sh <<'END'
# Prints the invoice's net total in cents.
. billing/items.sh
net_total() {
    total=0
    while read -r _name quantity price; do
        total=$(( total + quantity * price ))
    done <<ITEMS
$ITEMS
ITEMS
    echo "$total"
}
END
cat > billing/tests/vat_test.sh <<'END'
#!/bin/sh
# Unit tests for billing/vat.sh, reported the way a Rust test harness reports.
. billing/vat.sh
passed=0
failed=0
failures=''
names=''
check() {
    name=$1 line=$2 call=$3 expected=$4
    actual=$(eval "$call")
    if [ "$actual" = "$expected" ]; then
        echo "test $name ... ok"
        passed=$(( passed + 1 ))
    else
        echo "test $name ... FAILED"
        failed=$(( failed + 1 ))
        names="$names    $name
"
        failures="$failures
---- $name stdout ----
thread '$name' panicked at billing/tests/vat_test.sh:$line:
assertion \`left == right\` failed: $call
  left: $actual
 right: $expected
"
    fi
}
echo 'running 3 tests'
check vat::zero_stays_zero 29 'gross 0' 0
check vat::standard_rate 30 'gross 10000' 12000
check vat::rounds_down 31 'gross 1' 1
echo
if [ "$failed" -gt 0 ]; then
    printf 'failures:\n%s\nfailures:\n%s\n' "$failures" "$names"
    echo "test result: FAILED. $passed passed; $failed failed"
    exit 101
fi
echo "test result: ok. $passed passed; 0 failed"
END
echo "wrote billing/vat.sh billing/invoice.sh billing/tests/vat_test.sh"
