#!/bin/sh
# The demo's fixer. It knows nothing about tax rates: it repairs billing/vat.sh only from
# the failing assertion that the recovery spec carries on stdin (the same text is in the
# file named by KLEENE_RECOVERY_SPEC_FILE). Without that evidence it cannot do anything.
set -eu
spec=$(cat)
net=$(printf '%s\n' "$spec" | sed -n 's/.*failed: gross \([0-9][0-9]*\).*/\1/p' | head -n 1)
expected=$(printf '%s\n' "$spec" | sed -n 's/.*right: \([0-9][0-9]*\).*/\1/p' | head -n 1)
where=$(printf '%s\n' "$spec" | sed -n 's/.*panicked at \([^ ]*:[0-9][0-9]*\):.*/\1/p' | head -n 1)
if [ -z "$net" ] || [ -z "$expected" ] || [ "$net" -eq 0 ]; then
    echo "fix_vat: no failing gross() assertion in the recovery spec; nothing to go on" >&2
    exit 1
fi
rate=$(( (expected - net) * 100 / net ))
echo "fix_vat: $where expects gross $net = $expected, so VAT_PERCENT=$rate"
cat > billing/vat.sh <<END
# Value-added tax: the gross amount in cents of a net amount in cents.
VAT_PERCENT=$rate
gross() {
    echo \$(( \$1 + \$1 * VAT_PERCENT / 100 ))
}
END
