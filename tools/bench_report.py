#!/usr/bin/env python3
"""Writes docs/performance.md (and its charts) from the benchmark results scripts/bench-report
collected: the engine benchmarks (Google Benchmark JSON, repetitions aggregated to medians) and
the end-to-end runs (bench_support.hpp's samples files). Every figure is a median; every
comparison is a ratio of medians taken side by side in the same run; each target is shown met
or missed.

  bench_report.py --engine E.json --docker D.json [--e2b X.json] [--e2b-rtt Y.json] \
                  --machine M.txt --out docs/performance.md --charts docs/performance \
                  [--gnuplot gnuplot]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def median(values):
    return statistics.median(values) if values else None


def load(path):
    if not path or not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def engine_medians(doc):
    """name -> (median real time ns, median bytes/s or None), from the median aggregates."""
    out = {}
    for b in doc.get("benchmarks", []):
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        name = b.get("run_name", b["name"])
        unit = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
        out[name] = (b["real_time"] * unit, b.get("bytes_per_second"))
    return out


def fmt(v, digits=1):
    if v is None:
        return "n/a"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def verdict(ratio, target, higher_is_better):
    if ratio is None:
        return "not measured"
    met = ratio >= target if higher_is_better else ratio <= target
    sign = ">=" if higher_is_better else "<="
    return f"{'met' if met else '**missed**'} (target {sign} {target})"


class Report:
    def __init__(self, args):
        self.args = args
        self.lines = []
        self.charts = []

    def w(self, text=""):
        self.lines.append(text)

    def local_targets(self, lat, first, out, egress):
        """local:// beside docker:// and a bare bubblewrap spawn, from the same run."""
        mine = "sandboxio local://"
        if mine not in lat:
            return
        spawn = "bwrap (a process spawn)"

        def of(d, peer):
            if d.get(mine) is None or not d.get(peer):
                return None
            return d[mine] / d[peer]

        through = egress.get("curl in local:// through the proxy")
        direct = egress.get("curl on the host, direct")
        spliced = egress.get("curl on the host, through a splice relay")
        proxied = through / direct if through is not None and direct else None
        floor = spliced / direct if spliced is not None and direct else None
        vs_floor = through / spliced if through is not None and spliced else None

        self.w("### local://: the targets")
        self.w()
        self.w("`sandboxio local://` is sandboxio-agent in bubblewrap on this machine, no daemon; "
               "`bwrap (a process spawn)` starts the program itself under the same bubblewrap "
               "command line each time (what a sandbox per command would cost). The download "
               "through the egress proxy is curl in the sandbox fetching from a server on this "
               "machine's loopback, allowed by the list: the sync API hands the connection "
               "the library checked and connected to the agent, which splices it to curl.")
        self.w()
        self.table(["measure", "value", "verdict"], [
            ["nothing to first output, median ms", fmt(first.get(mine), 1),
             verdict(first.get(mine), 50.0, False)],
            ["`run({\"true\"})` median, ms", fmt(lat.get(mine), 2),
             verdict(lat.get(mine), 3.0, False)],
            ["`run` latency vs a bubblewrap spawn", fmt(of(lat, spawn), 3), ""],
            ["`run` latency vs docker:// (the agent)", fmt(of(lat, "sandboxio"), 3), ""],
            ["first output vs docker:// (the agent)", fmt(of(first, "sandboxio"), 3), ""],
            ["stdout throughput vs docker:// (the agent)", fmt(of(out, "sandboxio"), 3), ""],
            ["download through the egress proxy vs the same curl on the host, direct",
             fmt(proxied, 3), verdict(proxied, 0.5, True)],
            ["a kernel splice relay on the host (no sandbox, no policy) vs direct: the floor "
             "of any second hop here", fmt(floor, 3), ""],
            ["download through the egress proxy vs that splice relay", fmt(vs_floor, 3), ""],
        ])
        if egress:
            self.w("Downloads of the same blob, MiB/s (medians):")
            self.w()
            self.table(["path", "MiB/s"], [[k, fmt(v, 0)] for k, v in egress.items()])

    def table(self, header, rows):
        self.w("| " + " | ".join(header) + " |")
        self.w("|" + "|".join("---" for _ in header) + "|")
        for r in rows:
            self.w("| " + " | ".join(str(c) for c in r) + " |")
        self.w()

    # ---- charts (gnuplot) ----
    def bar_chart(self, name, title, ylabel, bars):
        """bars: [(label, value)]"""
        bars = [(l, v) for l, v in bars if v is not None]
        if not bars or not self.args.gnuplot:
            return None
        data = os.path.join(self.args.charts, name + ".dat")
        with open(data, "w") as f:
            for label, value in bars:
                f.write(f'"{label}" {value}\n')
        png = os.path.join(self.args.charts, name + ".png")
        script = f"""
set terminal png size 900,420 font ",10"
set output "{png}"
set title "{title}"
set ylabel "{ylabel}"
set style fill solid 0.6 border -1
set boxwidth 0.6
set yrange [0:*]
set grid ytics
set xtics noenhanced rotate by -20
set bmargin 5
unset key
plot "{data}" using 0:2:xtic(1) with boxes lc rgb "#3b6ea8", \\
     "" using 0:2:(sprintf("%.1f", $2)) with labels offset 0,0.8
"""
        self.gnuplot(script)
        os.remove(data)
        return png

    def cdf_chart(self, name, title, xlabel, series):
        """series: {label: [samples]}: the distribution of each as a step line."""
        series = {k: sorted(v) for k, v in series.items() if v}
        if not series or not self.args.gnuplot:
            return None
        plots = []
        files = []
        for i, (label, values) in enumerate(series.items()):
            data = os.path.join(self.args.charts, f"{name}.{i}.dat")
            files.append(data)
            with open(data, "w") as f:
                for j, v in enumerate(values):
                    f.write(f"{v} {(j + 1) / len(values)}\n")
            plots.append(f'"{data}" using 1:2 with steps lw 2 title "{label}"')
        png = os.path.join(self.args.charts, name + ".png")
        script = f"""
set terminal png size 900,420 font ",10"
set output "{png}"
set title "{title}"
set xlabel "{xlabel}"
set ylabel "fraction of runs at or below"
set key bottom right noenhanced
set grid
set yrange [0:1.02]
plot {", ".join(plots)}
"""
        self.gnuplot(script)
        for f in files:
            os.remove(f)
        return png

    def gnuplot(self, script):
        subprocess.run([self.args.gnuplot], input=script.encode(), check=True)

    def image(self, png, alt):
        if png:
            rel = os.path.relpath(png, os.path.dirname(self.args.out))
            self.w(f"![{alt}]({rel})")
            self.w()

    # ---- sections ----
    def write(self):
        a = self.args
        engine = load(a.engine)
        docker = load(a.docker)
        e2b = load(a.e2b)
        e2b_rtt = load(a.e2b_rtt)
        machine = open(a.machine).read().strip() if a.machine and os.path.exists(a.machine) else ""
        os.makedirs(a.charts, exist_ok=True)

        self.w("# Performance")
        self.w()
        self.w("Generated by `scripts/bench-report` (do not edit by hand: run it again). Every "
               "figure is the median of the runs given; every comparison is a ratio of medians "
               "measured side by side in the same run, peers taking turns round by round, "
               "because the machine is shared and noisy. Targets come from the benchmark issue; "
               "a missed one is shown as missed, with what explains it.")
        self.w()
        self.w("## Where and when")
        self.w()
        for line in machine.splitlines():
            self.w(f"- {line}")
        versions = {}
        for doc in (docker, e2b):
            if doc:
                versions.update(doc.get("versions", {}))
        for k in sorted(versions):
            self.w(f"- {k}: {versions[k]}")
        self.w()

        if docker:
            self.docker_section(docker)
        if e2b:
            self.e2b_section(e2b)
        if e2b_rtt:
            self.e2b_rtt_section(e2b_rtt, e2b)
        if engine:
            self.engine_section(engine)
        self.w("## Reproduce")
        self.w()
        self.w("```sh")
        self.w("scripts/bench-report            # the full suite, then this page (about 15 minutes)")
        self.w("scripts/bench-report --short    # every benchmark briefly (what CI runs), "
               "the page into build/bench-short/")
        self.w("```")
        self.w()
        self.w("The pieces run on their own too: `build/default/bench/sandboxio_bench_engine`, "
               "`build/default/bench/sandboxio_bench_docker --help`, "
               "`build/default/bench/sandboxio_bench_e2b` (needs the local E2B server: "
               "`tests/e2b/server/ctl.sh start DIR`).")
        with open(a.out, "w") as f:
            f.write("\n".join(self.lines).rstrip() + "\n")

    def docker_section(self, doc):
        p = doc["params"]
        s = doc["samples"]
        self.w("## docker:// on the local engine")
        self.w()
        self.w(f"Image `{p['image']}`; {p['rounds']} interleaved rounds for latency, {p['runs']} "
               f"runs of everything else: {p['stdout_mib']} MiB of stdout, a {p['file_mib']} MiB "
               f"file, {p['concurrent']} concurrent sandboxes. Peers: sandboxio's sync API, the "
               "`docker` CLI, dockerode in a warm Node process (times taken inside it), and a "
               "minimal raw-socket client (the shortest request sequence; the limit). "
               "`sandboxio` is the default, `docker://IMAGE`, where commands and files go "
               "through sandboxio-agent in the container; `sandboxio exec path` is the same API "
               "on `docker://IMAGE?agent=off`, through the daemon's exec and archive API, on the "
               "container the other peers use.")
        self.w()
        lat = {k: median(v) for k, v in s.get("latency_ms", {}).items()}
        first = {k: median(v) for k, v in s.get("first_output_ms", {}).items()}
        out = {k: median(v) for k, v in s.get("stdout_mib_s", {}).items()}
        fw = {k: median(v) for k, v in s.get("file_write_mib_s", {}).items()}
        fr = {k: median(v) for k, v in s.get("file_read_mib_s", {}).items()}
        ours = "sandboxio"

        def ratio(d, peer):
            if d.get(ours) is None or d.get(peer) is None or d[peer] == 0:
                return None
            return d[ours] / d[peer]

        self.w("### The targets")
        self.w()
        rows = [
            ["`run` latency vs docker CLI", fmt(ratio(lat, "docker CLI"), 3),
             verdict(ratio(lat, "docker CLI"), 0.65, False)],
            ["`run` latency vs dockerode", fmt(ratio(lat, "dockerode"), 3),
             verdict(ratio(lat, "dockerode"), 1.0, False)],
            ["`run` latency vs raw socket", fmt(ratio(lat, "raw socket"), 3),
             verdict(ratio(lat, "raw socket"), 1.1, False)],
            [f"{p['stdout_mib']} MiB stdout throughput vs docker CLI", fmt(ratio(out, "docker CLI"), 3),
             verdict(ratio(out, "docker CLI"), 1.1, True)],
            [f"{p['stdout_mib']} MiB stdout throughput vs dockerode", fmt(ratio(out, "dockerode"), 3),
             verdict(ratio(out, "dockerode"), 1.15, True)],
        ]
        self.table(["comparison (sandboxio / peer)", "ratio", "verdict"], rows)
        self.w("Latency ratios below 1 and throughput ratios above 1 favour sandboxio.")
        self.w()

        agent = "sandboxio"
        if agent in lat:
            def of(d, peer):
                if d.get(agent) is None or not d.get(peer):
                    return None
                return d[agent] / d[peer]

            self.w("### The agent's targets")
            self.w()
            self.w("`sandboxio` through the agent (the default) against the peers, "
                   "and its own `run` median in milliseconds.")
            self.w()
            arows = [
                ["`run({\"true\"})` median, ms", fmt(lat.get(agent), 2),
                 verdict(lat.get(agent), 5.0, False)],
                ["`run` latency vs docker CLI", fmt(of(lat, "docker CLI"), 3),
                 verdict(of(lat, "docker CLI"), 0.05, False)],
                [f"{p['stdout_mib']} MiB stdout throughput vs docker CLI",
                 fmt(of(out, "docker CLI"), 3), verdict(of(out, "docker CLI"), 1.1, True)],
                [f"{p['file_mib']} MiB file write vs raw archive API",
                 fmt(of(fw, "raw socket"), 3), verdict(of(fw, "raw socket"), 1.0, True)],
                [f"{p['file_mib']} MiB file read vs raw archive API",
                 fmt(of(fr, "raw socket"), 3), verdict(of(fr, "raw socket"), 1.0, True)],
                ["nothing to first output vs raw create, start and exec",
                 fmt(of(first, "raw socket"), 3), verdict(of(first, "raw socket"), 1.0, False)],
            ]
            code = {k: median(v) for k, v in s.get("code_ms", {}).items()}
            warm = code.get("sandboxio, warm context")
            if warm is not None:
                arows.append(["`run_code(\"1+1\")` on a warm context, median ms", fmt(warm, 2),
                              verdict(warm, 10.0, False)])
            self.table(["comparison (agent / peer)", "value", "verdict"], arows)
            if code:
                self.w("`run_code(\"1+1\")`, median ms: in a context the agent keeps warm, in a "
                       "fresh context of its own (python3 starts), and as `python3 -c` through "
                       "the daemon's exec.")
                self.w()
                self.table(["path", "median ms"], [[k, fmt(v, 2)] for k, v in code.items()])
            self.w("Where the agent's path costs more than the exec path: creating the sandbox "
                   "uploads the agent (one archive `PUT` of 1.1 MB) and waits for its handshake "
                   "before the first command; every byte of output is copied once more (the "
                   "command's pipe, the agent, then its socket, or over the attach stream the "
                   "container's stdout FIFO and dockerd), one more process on the same cores.")
            self.w()
            self.explain_agent_misses(of(fw, "raw socket"), of(first, "raw socket"),
                                      s.get("concurrent_peak_mib", {}))
        self.local_targets(lat, first, out,
                           {k: median(v) for k, v in s.get("egress_download_mib_s", {}).items()})
        self.python_targets(lat, {k: median(v) for k, v in s.get("latency_burst_ms", {}).items()},
                            s.get("concurrent_wall_ms", {}), s.get("concurrent_peak_mib", {}),
                            p.get("concurrent", "?"))
        peers = [k for k in ["sandboxio", "sandboxio from Python, sync",
                             "sandboxio from Python, asyncio", "sandboxio exec path",
                             "sandboxio local://",
                             "bwrap (a process spawn)", "sandboxio local:// gVisor",
                             "sandboxio docker:// gVisor", "raw socket", "dockerode", "docker CLI"]
                 if k in lat]
        self.w("### Medians")
        self.w()
        self.table(
            ["peer", "run({\"true\"}) ms", "first output ms", "stdout MiB/s", "file write MiB/s",
             "file read MiB/s"],
            [[k, fmt(lat.get(k), 2), fmt(first.get(k)), fmt(out.get(k)), fmt(fw.get(k)),
              fmt(fr.get(k))] for k in peers])
        profile = self.steps_profile(s.get("raw_run_steps_ms", {}), lat)
        if profile:
            self.w("Where the time of a run goes." + profile)
            self.w()
        self.image(self.cdf_chart("docker-latency", "docker:// run(true) latency",
                                  "milliseconds", {k: s["latency_ms"][k] for k in peers}),
                   "run latency distribution per peer")
        self.image(self.bar_chart("docker-stdout", f"{p['stdout_mib']} MiB of stdout (median)",
                                  "MiB/s", [(k, out.get(k)) for k in peers]),
                   "stdout throughput per peer")
        self.image(self.bar_chart("docker-file", f"{p['file_mib']} MiB file, write then read (median)",
                                  "MiB/s", [(f"{k} write", fw.get(k)) for k in peers] +
                                  [(f"{k} read", fr.get(k)) for k in peers]),
                   "file throughput per peer")
        cw = s.get("concurrent_wall_ms", {})
        cm = s.get("concurrent_peak_mib", {})
        if cw:
            self.w(f"### {p['concurrent']} sandboxes at once")
            self.w()
            self.w("Each sandbox is created, runs `echo ready` and is removed; every mode runs "
                   "in a fresh process of its own so that its peak resident memory (VmHWM, "
                   "maxRSS) is its own. The wall time is the daemon's (it starts the "
                   "containers); the memory is the client's. The docker CLI has no row: a "
                   "hundred CLI processes measure process starts, and their memory is spread "
                   "over a hundred processes.")
            self.w()
            self.concurrent_table(cw, cm)
            self.image(self.bar_chart("docker-concurrent-wall",
                                      f"{p['concurrent']} sandboxes at once: wall time (median)",
                                      "seconds", [(k, median(v) / 1000) for k, v in cw.items()]),
                       "concurrent wall time")
            self.image(self.bar_chart("docker-concurrent-memory",
                                      f"{p['concurrent']} sandboxes at once: peak memory (median)",
                                      "MiB", [(k, median(v)) for k, v in cm.items()]),
                       "concurrent peak memory")
        self.explain_misses(lat, out, ratio, s.get("raw_run_steps_ms", {}))

    def explain_agent_misses(self, write, first, peak):
        """What is known about each of the agent's targets that was missed (profiles taken with
        `perf record -a -g build/default/bench/sandboxio_bench_docker --only SCENARIO`)."""
        notes = []
        if write is not None and write < 1.0:
            notes.append(
                f"File write against the raw archive API: {write:.3f}. The machine is mostly "
                "idle during it (about a third of the samples are the idle task) and the agent "
                "takes under 5% of the CPU; the client's top symbols are the kernel's page "
                "faults and page clearing (`exc_page_fault`, `clear_page_erms`) and copies "
                "(`_copy_from_iter`). The library copies the content twice before it reaches "
                "the socket (`write_file` takes its own `Bytes`, then every 256 KiB frame is a "
                "new string), 512 MiB of fresh memory for a 256 MiB file, where the raw client "
                "writes its one buffer. Sends that share the caller's buffer (a `request::Send` "
                "holding a reference, not a copy) are the fix; not done yet.")
        if first is not None and first > 1.0:
            notes.append(
                f"Nothing to first output against the raw create, start and exec: {first:.3f}. "
                "The agent's path has more steps before its first command: the archive `PUT` "
                "of the agent, the attach, the start, the handshake on the attach stream, the "
                "inspection for the init's pid and a second handshake on the direct socket; "
                "the raw client's exec costs one runc start instead. The steps are sequential "
                "today; opening the direct socket in the background, after the create has "
                "completed, would take the last two off the path.")
        ours = peak.get("sandboxio asio, 1 thread")
        if ours:
            notes.append(
                f"Peak memory of 100 sandboxes at once: {median(ours):.0f} MiB on one Asio "
                "thread. Every create holds its own copy of the 1.1 MB agent until the engine "
                "has read the upload, so a hundred creates in flight hold about 110 MiB of it; "
                "the exec path, which uploads nothing, peaked at 21 MiB (the 2026-12-04 report). "
                "The shared send buffers above would hold the agent once.")
        self.notes_section("What explains the agent's misses", notes)

    def notes_section(self, title, notes):
        """A section of bullet points, or nothing when there are none."""
        if not notes:
            return
        self.w(f"### {title}")
        self.w()
        for n in notes:
            self.w(f"- {n}")
        self.w()

    def explain_misses(self, lat, out, ratio, steps):
        """What the numbers of this run say about each target that was missed."""
        notes = []
        cli = ratio(lat, "docker CLI")
        raw_vs_cli = (lat["raw socket"] / lat["docker CLI"]
                      if lat.get("raw socket") and lat.get("docker CLI") else None)
        if cli is not None and cli > 0.65:
            notes.append(
                f"`run` latency against the docker CLI: {cli:.3f}. Even the raw-socket client, "
                f"the shortest possible request sequence (exec create, start, inspect), is "
                f"{fmt(raw_vs_cli, 3)} of the CLI here: a run is three round trips that dockerd "
                "takes tens of milliseconds to serve (runc starts the process), and the CLI's own "
                "overhead (a process start, a version ping) is small next to that. The target "
                "is below the daemon's floor on this engine; the raw row is the proof."
                + self.steps_profile(steps, lat))

        rawr = ratio(lat, "raw socket")
        if rawr is not None and rawr > 1.1:
            notes.append(
                f"`run` latency against the raw socket: {rawr:.3f}. sandboxio sends the same "
                "three requests, but each on a fresh connection (the raw client keeps one for "
                "create and inspect), and it demultiplexes and records the output; the chart "
                "shows how much the two distributions overlap on this shared machine.")
        for peer, target in (("docker CLI", 1.1), ("dockerode", 1.15)):
            r = ratio(out, peer)
            if r is not None and r < target:
                limit = ratio(out, "raw socket")
                notes.append(
                    f"stdout throughput against {peer}: {r:.3f}. The raw reader, which only "
                    f"counts bytes, is the ceiling; sandboxio reaches {fmt(limit, 3)} of it. "
                    "Every client reads the same bytes from the same daemon, whose copy through "
                    "its stream multiplexer is the bottleneck (`perf record -g "
                    "build/default/bench/sandboxio_bench_docker --only stdout`).")
        self.notes_section("What explains the misses", notes)

    @staticmethod
    def steps_profile(steps, lat):
        """Where the raw client's run goes, request by request (medians)."""
        if not steps:
            return ""
        order = sorted(steps, key=lambda n: ("create" not in n, "inspect" in n))
        parts = ", ".join(f"{name} {median(steps[name]):.1f} ms" for name in order)
        text = f" The raw client's run, request by request (medians): {parts}."
        if lat.get("docker CLI") and lat.get("raw socket") and lat.get("sandboxio"):
            text += (f" The docker CLI's median is {lat['docker CLI'] - lat['raw socket']:+.1f} ms "
                     f"from the raw client's, sandboxio's "
                     f"{lat['sandboxio'] - lat['raw socket']:+.1f} ms.")
        return text

    def e2b_section(self, doc):
        p = doc["params"]
        s = doc["samples"]
        self.w("## e2b:// against the local E2B-compatible server")
        self.w()
        self.w(f"Template `{p['template']}` on `tests/e2b/server` (the server E2B's official SDKs "
               "are tested against), over TLS with the test CA; sandboxio next to E2B's official "
               f"JS SDK in a warm Node process. {p['rounds']} rounds of latency, {p['runs']} runs "
               f"of the rest, a {p['file_mib']} MiB file. The server is local, so these figures "
               "measure the clients and the protocol, not E2B's cloud.")
        self.w()
        peers = [k for k in ["sandboxio", "E2B JS SDK"] if k in s.get("latency_ms", {})]
        med = {sc: {k: median(v) for k, v in s.get(sc, {}).items()} for sc in s}

        def r(sc):
            d = med.get(sc, {})
            if d.get("sandboxio") is None or d.get("E2B JS SDK") in (None, 0):
                return "n/a"
            return fmt(d["sandboxio"] / d["E2B JS SDK"], 3)

        self.table(["peer", "run ms", "first output ms", "file write MiB/s", "file read MiB/s"],
                   [[k, fmt(med.get("latency_ms", {}).get(k), 2),
                     fmt(med.get("first_output_ms", {}).get(k)),
                     fmt(med.get("file_write_mib_s", {}).get(k)),
                     fmt(med.get("file_read_mib_s", {}).get(k))] for k in peers] +
                   [["ratio sandboxio / SDK", r("latency_ms"), r("first_output_ms"),
                     r("file_write_mib_s"), r("file_read_mib_s")]])
        self.image(self.cdf_chart("e2b-latency", "e2b:// run latency", "milliseconds",
                                  {k: s["latency_ms"][k] for k in peers}),
                   "e2b run latency distribution")
        self.e2b_concurrent(doc)

    def python_targets(self, lat, burst, cw, cm, n):
        """`import sandboxio` (python/) next to the C++ API it wraps."""
        cpp, cpp_burst = lat.get("sandboxio"), burst.get("sandboxio")
        names = {"sync": "sandboxio from Python, sync", "asyncio": "sandboxio from Python, asyncio"}
        if cpp is None or lat.get(names["sync"]) is None:
            return
        self.w("### From Python")
        self.w()
        self.w("`import sandboxio` (`python/`) in a warm Python process (`bench/python/peer.py`), "
               "times taken inside it, from a running asyncio loop: the sync API, which is the "
               "C++ sync API with the GIL released, and the asyncio API, whose transport is "
               "asyncio itself driving the same machine. Each round, the C++ sync API and the "
               "two Python ones take turns in an order that rotates: first one `run` each (the "
               "rows below), then a burst of 10 in a row each, whose median compares the APIs "
               "warm, without the wake-up of a process that slept between rounds.")
        self.w()
        rows = []
        for api, name in names.items():
            if burst.get(name) is not None and cpp_burst:
                rows.append([f"Python {api} `run` vs the C++ sync API, warm (burst median)",
                             fmt(burst[name] / cpp_burst, 3), verdict(burst[name] / cpp_burst, 1.10, False)])
            if lat.get(name) is not None:
                rows.append([f"Python {api} `run` vs the C++ sync API, one call a round",
                             fmt(lat[name] / cpp, 3), "measured"])
        py = "sandboxio from Python, asyncio, 1 loop"
        asio = "sandboxio asio, 1 thread"
        if cw.get(py) and cw.get(asio):
            rows.append([f"{n} sandboxes at once from one asyncio loop, wall time vs Asio",
                         fmt(median(cw[py]) / median(cw[asio]), 3), "measured"])
            rows.append(["the same, peak memory vs Asio",
                         fmt(median(cm.get(py, [0])) / median(cm.get(asio, [1])), 3), "measured"])
        self.table(["comparison (Python / C++)", "value", "verdict"], rows)
        if burst:
            self.table(["API", "burst median ms"], [[k, fmt(v, 3)] for k, v in burst.items()])
        self.w("What the asyncio path adds is the event loop's: a reply wakes the loop, the "
               "machine takes it through the extension, and the awaiting task resumes on the next "
               "loop iteration (about 3.6 iterations and 1.6 reads per `run`, profiled with "
               "cProfile; Python's own share is a few tens of microseconds). The memory of "
               f"{n} sandboxes from Python is the interpreter's, plus a copy of each 1.1 MB agent "
               "upload in Python bytes and in asyncio's write buffer while it drains.")
        self.w()

    def concurrent_table(self, cw, cm):
        """Wall time and peak memory of each mode of a concurrent scenario, as medians."""
        self.table(["mode", "wall s (median)", "peak memory MiB (median)", "runs"],
                   [[k, fmt(median(cw[k]) / 1000, 2), fmt(median(cm.get(k, [])), 1),
                     len(cw[k])] for k in cw])

    def e2b_concurrent(self, doc):
        p = doc["params"]
        s = doc["samples"]
        cw = s.get("concurrent_wall_ms", {})
        cm = s.get("concurrent_peak_mib", {})
        if not cw:
            return
        n = p.get("concurrent", "?")
        self.w(f"{n} sandboxes at once, each created, running `echo ready` and killed: "
               "sandboxio's Asio API from one thread, the SDK with `Promise.all`, each in a "
               "fresh process (its peak resident memory is its own; Node's own runtime is "
               "part of the SDK's).")
        self.w()
        self.concurrent_table(cw, cm)
        mine = median(cw.get("sandboxio asio, 1 thread", [0]) or [0])
        sdk = median(cw.get("E2B JS SDK, Promise.all", [0]) or [0])
        if mine and sdk:
            why = (" Each sandbox has connections of its own (two TLS handshakes each, on a "
                   "server that does them on one thread), where the SDK multiplexes every "
                   "sandbox over one HTTP/2 connection per address." if mine > sdk else "")
            self.w(f"Wall time, sandboxio / SDK: **{mine / sdk:.3f}**, "
                   f"{verdict(mine / sdk, 1.0, False)}.{why}")
            self.w()

    def e2b_rtt_section(self, doc, loopback):
        p = doc["params"]
        s = doc["samples"]
        rtt = float(p.get("rtt_ms", 0))
        self.w(f"## e2b:// at {rtt:g} ms of round-trip time")
        self.w()
        self.w(f"The same work, with both clients reaching the local server through "
               f"`bench/node/delay_proxy.mjs`, which holds every chunk for half of {rtt:g} ms in "
               "each direction and a new connection for one round trip: E2B's cloud is 20-100 "
               "ms from its users. The proxy adds latency, not a bandwidth limit or a TCP window, "
               "so bulk transfers over one TCP connection are flattered; HTTP/2's own flow-control "
               "windows (which the SDK negotiates) still pay the round trips, as they would over "
               f"a real network. {p['rounds']} rounds of latency, {p['runs']} runs of the rest, "
               f"a {p['file_mib']} MiB file.")
        self.w()
        med = {sc: {k: median(v) for k, v in s.get(sc, {}).items()} for sc in s}
        peers = [k for k in ["sandboxio", "E2B JS SDK"] if k in s.get("latency_ms", {})]
        self.table(["peer", "run ms", "run in RTTs", "first output ms", "file write MiB/s",
                    "file read MiB/s"],
                   [[k, fmt(med.get("latency_ms", {}).get(k), 1),
                     fmt(med.get("latency_ms", {}).get(k, 0) / rtt if rtt else None, 2),
                     fmt(med.get("first_output_ms", {}).get(k)),
                     fmt(med.get("file_write_mib_s", {}).get(k)),
                     fmt(med.get("file_read_mib_s", {}).get(k))] for k in peers])

        def ratio(sc, invert=False):
            d = med.get(sc, {})
            a, b = d.get("sandboxio"), d.get("E2B JS SDK")
            if a in (None, 0) or b in (None, 0):
                return None
            return b / a if invert else a / b

        lat = med.get("latency_ms", {}).get("sandboxio")
        # The round trips a run spends: what the distance added to it, over the distance. The
        # near runs were timed in the same rounds on a sandbox reached without the proxy, so the
        # server's own time, which drifts with the machine's load, cancels; without them, the
        # loopback pass (minutes earlier) stands in.
        near = med.get("latency_near_ms", {}).get("sandboxio")
        how = "(run here - run without the proxy, interleaved in the same rounds) / RTT"
        if near is None and loopback:
            near = median(loopback["samples"].get("latency_ms", {}).get("sandboxio", []) or [0])
            how = "(run here - run on loopback) / RTT"
        spent = (lat - near) / rtt if lat and near and rtt else None
        self.table(["measure", "value", "verdict"], [
            ["round trips a `run({\"true\"})` spends: " + how,
             fmt(spent, 2), verdict(spent, 1.2, False)],
            ["`run({\"true\"})` without the proxy in the same rounds (the server's own time), ms",
             fmt(near, 1), ""],
            ["`run({\"true\"})` over the RTT, the server's own time included",
             fmt(lat / rtt if lat and rtt else None, 2), ""],
            ["run time, sandboxio / SDK", fmt(ratio("latency_ms"), 3),
             verdict(ratio("latency_ms"), 1.0, False)],
            ["first output, sandboxio / SDK", fmt(ratio("first_output_ms"), 3),
             verdict(ratio("first_output_ms"), 1.0, False)],
            ["file write time, sandboxio / SDK", fmt(ratio("file_write_mib_s", True), 3),
             verdict(ratio("file_write_mib_s", True), 0.8, False)],
            ["file read time, sandboxio / SDK", fmt(ratio("file_read_mib_s", True), 3),
             verdict(ratio("file_read_mib_s", True), 0.8, False)],
        ])
        self.w("A run is one exchange on a kept-alive connection: one round trip plus the "
               "server's time to start and reap the process (the near run above). A fresh sandbox "
               "reuses the connections an ended one left to the process (the sync API's pool, "
               "like the SDK's undici agent): this local server serves every sandbox's envd on "
               "one address, so both clients reuse the control-plane and the envd connection. "
               "On E2B each sandbox's envd has a host name of its own, and both pay that "
               "connection (TCP, TLS 1.3: two round trips before the request).")
        self.w()
        self.e2b_concurrent(doc)

    def engine_section(self, doc):
        m = engine_medians(doc)
        self.w("## The engine, no I/O")
        self.w()
        ctx = doc.get("context", {})
        self.w(f"Google Benchmark, {ctx.get('num_cpus', '?')} CPUs at "
               f"{ctx.get('mhz_per_cpu', '?')} MHz, medians of the repetitions. Throughput next to "
               "`memcpy` of the same bytes, the physical limit.")
        self.w()
        memcpy = m.get("BM_Memcpy", (None, None))[1]
        rows = []
        for name, (ns, bps) in sorted(m.items()):
            ratio = (bps / memcpy) if (bps and memcpy) else None
            rows.append([f"`{name}`", fmt(ns, 0), fmt(bps / 2**20 if bps else None, 0),
                         fmt(ratio, 3) if ratio else ""])
        self.table(["benchmark", "ns per iteration", "MiB/s", "vs memcpy"], rows)
        demux = [bps for name, (ns, bps) in m.items() if name.startswith("BM_DockerDemux") and bps]
        if demux and memcpy:
            ratio = min(demux) / memcpy
            self.w(f"Docker stream demultiplexing against memcpy (the smaller frames): "
                   f"**{ratio:.3f}**, {verdict(ratio, 0.5, True)}.")
            self.w()
        fake = m.get("BM_FakeRunOverhead")
        if fake:
            self.w(f"Per-operation overhead of `run` on `fake://` (create nothing, run, collect): "
                   f"**{fake[0]:,.0f} ns**.")
            self.w()
        traced = m.get("BM_FakeRunTraced")
        dead = m.get("BM_FakeRunTracedDeadEndpoint")
        if fake and traced and dead:
            ratio = dead[0] / traced[0]
            self.w(f"OpenTelemetry: a traced `run` (span ids, TRACEPARENT for the command) takes "
                   f"**{traced[0]:,.0f} ns**; with the exporter pointed at a dead endpoint "
                   f"**{dead[0]:,.0f} ns**, **{ratio:.3f}x** the traced run "
                   f"({verdict(ratio, 1.05, False)}).")
            self.w()
        self.image(self.bar_chart("engine-throughput", "engine paths (median)", "GiB/s",
                                  [(n.replace("BM_", ""), bps / 2**30)
                                   for n, (ns, bps) in sorted(m.items()) if bps]),
                   "engine throughput next to memcpy")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine")
    ap.add_argument("--docker")
    ap.add_argument("--e2b")
    ap.add_argument("--e2b-rtt")
    ap.add_argument("--machine")
    ap.add_argument("--out", required=True)
    ap.add_argument("--charts", required=True)
    ap.add_argument("--gnuplot", default="gnuplot")
    args = ap.parse_args()
    if args.gnuplot and subprocess.run(["sh", "-c", f"command -v {args.gnuplot}"],
                                       capture_output=True).returncode != 0:
        print("bench_report: gnuplot not found: no charts", file=sys.stderr)
        args.gnuplot = None
    Report(args).write()
    print(f"bench_report: wrote {args.out}")


if __name__ == "__main__":
    main()
