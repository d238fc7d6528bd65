#!/bin/sh
# The fixer knows nothing about discounts: it reads pytest's failing assertion from the
# recovery spec on stdin (`assert 9500 == 9000` and `where 9500 = member_price(10000)`) and
# derives the percentage that makes it pass.
set -eu
spec=$(cat)
expected=$(printf '%s\n' "$spec" | sed -n 's/.*assert [0-9][0-9]* == \([0-9][0-9]*\).*/\1/p' | head -n 1)
net=$(printf '%s\n' "$spec" | sed -n 's/.*member_price(\([0-9][0-9]*\)).*/\1/p' | tail -n 1)
if [ -z "$expected" ] || [ -z "$net" ] || [ "$net" -eq 0 ]; then
    echo "fix_discount: no failing member_price assertion in the recovery spec" >&2
    exit 1
fi
percent=$(( (net - expected) * 100 / net ))
echo "fix_discount: member_price($net) must be $expected, so MEMBER_DISCOUNT_PERCENT=$percent"
sed "s/^MEMBER_DISCOUNT_PERCENT = .*/MEMBER_DISCOUNT_PERCENT = $percent/" shop/pricing.py > shop/pricing.py.new
mv shop/pricing.py.new shop/pricing.py
