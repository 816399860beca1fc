#!/bin/sh
# Digested into skills.lock.json but never read or run by modu.
echo "checking totals"
