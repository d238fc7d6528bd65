#!/bin/sh
# Service lane: member pricing and its tests. The first draft applies 5 % instead of the
# advertised 10 %; pytest catches it.
set -eu
mkdir -p tests
cat > shop/pricing.py <<'END'
"""Member pricing, in whole cents."""

MEMBER_DISCOUNT_PERCENT = 5


def member_price(net_cents: int) -> int:
    """What a member pays for an order of `net_cents`."""
    return net_cents - net_cents * MEMBER_DISCOUNT_PERCENT // 100
END
cat > tests/test_pricing.py <<'END'
from shop.pricing import member_price


def test_nothing_costs_nothing():
    assert member_price(0) == 0


def test_members_get_the_advertised_discount():
    assert member_price(10000) == 9000
END
