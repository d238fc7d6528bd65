#!/bin/sh
# Module lane: the package itself.
set -eu
mkdir -p shop
echo '"""A small shop: prices and discounts in cents."""' > shop/__init__.py
