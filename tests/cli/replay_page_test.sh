#!/usr/bin/env bash
# `sandboxio replay --html`'s page in headless Chromium: a session recorded with SBX_RECORD
# (a file copied in, output on both streams) is replayed into a page, which Chromium loads with
# the network off; its DOM holds the session's calls and output, and its screenshot is the
# page as styled (the body and call-row colours of the page's own stylesheet are on it, and it
# is not blank). Usage: replay_page_test.sh SANDBOXIO [SCREENSHOT_COPY]
# Without Chromium it skips (exit 77), unless SBX_REQUIRE_CHROMIUM=1 (CI), where that fails.
set -euo pipefail
cli=$1 keep=${2:-}
if ! command -v chromium >/dev/null; then
  if [ "${SBX_REQUIRE_CHROMIUM:-0}" = 1 ]; then
    echo "FAILED: no chromium, and SBX_REQUIRE_CHROMIUM=1 (scripts/deps.sh installs it)" >&2
    exit 1
  fi
  echo "*** SKIPPED: no chromium (scripts/deps.sh installs it) ***" >&2
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf 'name,score\nada,42\n' > "$work/scores.csv"
SBX_RECORD="$work/traces" "$cli" run -b fake:// -f "$work/scores.csv:/home/user/scores.csv" -- \
  sh -c 'echo hello from the sandbox; cat /home/user/scores.csv; echo a warning >&2' >/dev/null 2>&1
trace=$(ls "$work"/traces/*.sbxtrace)
"$cli" replay --quiet --html "$work/page.html" "$trace"
chrome=(chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run
        --disable-background-networking --disable-component-update --disable-sync
        --user-data-dir="$work/profile" --window-size=1100,760)
"${chrome[@]}" --dump-dom "file://$work/page.html" > "$work/dom.html" 2>/dev/null
"${chrome[@]}" --screenshot="$work/shot.png" "file://$work/page.html" >/dev/null 2>&1
python3 - "$work/dom.html" "$work/shot.png" <<'PY'
import struct, sys, zlib
dom = open(sys.argv[1], encoding="utf-8").read()
for needle in ("hello from the sandbox", "ada,42", "a warning", "identical to the recording",
               "scores.csv", '<tr class="stdout">', '<tr class="stderr">', '<tr class="done">'):
    assert needle in dom, f"the page Chromium loaded lacks {needle!r}"

def pixels(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, head = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, colour = head[0], head[1], head[2], head[3]
    assert depth == 8 and colour in (2, 6), f"unexpected PNG form {depth}/{colour}"
    bpp = 3 if colour == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, {bytes(r[x:x + 3]) for r in rows for x in range(0, stride, bpp)}

w, h, colours = pixels(sys.argv[2])
assert (w, h) == (1100, 760), f"the screenshot is {w}x{h}"
assert len(colours) > 40, f"the screenshot has {len(colours)} colours: blank?"
for name, rgb in (("body background #fbfbfd", b"\xfb\xfb\xfd"), ("call row #eef3fb", b"\xee\xf3\xfb")):
    assert rgb in colours, f"the {name} is not on the screenshot: the page's style did not apply"
print(f"the page renders in Chromium: {w}x{h}, {len(colours)} colours, calls and output in its DOM")
PY
if [ -n "$keep" ]; then cp "$work/shot.png" "$keep"; fi
