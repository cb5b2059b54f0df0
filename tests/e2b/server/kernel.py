# One code-interpreter context of the local E2B-compatible server: a Python process inside the
# sandbox that keeps its globals between executions. A request is one line on stdin: the code
# in base64, then pairs of base64 environment names and values, separated by spaces (the
# sandbox's python3-minimal has no json module). For each, the kernel writes the code
# interpreter's NDJSON events (stdout, stderr, result, error, end_of_execution) to the protocol
# descriptor, with Python's json.dumps separators. The shapes follow e2b-dev/code-interpreter's
# template server (see ../shared/e2b-protocol/NOTES.md).
import ast
import base64
import datetime
import os
import sys
import traceback

PROTOCOL = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)  # output written to fd 1 below Python's level goes to the kernel's stderr

MIME_FIELDS = (
    ("_repr_html_", "html"),
    ("_repr_markdown_", "markdown"),
    ("_repr_svg_", "svg"),
    ("_repr_png_", "png"),
    ("_repr_jpeg_", "jpeg"),
    ("_repr_pdf_", "pdf"),
    ("_repr_latex_", "latex"),
    ("_repr_json_", "json"),
    ("_repr_javascript_", "javascript"),
)


def dumps(value):
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, dict):
        return "{" + ", ".join(dumps(str(k)) + ": " + dumps(v) for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(dumps(v) for v in value) + "]"
    out = ['"']
    for ch in str(value):
        c = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= c < 0x7F:
            out.append(ch)
        elif c > 0xFFFF:
            c -= 0x10000
            out.append("\\u%04x\\u%04x" % (0xD800 + (c >> 10), 0xDC00 + (c & 0x3FF)))
        else:
            out.append("\\u%04x" % c)
    out.append('"')
    return "".join(out)


def emit(event):
    PROTOCOL.write(dumps(event) + "\n")


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


class Capture:
    # Output goes out a line at a time (and at the end of an execution), as Jupyter's
    # stream messages do.
    def __init__(self, name):
        self.name = name
        self.pending = ""

    def write(self, text):
        self.pending += text
        if "\n" in self.pending:
            cut = self.pending.rindex("\n") + 1
            emit({"type": self.name, "text": self.pending[:cut], "timestamp": now()})
            self.pending = self.pending[cut:]
        return len(text)

    def flush(self):
        if self.pending:
            emit({"type": self.name, "text": self.pending, "timestamp": now()})
            self.pending = ""

    def isatty(self):
        return False


def bundle(value, main):
    out = {"type": "result", "text": repr(value)}
    for method, field in MIME_FIELDS:
        fn = getattr(value, method, None)
        if fn is None:
            continue
        data = fn()
        if data is None:
            continue
        if isinstance(data, bytes):
            data = base64.b64encode(data).decode()
        out[field] = data
    out["extra"] = {}
    out["is_main_result"] = main
    return out


def display(value):
    emit(bundle(value, False))


def run(code, env):
    scope = CONTEXT
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        tree = ast.parse(code, "<cell>", "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, "<cell>", "exec"), scope)
        if last is not None:
            value = eval(compile(last, "<cell>", "eval"), scope)
            if value is not None:
                emit(bundle(value, True))
    except BaseException as e:  # noqa: B902 - the cell's exception is the result
        sys.stdout.flush()
        sys.stderr.flush()
        emit({
            "type": "error",
            "name": type(e).__name__,
            "value": str(e),
            "traceback": "".join(traceback.format_exception(type(e), e, e.__traceback__)),
        })
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


CONTEXT = {"__name__": "__main__", "display": display}
os.chdir(os.environ.get("SBX_CONTEXT_CWD", "/home/user"))
sys.stdout = Capture("stdout")
sys.stderr = Capture("stderr")
for line in sys.stdin:
    fields = [base64.b64decode(f.replace("-", "")).decode("utf-8", "surrogateescape") for f in line.split()]
    code = fields[0] if fields else ""
    run(code, dict(zip(fields[1::2], fields[2::2])))
    sys.stdout.flush()
    sys.stderr.flush()
    emit({"type": "end_of_execution"})
