#!/bin/sh
# soak-spec-short.sh - soak-short.sh against a speculating minionsd (a draft model and the n-gram
# drafter): cancels, disconnects, bad lines and preemption then land on requests at every stage of a
# draft round, greedy and seeded repeats must still give one text each (plain decoding's), the done
# lines' spec figures must agree, and the drafts' KV must come back to 0 with the target's.
REQUESTS=${SOAK_REQUESTS:-300} DRAFTS="models/draft-kjv.gguf ngram" exec sh "${MINIONS_SRCDIR:-.}/tools/soak.sh"
