#!/usr/bin/env python3
"""Records a `tally chat` session in a real pseudo-terminal (stdin is a terminal, so tally shows
its `> ` prompt and Ctrl-C arrives as the terminal's SIGINT), for docs/chat-transcript.md.

    python3 tools/chat/pty_session.py -- tally chat --model M --tokenizer V --template T ...

Types each scripted line, waits for the answer to start, and sends Ctrl-C (the byte 0x03, which
the terminal turns into SIGINT) where the script says `^C`. Prints the terminal's output, with
the bytes the program wrote and the user's typing, as one transcript. Standard library only.
"""
import os
import pty
import select
import sys
import time

SCRIPT = [
    ("line", "Tell me a long story about the sea."),
    ("wait", 0.3),
    ("ctrl-c", None),
    ("line", "Shorter, please."),
    ("wait", 0.3),
    ("ctrl-c", None),
    ("ctrl-c", None),  # at the idle prompt: nothing to stop, and the program stays
    ("line", "/reset"),
    ("line", "What is 2+2?"),
    ("wait", 0.3),
    ("ctrl-c", None),
    ("line", "/exit"),
]


def main() -> int:
    argv = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else sys.argv[1:]
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp(argv[0], argv)
    out = bytearray()

    def pump(seconds: float, until: bytes | None = None) -> None:
        end = time.time() + seconds
        while time.time() < end:
            r, _, _ = select.select([fd], [], [], 0.05)
            if r:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:
                    return
                if not chunk:
                    return
                out.extend(chunk)
                if until is not None and out.endswith(until):
                    return

    pump(60, b"> ")  # the banner and the first prompt
    for what, arg in SCRIPT:
        if what == "line":
            os.write(fd, arg.encode() + b"\r")
            pump(0.05)
        elif what == "wait":
            pump(arg)
        elif what == "ctrl-c":
            os.write(fd, b"\x03")
            pump(2 if out.endswith(b"> ") else 60, b"> ")
        elif what == "answer":
            pump(120, b"> ")
    pump(10)
    _, status = os.waitpid(pid, 0)
    sys.stdout.write(out.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", ""))
    sys.stdout.write(f"\n[exit status {os.waitstatus_to_exitcode(status)}]\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
