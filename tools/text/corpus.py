"""The tokenizer test corpus, shared by make_fixtures.py (which writes it to
crates/text/tests/data/corpus.json with the expected ids) and nothing else: edit here, rerun.

Each entry is one encode call. Special tokens appear literally; the Rust tests encode with
parse_special on (and check the same text with it off). Byte strings (invalid UTF-8) are listed
separately: JSON cannot hold them and HF tokenizers cannot take them.
"""

TEXT = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog. It's 5 o'clock; we'll see, they're fine, I'd go, you've won, I'M LOUD, DON'T.",
    "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "fn main() {\n\tlet v: Vec<u32> = (0..10).map(|x| x * x).collect();\n\tprintln!(\"{v:?}\");\n}\n",
    "<div class=\"a&b\">x &lt; y</div>  // comment /* block */ #include <stdio.h>",
    "3.14159265358979323846264338327950288419716939937510 and 1,000,000 and 2026-12-01T15:45:00Z",
    "00000000000000000000000000000000000000000000000000000000000000000000000000000000",
    "12345678901234567890123456789012345678901234567890",
    "   leading spaces, trailing spaces   ",
    "a  b   c    d     e      f\t\tg \t h\t \ti",
    "                                                                  ",
    "line one\r\nline two\r\n\r\nline four\n\n\n\nend\r",
    " \n \n\n  \r\n\t\n x",
    "tabs\tin\tthe\tmiddle\t\t\t",
    "emoji: 😀 😃 👍🏽 🇩🇪 🏳️‍🌈 👨‍👩‍👧‍👦 🧑🏿‍💻 ❤️‍🔥",
    "👩‍🔬👩‍🔬👩‍🔬",
    "中文分词测试：我们今天去公园散步，天气很好。日本語のテキストも少し。한국어 문장도 있습니다.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю. ЁЛКА ёлка",
    "ភាសាខ្មែរ គឺជាភាសាផ្លូវការរបស់ប្រទេសកម្ពុជា។",
    "العربية لغة جميلة، وهي مكتوبة من اليمين إلى اليسار. ١٢٣٤٥",
    "हिन्दी भाषा में संयुक्ताक्षर और मात्राएँ",
    "Ελληνικά: Τάχιστη αλώπηξ βαφής ψημένη γη, δρασκελίζει υπέρ νωθρού κυνός",
    "Ünïcödé àccénts: café naïve résumé Åström Ærø Øre ß ẞ ŉ ǅ",
    "mixed 日本 and English and русский in one line 123abc",
    "symbols: ™ © ® ° ± × ÷ ≠ ≤ ≥ ∞ ∑ ∏ √ ∫ → ⇒ ★ ♠ ♣ ♥ ♦ €£¥₹",
    "zero\u200bwidth\u200cjoiner\u200dand\ufeffbom and nbsp\u00a0here and ideographic\u3000space",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D ' x'",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "<|im_start|><|im_end|><|endoftext|>",
    "text<|im_end|>text <|im_start|> spaced <|endoftext|>\n",
    "<think>\nreasoning here\n</think>\n\nanswer",
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
    "<|im_start <|im_end| |im_start|> <| im_end |>",
    "",
    " ",
    "\n",
    "\t",
    "a",
    "ü",
    "Combining: e\u0301 a\u0300 n\u0303 (decomposed) vs é à ñ (composed)",
    "\u212b angstrom sign, \u2126 ohm sign, \ufb01 ligature",
]

# Invalid UTF-8 for the byte paths (encode_bytes / decode / streaming), as hex.
BYTES = [
    "48656c6c6fff776f726c64",  # Hello\xffworld
    "e282",  # truncated euro sign
    "e282414243",  # truncated then ASCII
    "c3",  # lone lead byte
    "80808080",  # lone continuation bytes
    "f09f9880f09f",  # emoji then truncated emoji
    "666f6fc3a9c328626172",  # valid é then invalid c3 28
]
