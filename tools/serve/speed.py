#!/usr/bin/env python3
"""Generation speed through an OpenAI-compatible server, standard library only (the GPU host has no
openai package): streaming /v1/completions requests, one at a time and then STREAMS at once, each
generating exactly MAX_TOKENS tokens (`ignore_eos`, greedy).

Per request: TTFT (request sent -> first text chunk), decode tok/s ((tokens - 1) / (last chunk -
first chunk)), end-to-end tok/s. Prints a table and, with --json FILE, writes every sample.

    tools/serve/speed.py --base-url http://127.0.0.1:8080 --model m --requests 5 --streams 4
"""

import argparse
import json
import statistics
import threading
import time
import urllib.request


def one(base, model, prompt, max_tokens):
    body = json.dumps({
        "model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
    }).encode()
    req = urllib.request.Request(base + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first = last = None
    usage = None
    chunks = 0
    done = False
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                done = True
                break
            c = json.loads(data)
            if c.get("usage"):
                usage = c["usage"]
            if c.get("choices") and c["choices"][0].get("text"):
                now = time.perf_counter()
                first = first or now
                last = now
                chunks += 1
    t1 = time.perf_counter()
    if not done or usage is None or first is None:
        raise RuntimeError(f"incomplete stream: done={done} usage={usage} chunks={chunks}")
    n = usage["completion_tokens"]
    return {
        "ttft_s": first - t0,
        "decode_tok_s": (n - 1) / (last - first) if last > first else 0.0,
        "e2e_tok_s": n / (t1 - t0),
        "completion_tokens": n,
        "prompt_tokens": usage["prompt_tokens"],
        "chunks": chunks,
    }


def run(base, model, prompt, max_tokens, n_requests, streams):
    out, errs = [], []
    lock = threading.Lock()

    def worker(k):
        for _ in range(k):
            try:
                r = one(base, model, prompt, max_tokens)
                with lock:
                    out.append(r)
            except Exception as e:  # noqa: BLE001 - every failure is reported
                with lock:
                    errs.append(repr(e))

    per = max(1, n_requests // streams)
    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker, args=(per,)) for _ in range(streams)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    return out, errs, wall


def summary(name, rows, errs, wall):
    med = lambda k: statistics.median(r[k] for r in rows) if rows else float("nan")  # noqa: E731
    toks = sum(r["completion_tokens"] for r in rows)
    return {
        "run": name, "requests": len(rows), "errors": len(errs), "wall_s": wall,
        "ttft_p50_s": med("ttft_s"),
        "ttft_max_s": max((r["ttft_s"] for r in rows), default=float("nan")),
        "decode_tok_s_p50": med("decode_tok_s"), "e2e_tok_s_p50": med("e2e_tok_s"),
        "aggregate_tok_s": toks / wall if wall > 0 else 0.0,
        "prompt_tokens": rows[0]["prompt_tokens"] if rows else 0,
        "completion_tokens": rows[0]["completion_tokens"] if rows else 0,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--requests", type=int, default=5, help="requests per run")
    ap.add_argument("--streams", type=int, default=4, help="concurrent streams of the second run")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prompt", default="The history of the river begins in the mountains, where " * 8)
    ap.add_argument("--json", help="write every sample here")
    a = ap.parse_args()
    base = a.base_url.rstrip("/")
    one(base, a.model, a.prompt, 8)  # warm-up: graphs, caches
    results = []
    for name, streams in (("sequential", 1), (f"{a.streams} concurrent", a.streams)):
        rows, errs, wall = run(base, a.model, a.prompt, a.max_tokens, a.requests * streams, streams)
        results.append((summary(name, rows, errs, wall), rows, errs))
    print("| run | requests | errors | prompt | gen | TTFT p50 s | TTFT max s | decode tok/s p50 "
          "| e2e tok/s p50 | aggregate tok/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s, _, _ in results:
        print(f"| {s['run']} | {s['requests']} | {s['errors']} | {s['prompt_tokens']} | "
              f"{s['completion_tokens']} | {s['ttft_p50_s']:.3f} | {s['ttft_max_s']:.3f} | "
              f"{s['decode_tok_s_p50']:.1f} | {s['e2e_tok_s_p50']:.1f} | {s['aggregate_tok_s']:.1f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump([{"summary": s, "samples": r, "errors": e} for s, r, e in results], f, indent=1)
    if any(s["errors"] for s, _, _ in results):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
