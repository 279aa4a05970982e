#!/usr/bin/env python3
"""End-to-end check of a running `tally serve` with real clients: the `openai` package and curl,
streaming and not, the error codes, then a bounded load test (N concurrent streams for T seconds).

Usage: e2e.py --base-url http://127.0.0.1:PORT --model NAME [--streams 8] [--seconds 20]
              [--summary FILE]

Exits non-zero on the first failed check. The load test requires every request to be answered
(200, or 429 when the queue is full), none lost or hung; it prints p50/p99 time to first token
and decode tokens/s, and writes them to --summary as JSON.
"""

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time

import openai


def check(cond, what):
    if not cond:
        raise SystemExit(f"e2e: FAILED: {what}")
    print(f"e2e: ok: {what}")


def expect_error(fn, cls, status, code=None, what=""):
    try:
        fn()
    except cls as e:
        check(e.status_code == status, f"{what}: status {e.status_code} == {status}")
        body = e.body if isinstance(e.body, dict) else {}
        # The openai client unwraps {"error": {...}} into body.
        for k in ("message", "type", "param", "code"):
            check(k in body, f"{what}: error body has `{k}`")
        if code is not None:
            check(body.get("code") == code, f"{what}: code {body.get('code')} == {code}")
        return
    raise SystemExit(f"e2e: FAILED: {what}: no error raised")


def openai_checks(client, model):
    models = client.models.list()
    ids = [m.id for m in models.data]
    check(model in ids, f"models.list has {model} ({ids})")
    ctx = getattr(models.data[0], "context_length", None) or 0

    msgs = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Say hello."}]
    r = client.chat.completions.create(model=model, messages=msgs, max_tokens=8, temperature=0)
    c = r.choices[0]
    check(r.object == "chat.completion" and c.message.role == "assistant",
          "chat.completion with an assistant message")
    check(isinstance(c.message.content, str), f"content is text: {c.message.content!r}")
    check(c.finish_reason in ("stop", "length"), f"finish_reason {c.finish_reason}")
    u = r.usage
    check(u.prompt_tokens > 0 and 0 < u.completion_tokens <= 8
          and u.total_tokens == u.prompt_tokens + u.completion_tokens, f"usage {u}")

    parts, finish, usage = [], None, None
    stream = client.chat.completions.create(model=model, messages=msgs, max_tokens=8,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    for chunk in stream:
        check(chunk.object == "chat.completion.chunk", "chunk object") if not parts else None
        if chunk.choices:
            d = chunk.choices[0].delta
            if d.content:
                parts.append(d.content)
            if chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
        if chunk.usage:
            usage = chunk.usage
    check("".join(parts) == c.message.content,
          f"streamed text == whole text (greedy): {''.join(parts)!r}")
    check(finish == c.finish_reason, f"streamed finish_reason {finish}")
    check(usage is not None and usage.completion_tokens == u.completion_tokens
          and usage.prompt_tokens == u.prompt_tokens, f"stream usage {usage}")

    t = client.completions.create(model=model, prompt="Once upon a time", max_tokens=6,
                                  temperature=0)
    check(t.object == "text_completion" and isinstance(t.choices[0].text, str),
          f"text completion {t.choices[0].text!r}")
    streamed = "".join(ch.choices[0].text for ch in client.completions.create(
        model=model, prompt="Once upon a time", max_tokens=6, temperature=0, stream=True)
        if ch.choices)
    check(streamed == t.choices[0].text, "streamed completion == whole completion")

    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}]
    r = client.chat.completions.create(
        model=model, max_tokens=4, temperature=0, tools=tools, tool_choice="auto",
        messages=[{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "c1", "type": "function",
                       "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
                  {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
        extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    check(r.usage.prompt_tokens > 0, "tools, tool calls and enable_thinking accepted")

    expect_error(lambda: client.chat.completions.create(model="no-such-model", messages=msgs),
                 openai.NotFoundError, 404, "model_not_found", "unknown model")
    expect_error(lambda: client.chat.completions.create(model=model, messages=msgs, temperature=5),
                 openai.BadRequestError, 400, None, "temperature out of range")
    expect_error(lambda: client.chat.completions.create(model=model, messages=msgs, n=2),
                 openai.BadRequestError, 400, None, "n=2")
    expect_error(lambda: client.chat.completions.create(model=model, messages=msgs,
                                                        max_tokens=10**9),
                 openai.BadRequestError, 400, "context_length_exceeded", "absurd max_tokens")
    if ctx:
        expect_error(lambda: client.completions.create(model=model, prompt=[1] * ctx),
                     openai.BadRequestError, 400, "context_length_exceeded",
                     f"a prompt of {ctx} tokens (the whole context)")


def curl(base, *args):
    out = subprocess.run(["curl", "-sS", "--max-time", "60", *args], capture_output=True,
                         text=True, check=True)
    return out.stdout


def curl_checks(base, model):
    body = json.dumps({"model": model, "max_tokens": 5, "temperature": 0,
                       "messages": [{"role": "user", "content": "Hi"}]})
    v = json.loads(curl(base, f"{base}/v1/chat/completions",
                        "-H", "Content-Type: application/json", "-d", body))
    check(v["object"] == "chat.completion" and v["usage"]["completion_tokens"] >= 1,
          "curl: chat completion")
    sbody = json.dumps({**json.loads(body), "stream": True})
    raw = curl(base, "-N", f"{base}/v1/chat/completions",
               "-H", "Content-Type: application/json", "-d", sbody)
    events = [e for e in raw.split("\n\n") if e]
    check(all(e.startswith("data: ") for e in events), "curl: every SSE event is `data: `")
    check(events[-1] == "data: [DONE]", "curl: stream ends with data: [DONE]")
    text = "".join(json.loads(e[6:])["choices"][0]["delta"].get("content") or ""
                   for e in events[:-1])
    check(text == v["choices"][0]["message"]["content"], "curl: streamed == whole")
    head = curl(base, "-i", f"{base}/v1/chat/completions", "-d", "{not json")
    check(head.startswith("HTTP/1.1 400"), "curl: malformed JSON is 400")
    check("\"invalid_request_error\"" in head, "curl: OpenAI error body")
    m = curl(base, f"{base}/metrics")
    check("tally_requests_total" in m and "tally_time_to_first_token_seconds_bucket" in m,
          "curl: /metrics in Prometheus text")
    check(json.loads(curl(base, f"{base}/health"))["status"] == "ok", "curl: /health")


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


def load_test(base_url, model, streams, seconds, max_tokens):
    """`streams` threads, each sending streaming requests back to back for `seconds`."""
    client = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=120)
    lock = threading.Lock()
    res = {"ok": 0, "rejected": 0, "failed": [], "ttft": [], "tps": [], "tokens": 0}
    deadline = time.monotonic() + seconds

    def one(i):
        n = 0
        while time.monotonic() < deadline:
            n += 1
            t0 = time.monotonic()
            first = last = None
            chunks = 0
            try:
                for ch in client.chat.completions.create(
                        model=model, max_tokens=max_tokens, temperature=0.8, seed=i * 1000 + n,
                        stream=True, messages=[{"role": "user", "content": f"Story {i}-{n}:"}]):
                    if ch.choices and ch.choices[0].delta.content:
                        last = time.monotonic()
                        first = first or last
                        chunks += 1
                with lock:
                    res["ok"] += 1
                    res["tokens"] += chunks
                    if first is not None:
                        res["ttft"].append(first - t0)
                        if chunks >= 2 and last > first:
                            res["tps"].append((chunks - 1) / (last - first))
            except openai.RateLimitError:
                with lock:
                    res["rejected"] += 1
                time.sleep(0.2)
            except Exception as e:  # anything else is a lost request
                with lock:
                    res["failed"].append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(streams)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 180)
    hung = sum(t.is_alive() for t in threads)
    wall = time.monotonic() - t0
    summary = {
        "streams": streams, "seconds": seconds, "wall_s": round(wall, 2),
        "max_tokens": max_tokens, "answered_200": res["ok"], "rejected_429": res["rejected"],
        "failed": len(res["failed"]), "hung_threads": hung,
        "ttft_p50_ms": round(pct(res["ttft"], 50) * 1000, 1),
        "ttft_p99_ms": round(pct(res["ttft"], 99) * 1000, 1),
        "stream_tok_s_p50": round(pct(res["tps"], 50), 1),
        "stream_tok_s_p99_low": round(pct(res["tps"], 1), 1),
        "aggregate_tok_s": round(res["tokens"] / wall, 1),
    }
    print("e2e: load:", json.dumps(summary))
    check(not res["failed"], f"load: no request lost or failed {res['failed'][:3]}")
    check(hung == 0, "load: no client hung")
    check(res["ok"] > 0, "load: requests were served")
    return summary


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--summary")
    a = ap.parse_args()
    base = a.base_url.rstrip("/")
    client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=120)
    openai_checks(client, a.model)
    curl_checks(base, a.model)
    summary = load_test(base + "/v1", a.model, a.streams, a.seconds, a.max_tokens)
    if a.summary:
        with open(a.summary, "w") as f:
            json.dump(summary, f, indent=1)
    print("e2e: all checks passed")


if __name__ == "__main__":
    sys.exit(main())
