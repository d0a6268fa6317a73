#!/bin/sh
# soak-short.sh - a short soak of minionsd in make check (tools/soak.sh with 300 requests: random
# cancels, disconnects, half-closes, bad lines, slow readers; every request answered exactly once,
# KV back to 0, exit 0 after SIGTERM). The 10,000-request run is `sh tools/soak.sh`.
REQUESTS=${SOAK_REQUESTS:-300} exec sh "${MINIONS_SRCDIR:-.}/tools/soak.sh"
