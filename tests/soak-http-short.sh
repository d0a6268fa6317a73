#!/bin/sh
# soak-http-short.sh - a short soak of minionsd's OpenAI API in make check (tools/soak-http.py with
# 400 requests from 16 clients, the n-gram drafter speculating: dropped streams, cut requests, bad
# bodies, stalled readers whose KV is taken back, keep-alive; greedy answers the same whatever runs
# beside them, KV and requests back to 0, exit 0 after SIGTERM). Longer runs: tools/soak-http.py.
exec python3 "${MINIONS_SRCDIR:-.}/tools/soak-http.py" --requests "${SOAK_REQUESTS:-400}" --drafts ngram \
  --bin "${MINIONS_BIN_DIR:-.}"
