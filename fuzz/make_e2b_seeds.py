#!/usr/bin/env python3
"""Writes the seed corpora of the e2b_machine and connect harnesses from the exchange the
official SDK recorded (../shared/e2b-protocol/wire-capture-e2b-js-2.51.0.txt): a create, then
a command's Start stream, a file read, a code execution, each answered as E2B answers.
Run from the repository root: fuzz/make_e2b_seeds.py"""
import json
import os
import struct


def http(status, reason, body, ctype="application/json", extra=""):
    if isinstance(body, str):
        body = body.encode()
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n{extra}Content-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def env(message, flags=0):
    raw = json.dumps(message, separators=(",", ":")).encode()
    return struct.pack(">BI", flags, len(raw)) + raw


def feed(index, data):
    out = b""
    for i in range(0, len(data), 0xFFFF):  # one feed carries at most 64 KiB
        part = data[i:i + 0xFFFF]
        out += bytes([0, index]) + struct.pack("<H", len(part)) + part
    return out


CONNECT, SUBMIT, TIME = bytes([2]), 5, 4
CREATED = http(201, "Created", json.dumps({
    "sandboxID": "isbx123", "templateID": "base", "clientID": "6532622b",
    "envdVersion": "0.6.13", "envdAccessToken": "tok_abc", "domain": None}))
START = http(200, "OK", env({"event": {"start": {"pid": 4242}}}) +
             env({"event": {"data": {"stdout": "aGkK"}}}) +
             env({"event": {"data": {"stderr": "ZXJyCg=="}}}) +
             env({"event": {"end": {"exitCode": 3, "exited": True, "status": "exit status 3",
                                    "error": "exit status 3"}}}) + env({}, 2),
             "application/connect+json")
KILLED = http(200, "OK", env({"event": {"start": {"pid": 7}}}) +
              env({"event": {"end": {"exitCode": -1, "status": "signal: killed"}}}) + env({}, 2),
              "application/connect+json")
EXECUTE = http(200, "OK", "".join(json.dumps(x) + "\n" for x in [
    {"type": "number_of_executions", "execution_count": 1},
    {"type": "stdout", "text": "hello\n", "timestamp": "2026-01-01T00:00:00Z"},
    {"type": "result", "text": "2", "html": "<b>2</b>", "is_main_result": True, "extra": {}},
    {"type": "error", "name": "ZeroDivisionError", "value": "division by zero", "traceback": "tb"},
    {"type": "end_of_execution"}]))
CONTEXT = http(200, "OK", json.dumps({"id": "ctx1", "language": "python", "cwd": "/home/user"}))
NOT_FOUND = http(404, "Not Found", json.dumps({"code": "not_found", "message": "no such file"}))
LISTED = http(200, "OK", json.dumps({"entries": [
    {"name": "a", "type": "FILE_TYPE_DIRECTORY", "path": "/tmp/a", "size": "4096", "mode": 493},
    {"name": "f", "type": "FILE_TYPE_FILE", "path": "/tmp/f", "size": "3", "mode": 420}]}))
RATE = http(429, "Too Many Requests", json.dumps({"code": 429, "message": "slow down"}),
            extra="Retry-After: 1\r\n")

created = CONNECT + feed(0, CREATED)
seeds = {
    "create_ok": created,
    "create_rate_limited": CONNECT + feed(0, RATE) + bytes([TIME, 200]) + CONNECT + feed(0, CREATED),
    "create_unauthorized": CONNECT + feed(0, http(401, "Unauthorized", '{"code":401,"message":"bad key"}')),
    "run_recorded": created + bytes([SUBMIT, 0]) + CONNECT + feed(0, START),
    "stream_split": created + bytes([SUBMIT, 1]) + CONNECT + b"".join(
        feed(0, START[i:i + 7]) for i in range(0, len(START), 7)),
    "run_timeout_kill": created + bytes([SUBMIT, 0]) + CONNECT + feed(0, START[:START.index(b"{\"event\":{\"data\"") - 5])
    + bytes([TIME, 30]) + CONNECT + feed(1, http(200, "OK", "{}")) + CONNECT + feed(1, KILLED),
    "stdin": created + bytes([SUBMIT, 12]) + CONNECT + feed(0, START[:START.index(b"{\"event\":{\"data\"") - 5])
    + CONNECT + feed(1, http(200, "OK", "{}")) + CONNECT + feed(1, http(200, "OK", "{}")),
    "read_missing": created + bytes([SUBMIT, 3]) + CONNECT + feed(0, NOT_FOUND),
    "read_ok": created + bytes([SUBMIT, 3]) + CONNECT + feed(0, http(200, "OK", b"\x00\x01data", "application/octet-stream")),
    "list": created + bytes([SUBMIT, 4]) + CONNECT + feed(0, LISTED),
    "code_fresh_context": created + bytes([SUBMIT, 9]) + CONNECT + feed(0, CONTEXT) + CONNECT + feed(0, EXECUTE),
    "code_in_context": created + bytes([SUBMIT, 10]) + CONNECT + feed(0, EXECUTE),
    "dropped_gone": created + bytes([SUBMIT, 1]) + CONNECT + feed(0, START[:60]) + bytes([1, 0])
    + CONNECT + feed(0, http(404, "Not Found", '{"code":404,"message":"sandbox not found"}')),
}
os.makedirs("fuzz/corpus/e2b_machine", exist_ok=True)
for name, data in seeds.items():
    with open(f"fuzz/corpus/e2b_machine/{name}", "wb") as f:
        f.write(data)

body = START[START.index(b"\r\n\r\n") + 4:]
os.makedirs("fuzz/corpus/connect", exist_ok=True)
for name, data in {
    "recorded_start": bytes([6]) + body,
    "end_stream_error": bytes([1]) + env({"error": {"code": "invalid_argument", "message": "x"}}, 2),
    "compressed": bytes([0]) + bytes([1, 0, 0, 0, 2]) + b"{}",
    "truncated": bytes([3]) + body[:-3],
}.items():
    with open(f"fuzz/corpus/connect/{name}", "wb") as f:
        f.write(data)
print(f"wrote {len(seeds)} e2b_machine seeds and 4 connect seeds")
