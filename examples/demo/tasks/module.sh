#!/bin/sh
# Module lane: lays out the billing module and says what it provides.
set -eu
mkdir -p billing
cat > billing/MODULE <<'END'
name=billing
provides=model service page
END
echo "wrote billing/MODULE"
