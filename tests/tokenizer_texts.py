#!/usr/bin/env python3
"""Print the tokenizer test texts as JSON lines: tricky cases by hand, then paragraphs of real text."""
import glob
import json

CASES = [
    "", "a", " ", "  ", "   leading", "trailing   ", "a  b", "a \nb", "a\n b", "a\t\tb\n\n\nc",
    "don't you're we've I'm they'll she'd it's", "'s 'S 'tis ''quoted''", "DON'T SHOUT'S",
    "x = 12345 + 67.89e-3;", "2026-11-22 12:00:00", "phone: 555-0100, 1,234,567.00",
    "naïve café résumé Ærøskøbing", "Ελληνικά και русский текст", "中文字符和日本語のテキスト",
    "emoji 😀🚀 and symbols ∑∫√ ©®", "tabs\tand\u00a0nbsp\u2003em space\u3000ideographic",
    "mixed123abc456", "¹²³ ½ Ⅻ ٣٤٥", "line\r\nwindows\rmac", "...!!!???---___", "@#$%^&*()[]{}<>",
    "\u0085next line \u2028sep", "a" * 300, " " * 200 + "x", "ab" * 150, "hello\x00world\x01\x04",
]


def paragraphs():
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        try:
            text = open(path, encoding="utf-8").read()
        except (OSError, UnicodeDecodeError):
            continue
        for para in text.split("\n\n")[:12]:
            if para.strip():
                yield para


for t in CASES + list(paragraphs()):
    print(json.dumps(t))
