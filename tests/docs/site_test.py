#!/usr/bin/env python3
"""The docs site answers at every error link the library prints.

    site_test.py SITE_DIR PRINTER BASE_URL

PRINTER prints what each catalog error's exception says (tests/docs/print_error_urls.cpp, built
with BASE_URL as the error-URL base). The built site is served on loopback; every printed link
must start with BASE_URL, and its path must answer 200 with the page of that very code.
"""
import http.server
import re
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from functools import partial


def main() -> int:
    site, printer, base = sys.argv[1], sys.argv[2], sys.argv[3]
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=site)
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    lines = subprocess.run([printer], check=True, capture_output=True, text=True).stdout.splitlines()
    failures = []
    for line in lines:
        m = re.match(r"(SBX_E\d{4}) .*\((\S+)\)$", line)
        if not m:
            failures.append(f"no link in: {line}")
            continue
        code, url = m.groups()
        if not url.startswith(base):
            failures.append(f"{code}: {url} does not start with the configured base {base}")
            continue
        path = urllib.parse.urlsplit(url).path
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
                status, body = reply.status, reply.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            status, body = e.code, ""
        if status != 200:
            failures.append(f"{code}: {url} answered {status}")
        elif code not in body:
            failures.append(f"{code}: {url} answered a page that does not name {code}")
    server.shutdown()
    for f in failures:
        print(f, file=sys.stderr)
    print(f"{len(lines) - len(failures)} of {len(lines)} error links answer 200 with their page")
    return 1 if failures or len(lines) < 40 else 0


if __name__ == "__main__":
    sys.exit(main())
