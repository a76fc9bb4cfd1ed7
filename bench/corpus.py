"""Seeded generator of mixed-text tokenizer test and benchmark corpora.

One generator for both the tokenizer integration test (tests/integration/test_tokenizer.py,
which compares token ids with Hugging Face `tokenizers`) and the benchmarks
(bench/tokenizer_hf.py writes the corpus file bench/tokenizer_bench.cc reads).

    python bench/corpus.py OUT.txt [--count N] [--seed S]

writes N strings as JSON lines (strings hold newlines).
"""
import argparse
import json
import random

WORDS = ("the of and to in is was for that with as on by at from it an be this which or are "
         "have not but had his they were her she he you one all would there their what so up "
         "out if about who get make can like time no just him know take people into year your "
         "good some could them see other than then now look only come its over think also back "
         "after use two how our work first well way even new want because any these give day "
         "most us tokenizer model server inference streaming gradient tensor parallel").split()
CONTRACTIONS = ["don't", "I'm", "you're", "we've", "she'll", "he'd", "it's", "THEY'RE",
                "Can't", "WON'T", "y'all", "o'clock", "rock'n'roll", "'s", "'t", "'LL"]
CODE = [
    "def f(x):\n    return x ** 2 + 1\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    "if __name__ == \"__main__\":\n    main()\n",
    "#include <vector>\nstd::vector<int> v{1, 2, 3};\n",
    "SELECT id, name FROM users WHERE age >= 21 ORDER BY name;",
    "const x = await fetch(`/api/v1/items?id=${id}`);",
    "    \t  // indented comment with trailing spaces   \n",
    "x=[i for i in range(10) if i%2==0]#comment",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "<div class=\"a b\">&amp;&lt;tag&gt;</div>",
    "$ ls -la /usr/lib | grep '^d' > out.txt 2>&1",
]
CJK = ["你好，世界！", "机器学习是人工智能的一个分支。", "東京都に住んでいます。", "カタカナとひらがな",
       "한국어 텍스트입니다.", "漢字かな交じり文", "中文标点：“引号”、《书名》……", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ１２３"]
EMOJI = ["😀", "🎉", "👍🏽", "👩🏿‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇫🇷🇯🇵", "🧑🏻‍🤝‍🧑🏾",
         "☕", "🤷‍♂️", "1️⃣", "🫠", "🐈‍⬛", "✌🏼"]
COMBINING = ["e\u0301", "n\u0303", "a\u0308\u0304", "Tiếng Việt có dấu", "नमस्ते दुनिया",
             "مَرْحَبًا بِالْعَالَم", "Z\u0351\u036b\u0343a\u0310l\u0352g\u0301o", "ḱ̷̢", "각\u1161"]
SCRIPTS = ["Привет, мир!", "Γειά σου Κόσμε", "שלום עולם", "สวัสดีชาวโลก", "Բարեւ", "ქართული",
           "Ελληνικά και English mixed", "αβγ123δεζ", "Ⅻ ② ¾ ²³ ٣٤٥ ०१२", "Straße Ǆ ǅ ǆ ﬁ"]
WHITESPACE = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", " \n ", "\u00a0",
              "\u3000", "\u2028", "\u0085", "\u200b", " \t \n", "\r", "\x0b\x0c", "     \n\t  "]
PUNCT = [".", ",", "!", "?", "...", "--", "—", "(", ")", "[", "]", "{", "}", "\"", "'", ":", ";",
         "@", "#", "$", "%", "^", "&", "*", "~", "`", "|", "\\", "/", "<", ">", "=", "+", "_"]


def _prose(rng):
    n = rng.randint(3, 30)
    out = []
    for i in range(n):
        w = rng.choice(WORDS) if rng.random() < 0.85 else rng.choice(CONTRACTIONS)
        if i == 0 or rng.random() < 0.1:
            w = w.capitalize()
        if rng.random() < 0.05:
            w = w.upper()
        out.append(w)
        if rng.random() < 0.1:
            out[-1] += rng.choice(PUNCT)
    return " ".join(out) + rng.choice([".", "!", "?", "", "\n"])


def _digits(rng):
    return rng.choice([
        str(rng.randint(0, 10 ** rng.randint(1, 40))),
        f"{rng.randint(0, 10**6):,}",
        f"{rng.random() * 1000:.{rng.randint(1, 8)}f}",
        f"{rng.randint(1900, 2100)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
        "0x" + "".join(rng.choice("0123456789abcdef") for _ in range(rng.randint(1, 16))),
        " " + "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 60))),
    ])


def _random_codepoints(rng):
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
              (0x900, 0x97F), (0x1100, 0x11FF), (0x2000, 0x206F), (0x2190, 0x23FF),
              (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xE000, 0xE0FF),
              (0xFE00, 0xFE0F), (0xFF00, 0xFFEF), (0x1F300, 0x1FAFF), (0x20000, 0x2A6DF),
              (0x1D400, 0x1D7FF), (0x10000, 0x1007F), (0xE0000, 0xE007F)]
    out = []
    for _ in range(rng.randint(1, 20)):
        lo, hi = rng.choice(ranges)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def generate(count, seed=1234, special_tokens=()):
    """`count` strings, deterministic for a seed. `special_tokens` are sprinkled inside
    some of them (and partial prefixes of them)."""
    rng = random.Random(seed)
    specials = list(special_tokens)
    pools = [
        lambda: _prose(rng),
        lambda: rng.choice(CODE),
        lambda: rng.choice(CJK),
        lambda: rng.choice(EMOJI) * rng.randint(1, 3),
        lambda: rng.choice(COMBINING),
        lambda: rng.choice(SCRIPTS),
        lambda: rng.choice(WHITESPACE) * rng.randint(1, 4),
        lambda: _digits(rng),
        lambda: _random_codepoints(rng),
        lambda: rng.choice(PUNCT) * rng.randint(1, 5),
    ]
    weights = [30, 10, 8, 8, 6, 6, 10, 10, 5, 5]
    out = ["", " ", "\n", "hello", " hello", "Hello world", "12345678901234567890", "\r\n\r\n",
           "   leading and trailing   ", "a\u0085b"]
    while len(out) < count:
        parts = []
        for _ in range(rng.randint(1, 8)):
            parts.append(rng.choices(pools, weights)[0]())
            if rng.random() < 0.4:
                parts.append(rng.choice(WHITESPACE) if rng.random() < 0.3 else " ")
            if specials and rng.random() < 0.08:
                tok = rng.choice(specials)
                parts.append(tok if rng.random() < 0.8 else tok[: rng.randint(1, len(tok) - 1)])
        out.append("".join(parts))
    return out[:count]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()
    with open(args.out, "w", encoding="utf-8") as f:
        for s in generate(args.count, args.seed):
            f.write(json.dumps(s, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
