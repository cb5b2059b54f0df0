# The code-context bootstrap that sandboxio-agent carries (compiled into it as a resource) and
# runs in one python3 per code context (one process, one namespace). python3 starts as
# `python3 -u -c STUB`; the stub reads these bytes from fd 3 and runs them as "<sandboxio>".
#
# It needs nothing beyond python3-minimal (no json, no IPython). The agent talks to it over two
# pipes it sets up before exec, so the cell's own stdin, stdout and stderr stay the process's:
#   fd 3  requests from the agent:  [u32 length][RunCode payload: u32 context, str code,
#         u32 count, str NAME=VALUE..., u32 window] (the context and window are the agent's)
#   fd 4  events to the agent:      [u32 length][u8 kind][body]
#           kind 1  a result:    [u32 count]([str mime][str data])...   (CodeEvent Result)
#           kind 2  an error:    [str name][str value][str traceback]   (CodeEvent Error)
#           kind 3  the cell is done (stdout and stderr were flushed before it)
# Strings are [u32 length][bytes], integers big-endian: the agent protocol's own encoding, so
# the host decodes events with the same codec (sandboxio/codec/agent.hpp, CodeEvent).
# A SIGINT while a cell runs raises KeyboardInterrupt in it (an interrupt on timeout); at any
# other time it is ignored.
import ast
import base64
import builtins
import linecache
import os
import signal
import struct
import sys
import traceback
import types

REQUESTS, EVENTS = 3, 4
LIMIT = (1 << 20) - 4096  # an event must fit the agent protocol's largest frame
os.set_inheritable(REQUESTS, False)
os.set_inheritable(EVENTS, False)

running = False  # a cell runs: SIGINT interrupts it
sending = False  # an event is half written: an interrupt waits until it is whole
deferred = False


def on_sigint(signo, frame):
    global deferred
    if running and sending:
        deferred = True
    elif running:
        raise KeyboardInterrupt


signal.signal(signal.SIGINT, on_sigint)


def read_exactly(n):
    data = b""
    while len(data) < n:
        piece = os.read(REQUESTS, n - len(data))
        if not piece:
            sys.exit(0)  # the agent closed the context
        data += piece
    return data


def s(text):
    if isinstance(text, str):
        text = text.encode("utf-8", "surrogateescape")
    return struct.pack(">I", len(text)) + text


def send(kind, body=b""):
    global sending, deferred
    message = struct.pack(">IB", len(body) + 1, kind) + body
    view = memoryview(message)
    sending = True
    try:
        while view:
            view = view[os.write(EVENTS, view):]
    finally:
        sending = False
    if deferred and running:
        deferred = False
        raise KeyboardInterrupt


def to_json(value):
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        out = ['"']
        for ch in value:
            if ch in '"\\':
                out.append("\\" + ch)
            elif ord(ch) < 0x20:
                out.append("\\u%04x" % ord(ch))
            else:
                out.append(ch)
        return "".join(out) + '"'
    if isinstance(value, dict):
        return "{" + ",".join(to_json(str(k)) + ":" + to_json(v) for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(to_json(v) for v in value) + "]"
    return to_json(str(value))


def encode_data(mime, data):
    if isinstance(data, tuple):  # (data, metadata)
        data = data[0]
    if data is None:
        return None
    if isinstance(data, (bytes, bytearray)):
        return base64.b64encode(bytes(data)).decode("ascii")
    if mime == "application/json" and not isinstance(data, str):
        return to_json(data)
    return str(data)


REPR_METHODS = (
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_pdf_", "application/pdf"),
    ("_repr_latex_", "text/latex"),
    ("_repr_json_", "application/json"),
    ("_repr_javascript_", "application/javascript"),
)


def mime_bundle(obj):
    """text/plain first, then every richer form the object offers, as Jupyter would show it."""
    try:
        items = {"text/plain": repr(obj)}
    except BaseException as e:
        items = {"text/plain": "<repr failed: %s>" % type(e).__name__}
    if not isinstance(obj, type):
        bundle = getattr(obj, "_repr_mimebundle_", None)
        if callable(bundle):
            try:
                data = bundle()
                if isinstance(data, tuple):
                    data = data[0]
                for mime, value in (data or {}).items():
                    encoded = encode_data(mime, value)
                    if encoded is not None:
                        items[str(mime)] = encoded
            except Exception:
                pass
        for method, mime in REPR_METHODS:
            fn = getattr(obj, method, None)
            if mime in items or not callable(fn):
                continue
            try:
                encoded = encode_data(mime, fn())
            except Exception:
                continue
            if encoded is not None:
                items[mime] = encoded
    body = b""
    count = 0
    for mime, data in items.items():
        item = s(mime) + s(data)
        if len(body) + len(item) > LIMIT:
            item = s("text/plain") + s("[%s output of %d bytes left out: over 1 MiB]" % (mime, len(data)))
            if len(body) + len(item) > LIMIT:
                continue
        body += item
        count += 1
    send(1, struct.pack(">I", count) + body)


def display(*objects):
    """Shows each object as a rich result now, as IPython's display() does."""
    for obj in objects:
        mime_bundle(obj)


def show_figures():
    """Open matplotlib figures become PNG results at the end of a cell, as in a notebook."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    try:
        import io

        for number in pyplot.get_fignums():
            figure = pyplot.figure(number)
            png = io.BytesIO()
            figure.savefig(png, format="png")
            send(1, struct.pack(">I", 2) + s("text/plain") + s(repr(figure))
                 + s("image/png") + s(base64.b64encode(png.getvalue()).decode("ascii")))
        pyplot.close("all")
    except Exception:
        pass


main = types.ModuleType("__main__")
main.__dict__["display"] = display
sys.modules["__main__"] = main
namespace = main.__dict__
cells = 0


def user_traceback(e):
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in ("<string>", "<sandboxio>"):
        tb = tb.tb_next  # the stub's and the bootstrap's own frames
    return "".join(traceback.format_exception(type(e), e, tb))


def run(code):
    global cells, running, deferred
    cells += 1
    deferred = False
    name = "<cell %d>" % cells
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    try:
        running = True
        tree = ast.parse(code, name)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, name, "exec"), namespace)
        if last is not None:
            value = eval(compile(last, name, "eval"), namespace)
            running = False
            if value is not None:
                namespace["_"] = value
                mime_bundle(value)
        running = False
        show_figures()
    except BaseException as e:
        running = False
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            value = str(e)
        except BaseException:
            value = ""
        send(2, s(type(e).__name__) + s(value) + s(user_traceback(e)))


while True:
    (length,) = struct.unpack(">I", read_exactly(4))
    request = read_exactly(length)
    (size,) = struct.unpack(">I", request[4:8])
    code = request[8:8 + size].decode("utf-8", "replace")
    at = 8 + size
    (count,) = struct.unpack(">I", request[at:at + 4])
    at += 4
    saved = {}
    for _ in range(count):
        (size,) = struct.unpack(">I", request[at:at + 4])
        var = request[at + 4:at + 4 + size].decode("utf-8", "surrogateescape")
        at += 4 + size
        key, _, val = var.partition("=")
        saved.setdefault(key, os.environ.get(key))
        os.environ[key] = val
    run(code)
    for key, val in saved.items():
        if val is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = val
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    send(3)
