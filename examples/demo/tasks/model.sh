#!/bin/sh
# Model lane: the invoice's line items (name, quantity, unit price in cents).
set -eu
mkdir -p billing
cat > billing/items.sh <<'END'
# Invoice line items: name, quantity, unit price in cents.
ITEMS='widget 2 2500
gadget 1 5000'
END
echo "wrote billing/items.sh"
