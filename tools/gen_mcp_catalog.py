#!/usr/bin/env python3
"""Generates the Docker MCP Catalog's tools.json from the MCP server's own tool list.

    tools/gen_mcp_catalog.py SANDBOXIO --write    rewrite mcp/catalog/tools.json
    tools/gen_mcp_catalog.py SANDBOXIO --check    fail when it differs, or when server.yaml
                                                  disagrees with the server or the image

SANDBOXIO is the built command line. The script speaks MCP to `sandboxio mcp --backend fake://`
over stdio (initialize, then tools/list), exactly as a catalog client would, and writes each
tool in the catalog's shape: name, description, and its arguments (name, type, description,
optional). tools.json is therefore never edited by hand; the test mcp.catalog_matches_server
runs --check.
"""
import json
import pathlib
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
CATALOG = ROOT / "mcp" / "catalog"


def server_tools(cli):
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "gen_mcp_catalog", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    text = "".join(json.dumps(r) + "\n" for r in requests)
    out = subprocess.run([cli, "mcp", "--backend", "fake://"], input=text, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    replies = {m.get("id"): m for m in map(json.loads, out.splitlines()) if "id" in m}
    return replies[1]["result"], replies[2]["result"]["tools"]


def catalog_entry(tool):
    schema = tool.get("inputSchema", {})
    required = set(schema.get("required", []))
    args = []
    for name, prop in schema.get("properties", {}).items():
        arg = {"name": name, "type": prop.get("type", "string"),
               "desc": prop.get("description", "")}
        if prop.get("type") == "array":
            arg["items"] = {"type": prop.get("items", {}).get("type", "string")}
        if name not in required:
            arg["optional"] = True
        args.append(arg)
    return {"name": tool["name"], "description": tool["description"], "arguments": args}


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("--write", "--check"):
        print(__doc__, file=sys.stderr)
        return 2
    cli, mode = sys.argv[1], sys.argv[2]
    init, tools = server_tools(cli)
    text = json.dumps([catalog_entry(t) for t in tools], indent=2) + "\n"
    path = CATALOG / "tools.json"
    if mode == "--write":
        path.write_text(text)
        return 0
    problems = []
    if not path.exists() or path.read_text() != text:
        problems.append("mcp/catalog/tools.json differs from the server's tools/list; "
                        f"regenerate with: tools/gen_mcp_catalog.py {cli} --write")
    server = yaml.safe_load((CATALOG / "server.yaml").read_text())
    for key in ("name", "image", "type", "meta", "about", "source", "run"):
        if key not in server:
            problems.append(f"server.yaml has no '{key}'")
    if server.get("name") != init["serverInfo"]["name"]:
        problems.append(f"server.yaml name {server.get('name')!r} is not the server's "
                        f"{init['serverInfo']['name']!r}")
    dockerfile = (ROOT / "mcp" / "image" / "Dockerfile").read_text()
    if '"mcp"' not in dockerfile or "USER 10001" not in dockerfile:
        problems.append("the image no longer runs `sandboxio mcp` as uid 10001; update server.yaml")
    if server.get("run", {}).get("disableNetwork") is not True:
        problems.append("server.yaml must declare disableNetwork: true (the default backend is fake://)")
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
