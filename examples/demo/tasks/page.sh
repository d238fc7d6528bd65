#!/bin/sh
# Page lane: renders the invoice from the accepted model and service.
set -eu
. billing/vat.sh
. billing/invoice.sh
net=$(net_total)
due=$(gross "$net")
money() { printf '%d.%02d' $(( $1 / 100 )) $(( $1 % 100 )); }
mkdir -p site
cat > site/index.html <<END
<!doctype html>
<title>Invoice</title>
<p>Net: $(money "$net")</p>
<p>VAT: ${VAT_PERCENT}%</p>
<p>Total due: $(money "$due")</p>
END
echo "wrote site/index.html"
