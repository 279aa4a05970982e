#!/usr/bin/env python3
"""Renders the chat-template cases with transformers' apply_chat_template (the oracle) and writes
crates/text/tests/data/templates/renders.json, which crates/text/tests/template.rs replays.

No network: the tokenizer object is an empty HF BPE wrapped in PreTrainedTokenizerFast with the
template set, which is all apply_chat_template needs to render text.
"""

import json
import os

import transformers
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "crates", "text", "tests", "data", "templates")
TEMPLATES = ["Qwen3.5-4B.jinja", "Qwen-Qwen3-0.6B.jinja"]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city. Says \"sunny\" & <b>bold</b> things; é ü 中文",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7.5},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Web search",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    },
}


def m(role, content, **kw):
    d = {"role": role, "content": content}
    d.update(kw)
    return d


def call(name, args):
    return {"type": "function", "function": {"name": name, "arguments": args}}


SYS = m("system", "You are a helpful assistant.")
CASES = [
    ("user_only_gen", dict(messages=[m("user", "Hello!")], add_generation_prompt=True)),
    ("system_user_gen", dict(messages=[SYS, m("user", "What is 2+2?")], add_generation_prompt=True)),
    ("thinking_off", dict(messages=[SYS, m("user", "Hi")], add_generation_prompt=True, enable_thinking=False)),
    ("thinking_on", dict(messages=[SYS, m("user", "Hi")], add_generation_prompt=True, enable_thinking=True)),
    ("no_gen_prompt", dict(messages=[SYS, m("user", "Hi"), m("assistant", "Hello! How can I help?")])),
    (
        "multi_turn",
        dict(
            messages=[
                SYS,
                m("user", "Name a prime."),
                m("assistant", "7."),
                m("user", "Another one, please.\nThanks!"),
            ],
            add_generation_prompt=True,
        ),
    ),
    (
        "reasoning_content",
        dict(
            messages=[
                m("user", "First question"),
                m("assistant", "First answer", reasoning_content="old thoughts"),
                m("user", "Second question"),
                m("assistant", "Second answer", reasoning_content="\nnew thoughts\n"),
            ]
        ),
    ),
    (
        "inline_think",
        dict(
            messages=[
                m("user", "q1"),
                m("assistant", "<think>\nhidden\n</think>\n\nvisible"),
                m("user", "q2"),
                m("assistant", "<think>\nshown since after last query\n</think>\n\nfinal"),
            ],
            add_generation_prompt=False,
        ),
    ),
    ("tools_defs", dict(messages=[SYS, m("user", "Weather in Paris?")], tools=[WEATHER, SEARCH], add_generation_prompt=True)),
    ("tools_no_system", dict(messages=[m("user", "Weather in Paris?")], tools=[WEATHER], add_generation_prompt=True)),
    (
        "tool_calls",
        dict(
            messages=[
                SYS,
                m("user", "Weather in Paris and Rome?"),
                m(
                    "assistant",
                    "Let me check.",
                    tool_calls=[
                        call("get_weather", {"city": "Paris", "unit": "celsius"}),
                        call("get_weather", {"city": "Rome", "days": 3, "extra": {"a": [1, 2]}, "flags": ["x", "y"]}),
                    ],
                ),
                m("tool", "{\"temp\": 21}", tool_call_id="c1", name="get_weather"),
                m("tool", "{\"temp\": 25}", tool_call_id="c2", name="get_weather"),
                m("assistant", "Paris 21, Rome 25."),
                m("user", "Thanks"),
            ],
            tools=[WEATHER],
            add_generation_prompt=True,
        ),
    ),
    (
        "tool_call_no_content",
        dict(
            messages=[
                m("user", "Search cats"),
                m("assistant", "", tool_calls=[call("search", {"q": "cats"})]),
                m("tool", "cats are great"),
            ],
            tools=[SEARCH],
            add_generation_prompt=True,
        ),
    ),
    (
        "content_parts",
        dict(messages=[m("user", [{"type": "text", "text": "part one "}, {"type": "text", "text": "part two"}])], add_generation_prompt=True),
    ),
    ("unicode_and_specials", dict(messages=[m("user", "  ünïcödé 中文 😀\n\ttabs  ")], add_generation_prompt=True)),
    ("error_no_messages", dict(messages=[], add_generation_prompt=True)),
    ("error_system_late", dict(messages=[m("user", "a"), SYS], add_generation_prompt=True)),
]


def main():
    out = {"about": f"Generated by tools/text/make_template_renders.py with transformers {transformers.__version__}", "cases": []}
    for name in TEMPLATES:
        src = open(os.path.join(DATA, name), encoding="utf-8").read()
        tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()), chat_template=src)
        for case, req in CASES:
            kw = {k: v for k, v in req.items() if k != "messages"}
            entry = {"template": name, "case": case, "request": req}
            try:
                entry["expected"] = tok.apply_chat_template(req["messages"], tokenize=False, **kw)
            except Exception as e:  # the template's raise_exception
                entry["error"] = str(e)
            out["cases"].append(entry)
    with open(os.path.join(DATA, "renders.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(len(out["cases"]), "cases")


if __name__ == "__main__":
    main()
