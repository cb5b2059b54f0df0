#!/usr/bin/env python3
"""Writes the seed corpus of the modal_machine harness: Modal's control plane answering a
create (AuthTokenGet, AppGetOrCreate, EnvironmentGetOrCreate, ImageGetOrCreate,
SandboxCreateV2 on streams 1 to 9 of one HTTP/2 connection), then the task command router
answering a run, a read and a write, in the input format of fuzz/machine_driver.hpp. Run from
the repository root: fuzz/make_modal_seeds.py"""
import os
import struct

DATA, HEADERS, SETTINGS = 0, 1, 4
END_STREAM, ACK, END_HEADERS = 1, 1, 4


def frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def literal(name, value):
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def varint(n):
    out = b""
    while n >= 0x80:
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return out + bytes([n])


def field(number, value):
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    return varint((number << 3) | 2) + varint(len(value)) + value


def answer(stream, message, status=b"0"):
    """A unary gRPC answer: head, one message, trailers."""
    head = b"\x88" + literal(b"content-type", b"application/grpc")
    out = frame(HEADERS, END_HEADERS, stream, head)
    if message is not None:
        out += frame(DATA, 0, stream, b"\x00" + struct.pack(">I", len(message)) + message)
    return out + frame(HEADERS, END_HEADERS | END_STREAM, stream, literal(b"grpc-status", status))


def feed(conn, wire):
    return bytes([0, conn]) + struct.pack("<H", len(wire)) + wire


CONNECT = b"\x02"
preface = frame(SETTINGS, 0, 0, struct.pack(">HI", 3, 100)) + frame(SETTINGS, ACK, 0)
create = (CONNECT + feed(0, preface + answer(1, field(1, b"jwt")))
          + feed(0, answer(3, field(1, b"ap-1")))
          + feed(0, answer(5, field(2, field(2, field(1, b"2024.10")))))
          + feed(0, answer(7, field(1, b"im-1") + field(2, field(1, 1))))
          + feed(0, answer(9, field(1, b"sb-1") + field(3, b"ta-1")
                           + field(5, field(1, b"rjwt") + field(2, b"https://localhost:1")))))


def submit(which):
    return bytes([5, which])


run = (submit(0) + CONNECT + feed(1, preface + answer(1, b""))
       + feed(1, answer(3, field(1, b"hi\n")) + answer(5, None) + answer(7, b"")
              + answer(9, field(1, 0))))
read = (submit(3) + CONNECT + feed(1, preface + answer(1, b""))
        + feed(1, answer(3, field(1, b"data")) + answer(5, None) + answer(7, field(1, 0))))
failed_read = (submit(3) + CONNECT + feed(1, preface + answer(1, b""))
               + feed(1, answer(3, None) + answer(5, field(1, b'{"error_kind":"NotFound","message":"x"}'))
                      + answer(7, field(1, 1))))
seeds = {
    "create": create,
    "create_refused": CONNECT + feed(0, preface + answer(1, None, b"16")),
    "create_image_failed": create[:create.index(feed(0, answer(7, field(1, b"im-1") + field(2, field(1, 1)))))]
    + feed(0, answer(7, field(2, field(1, 2) + field(2, b"no such image")))),
    "run": create + run,
    "read": create + read,
    "read_missing": create + failed_read,
    "run_then_timeout": create + submit(0) + CONNECT + feed(1, preface + answer(1, b"")) + b"\x04\xff\x04\xff",
    "stream_then_kill": create + submit(1) + CONNECT + feed(1, preface + answer(1, b"")) + submit(7),
}
out = "fuzz/corpus/modal_machine"
os.makedirs(out, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
