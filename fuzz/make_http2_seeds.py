#!/usr/bin/env python3
"""Writes the seed corpus of the http2 harness: a server's side of exchanges on streams 1, 3
and 5 (two downloads and an upload), well-formed and hostile, each as the harness reads it
(a split byte, a limits byte, then the server's bytes). Run from the repository root:
fuzz/make_http2_seeds.py"""
import os
import struct


def frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def fields(status=None, rest=()):
    b = b""
    if status == 200:
        b += b"\x88"
    elif status is not None:
        s = str(status).encode()
        b += b"\x08" + bytes([len(s)]) + s
    for name, value in rest:
        b += b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value
    return b


DATA, HEADERS, RST, SETTINGS, PUSH, PING, GOAWAY, WINDOW, CONT = 0, 1, 3, 4, 5, 6, 7, 8, 9
END_STREAM, ACK, END_HEADERS = 1, 1, 4
preface = frame(SETTINGS, 0, 0, struct.pack(">HI", 3, 100) + struct.pack(">HI", 4, 1 << 20)) + frame(SETTINGS, ACK, 0)
ok = (preface
      + frame(WINDOW, 0, 0, struct.pack(">I", 1 << 20)) + frame(WINDOW, 0, 5, struct.pack(">I", 1 << 20))
      + frame(HEADERS, END_HEADERS, 1, fields(200, [(b"content-type", b"application/octet-stream")]))
      + frame(DATA, 0, 1, b"a" * 1000)
      + frame(HEADERS, END_HEADERS, 3, fields(200))
      + frame(DATA, END_STREAM, 3, b"b" * 300)
      + frame(HEADERS, END_HEADERS, 5, fields(200, [(b"content-type", b"application/json")]))
      + frame(DATA, 0, 5, b'[{"name":"f"}]')
      + frame(HEADERS, END_HEADERS | END_STREAM, 5, fields(None, [(b"grpc-status", b"0")]))
      + frame(DATA, END_STREAM, 1, b"a" * 10))
seeds = {
    "exchange": ok,
    "interim_then_final": preface + frame(HEADERS, END_HEADERS, 1, fields(103)) + frame(HEADERS, END_HEADERS | END_STREAM, 1, fields(200)),
    "continuation": preface + frame(HEADERS, 0, 3, fields(200)) + frame(CONT, END_HEADERS, 3, fields(None, [(b"x-a", b"b")])),
    "goaway": preface + frame(GOAWAY, 0, 0, struct.pack(">II", 1, 0) + b"bye") + frame(HEADERS, END_HEADERS | END_STREAM, 1, fields(200)),
    "reset": preface + frame(HEADERS, END_HEADERS, 3, fields(404)) + frame(RST, 0, 3, struct.pack(">I", 2)),
    "ping": preface + frame(PING, 0, 0, b"12345678") * 20,
    "past_window": preface + frame(HEADERS, END_HEADERS, 1, fields(200)) + frame(DATA, 0, 1, b"x" * 16384) * 6,
    "push": preface + frame(PUSH, END_HEADERS, 1, struct.pack(">I", 2) + fields(None, [(b":path", b"/x")])),
    "headers_bomb": preface + frame(HEADERS, END_HEADERS, 1, fields(200, [(b"x-%d" % i, b"v" * 100) for i in range(40)])),
    "http1": b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
}
out = "fuzz/corpus/http2"
os.makedirs(out, exist_ok=True)
for name, wire in seeds.items():
    for split in (0, 7, 255):
        with open(os.path.join(out, f"{name}_{split}"), "wb") as f:
            f.write(bytes([split, 0 if split else 3]) + wire)
