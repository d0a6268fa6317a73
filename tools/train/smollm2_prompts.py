#!/usr/bin/env python3
"""smollm2_prompts.py: the prompt sets of the SmolLM2 family, and the chat instructions (#11).

    .venv/bin/python tools/train/smollm2_prompts.py --corpora DIR --model SMOLLM2.gguf --out prompts

Writes prompts/smollm2-{kjv,web,devil,chat}.jsonl, 200 prompts each. The three text sets are
windows of 16-56 of SmolLM2's tokens (devil: 8-24) cut at word boundaries from the held-out units
(DIR/{name}.units.json, text the drafts never trained on); the chat set is instructions whose
topics are held out from the drafts' training instructions. {"prompt": "...", "tokens": N}, N
counted by the reference tokenizer (tools/ref_tokenize.py) as the engine counts them; a chat line
also has "chat": true: its prompt is the user's message, minions-bench sends it as "messages", and
N counts the ChatML prompt minionsd renders from it.
"""
import argparse
import json
import os
import random
import re
import sys

DOMAINS = ("kjv", "web", "devil", "chat")
PER_SET = 200

TEMPLATES = [
    "What is {t}?", "Explain {t} in simple terms.", "Write a short poem about {t}.",
    "Give me three facts about {t}.", "Why is {t} important?", "Describe {t} to a child.",
    "Write a short story about {t}.", "What are the benefits of {t}?", "How does {t} work?",
    "List five things related to {t}.", "Tell me a joke about {t}.", "What is the history of {t}?",
    "Summarize what you know about {t} in two sentences.", "What are common misconceptions about {t}?",
    "Write a haiku about {t}.", "How can I learn more about {t}?", "Compare {t} with something similar.",
    "What would the world be like without {t}?", "Give me some advice about {t}.",
    "Write a product description for {t}.", "What questions should I ask about {t}?",
    "Describe {t} in one paragraph.", "What is the opposite of {t}?", "Write a limerick about {t}.",
]
TOPICS = [t.strip() for t in """
apples, bicycles, the ocean, volcanoes, friendship, photosynthesis, gravity, the moon, coffee, chess,
rainbows, honey bees, the internet, libraries, mountains, rivers, democracy, music, painting, dogs, cats,
elephants, winter, summer, gardening, bread, cheese, the human heart, sleep, exercise, recycling,
electricity, magnets, clouds, thunderstorms, deserts, forests, penguins, owls, trains, airplanes, ships,
bridges, castles, the pyramids, the Roman Empire, ancient Egypt, the printing press, vaccines, bacteria,
the brain, dreams, memory, kindness, patience, courage, honesty, money, taxes, banks, markets, soap,
water, salt, sugar, chocolate, tea, rice, potatoes, tomatoes, the weather, climate change, solar power,
wind turbines, batteries, computers, robots, algorithms, prime numbers, fractions, geometry, the alphabet,
poetry, novels, the theater, cinema, football, basketball, swimming, running, yoga, meditation,
birthdays, weddings, holidays, maps, compasses, clocks, calendars, the sun, the stars, comets,
black holes, dinosaurs, fossils, earthquakes, islands, lighthouses, languages, grammar, handwriting,
letters, email, telephones, radio, television, newspapers, museums, zoos, parks, cities, villages,
farms, cows, horses, sheep, wolves, foxes, whales, sharks, octopuses, butterflies, spiders, ants, frogs,
snakes, turtles, umbrellas, shoes, hats, kites, balloons, candles, fire, ice, glass, paper, pencils
""".split(",")]


def chat_prompts(split, n, seed):
    """n instructions (template x topic); a topic is in 'train' or in 'heldout', never both."""
    topics = [t for i, t in enumerate(TOPICS) if (i % 5 == 0) == (split == "heldout")]
    rng = random.Random(f"{split}-{seed}")
    return [rng.choice(TEMPLATES).format(t=rng.choice(topics)) for _ in range(n)]


def chatml(messages):
    """SmolLM2's ChatML as minionsd renders it (src/model/chat.c): no default system message."""
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + \
        "<|im_start|>assistant\n"


def encode_chat(bpe, messages):
    """The token ids of a chat prompt: control tokens by their text, the rest as plain text."""
    ids = []
    for part in re.split(r"(<\|im_start\|>|<\|im_end\|>)", chatml(messages)):
        if part in ("<|im_start|>", "<|im_end|>"):
            ids.append(bpe.tokens.index(part))
        elif part:
            ids.extend(bpe.encode(part))
    return ids


def main():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from ref_tokenize import BPE
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    bpe = BPE(a.model)
    ranges = {"kjv": (16, 56), "web": (16, 56), "devil": (8, 24)}
    for d in DOMAINS:
        rng = random.Random(d)
        if d == "chat":
            rows = []
            for q in chat_prompts("heldout", PER_SET, 1):
                rows.append({"prompt": q, "tokens": len(encode_chat(bpe, [{"role": "user", "content": q}])),
                             "chat": True})
        else:
            units = json.load(open(os.path.join(a.corpora, f"{d}.units.json")))
            lo, hi = ranges[d]
            allw = []
            for u in units:
                words, cur, want = re.findall(r"\S+\s*", u), "", rng.randint(lo, hi)
                for w in words:
                    if len(bpe.encode((cur + w).rstrip())) > want and cur:
                        allw.append(cur.rstrip())
                        cur, want = w, rng.randint(lo, hi)
                    else:
                        cur += w
            keep = [allw[i * len(allw) // PER_SET] for i in range(PER_SET)]
            rows = [{"prompt": p, "tokens": len(bpe.encode(p))} for p in keep]
        with open(os.path.join(a.out, f"smollm2-{d}.jsonl"), "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        print(f"smollm2_prompts: {d}: {len(rows)} prompts")


if __name__ == "__main__":
    main()
