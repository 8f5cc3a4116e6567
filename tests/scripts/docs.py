#!/usr/bin/env python3
"""The documents' examples, run as a reader would run them (ctest docs_commands, label cpu).

  tests/scripts/docs.py BUILD_DIR [--verbose]     (--verbose also lists the synopsis lines and
                                                  each mention whose options were found)

A reader copies a command from README.md or docs/VIEWER.md and expects it to work, and reads the
output the README prints and expects the program to print it. So:

- Every command line in a fenced block (continuation lines joined, the comment after " # " cut)
  runs in a scratch folder, with attnlab and attnlab-view (bare or as build/cli/attnlab,
  build/viewer/attnlab-view) standing for the binaries of BUILD_DIR, and must exit 0 with no
  "error:" on stderr and no NaN in its output. The files the examples name (q.npy, k.npy, v.npy,
  do.npy, bias.npy, docs.csv) are written there first, small. Three changes keep the suite short
  and headless, none of them to the command's own options: bench gets --repeat 1 --warmup 0
  appended; attnlab-view gets --screenshot appended and SDL's dummy video driver (it renders one
  frame and exits); a command asking for --backend cuda where no device answers is listed as
  SKIP, as the GPU tests are.
- Lines that are a synopsis (alternatives "a|b", optional "[...]", "…") are not commands and are
  counted, not run. Commands that need what the test cannot have are listed as SKIP with the
  reason: the capture of a Hugging Face model (a download), the bundle it writes, the benchmark
  script against PyTorch (tests/scripts/smoke.sh covers it), the repository's own scripts/run and
  scripts/test and the build commands (the suite is their run).
- The outputs the README shows: `attnlab demo --lang en` in full (the timing aside), the Chinese
  excerpt line for line, `attnlab describe --lang zh` exactly, the JSON keys of `run` in the order
  the README lists them, and the keys of the walk's JSON.

Python's standard library only. Exit 0 when everything passes (SKIPs included), 1 otherwise.
"""
import difflib
import json
import os
import re
import shlex
import struct
import subprocess
import sys
import tempfile

DOCS = ["README.md", "docs/VIEWER.md"]
# Where options are only named (inline code, synopses), every document.
OPTION_DOCS = DOCS + ["docs/ARCHITECTURE.md", "docs/PERFORMANCE.md"]
SUBCOMMANDS = ("demo", "run", "describe", "verify", "bench", "walk", "backward")
TIMEOUT_S = 300


def fenced_blocks(path):
    """(first line number, info string, lines, the text just above the fence) of each block."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        above = " ".join(l for l in lines[max(0, i - 3):i] if l.strip())
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        out.append((i + 2, m.group(1), lines[i + 1:j], above))
        i = j + 1
    return out


def commands(block_lines):
    """The block's lines, continuations joined and comments cut, with their offsets."""
    out, pending, start = [], "", 0
    for k, line in enumerate(block_lines):
        if not pending:
            start = k
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        text = re.sub(r"\s+#\s.*$", "", pending + line).strip()
        pending = ""
        if text:
            out.append((start, " ".join(text.split())))
    return out


PROGRAMS = ("attnlab", "build/cli/attnlab", "attnlab-view", "build/viewer/attnlab-view")


def classify(cmd):
    """None to run it, or (kind, reason) for a line not run."""
    words = cmd.split()
    first = words[1] if words[0] == "SDL_VIDEODRIVER=dummy" and len(words) > 1 else words[0]
    if re.search(r"\[|\||…|\.\.\.", cmd):
        return ("synopsis", "") if first in PROGRAMS else ("other", "")
    if "attnlab_capture.py" in cmd:
        return ("skip", "captures a Hugging Face model (a download)")
    if "--bundle cat" in cmd:
        return ("skip", "reads the bundle the capture above writes")
    if first == "scripts/compare-torch":
        return ("skip", "a benchmark against PyTorch (tests/scripts/smoke.sh runs it on a tiny case)")
    if first in ("./scripts/run", "./scripts/test", "cmake", "ctest"):
        return ("skip", "the build and the suite themselves")
    if first in PROGRAMS or first == "scripts/synthetic-bundle":
        return None
    return ("other", "")


def named_options(path):
    """(line, program, options) for each mention of a program with options: inline code spans
    (`attnlab SUB --opt ...`, `attnlab-view --opt ...`) and the lines of fenced blocks that begin
    with a program, with the synopsis lines that continue them ("[", "|", "(")."""
    out = []
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    in_block, last, found, prose = False, None, [], []
    for no, line in enumerate(lines, 1):
        if line.startswith("```"):
            in_block, last = not in_block, None
            prose.append("")
            continue
        prose.append("" if in_block else line)
        if not in_block:
            continue
        words = line.split()
        if words and words[0] == "SDL_VIDEODRIVER=dummy":
            words = words[1:]
        if words and os.path.basename(words[0]) in ("attnlab", "attnlab-view"):
            last = words
            found.append((no, " ".join(words)))
        elif words and last is not None and words[0][0] in "[|(":
            found.append((no, " ".join(last[:2]) + " " + " ".join(words)))
        else:
            last = None
    # Inline code, which may run over a line break.
    text = "\n".join(prose)
    for m in re.finditer(r"`((?:[\w.-]+/)*attnlab(?:-view)? [^`]*)`", text):
        found.append((text.count("\n", 0, m.start()) + 1, " ".join(m.group(1).split())))
    for no, text in sorted(found):
        text = re.sub(r"\s#\s.*$", "", text)  # a comment's words are not options
        words = text.split()
        program = "attnlab-view" if words[0].endswith("attnlab-view") else "attnlab"
        sub = words[1] if program == "attnlab" and len(words) > 1 and words[1] in SUBCOMMANDS else None
        if program == "attnlab" and sub is None:
            continue  # `attnlab --help`, an error text: no subcommand's options
        opts = re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text.split("&&")[0])
        if opts:
            out.append((no, program + ("" if sub is None else " " + sub), opts))
    return out


def write_npy(path, rows):
    """A float32 .npy file of a list of equal rows (the header by hand, as scripts/synthetic-bundle)."""
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (len(rows), len(rows[0]))
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(struct.pack("<%df" % (len(rows) * len(rows[0])), *[x for r in rows for x in r]))


def fixtures(where):
    n, d = 8, 4

    def matrix(seed, r, c):
        return [[((seed * 7 + i * 5 + j * 3) % 11 - 5) / 5.0 for j in range(c)] for i in range(r)]

    for name, seed in (("q", 1), ("k", 2), ("v", 3), ("do", 4)):
        write_npy(os.path.join(where, name + ".npy"), matrix(seed, n, d))
    write_npy(os.path.join(where, "bias.npy"), matrix(5, n, n))
    with open(os.path.join(where, "docs.csv"), "w") as f:
        f.write("\n".join(str(i // 3) for i in range(n)) + "\n")


def wrappers(where, build):
    cli = os.path.join(build, "cli", "attnlab")
    view = os.path.join(build, "viewer", "attnlab-view")
    bin_dir = os.path.join(where, "bin")
    os.makedirs(bin_dir)
    with open(os.path.join(bin_dir, "attnlab"), "w") as f:
        f.write('#!/bin/sh\nif [ "$1" = bench ]; then exec %s "$@" --repeat 1 --warmup 0; fi\nexec %s "$@"\n'
                % (shlex.quote(cli), shlex.quote(cli)))
    with open(os.path.join(bin_dir, "attnlab-view"), "w") as f:
        f.write('#!/bin/sh\ncase " $* " in *" --help "*) exec %s "$@";; esac\n'
                'export SDL_VIDEODRIVER=dummy\nexec %s "$@" --screenshot "$ATTNLAB_DOCS_SHOT"\n'
                % (shlex.quote(view), shlex.quote(view)))
    for name in ("attnlab", "attnlab-view"):
        os.chmod(os.path.join(bin_dir, name), 0o755)
    for sub, name in (("cli", "attnlab"), ("viewer", "attnlab-view")):
        os.makedirs(os.path.join(where, "build", sub))
        os.symlink(os.path.join(bin_dir, name), os.path.join(where, "build", sub, name))
    return os.path.exists(view)


def run(cmd, cwd, env):
    try:
        p = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True,
                           timeout=TIMEOUT_S)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return 124, "", "timed out after %d s" % TIMEOUT_S


def masked_timing(text):
    return re.sub(r"· [0-9.]+ ms$", "· … ms", text.strip("\n"), flags=re.M)


def json_keys_in_order(block_lines):
    """The top-level keys the README lists, in order (parenthesised ones are optional: left out)."""
    text = re.sub(r"\([^()]*\)", "", " ".join(block_lines))
    keys, depth = [], 0
    for m in re.finditer(r'"([a-z_0-9]+)":|[{}\[\]]', text):
        tok = m.group(0)
        if tok in "{[":
            depth += 1
        elif tok in "}]":
            depth -= 1
        elif depth == 1:
            keys.append(m.group(1))
    return keys


def main():
    build = os.path.abspath(sys.argv[1])
    verbose = "--verbose" in sys.argv[2:]
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    fails, counts = [], {"ok": 0, "skip": 0, "synopsis": 0, "output": 0, "options": 0}

    def check(ok, what, detail="", quiet=False):
        if not ok or not quiet or verbose:
            print(("ok: " if ok else "FAILED: ") + what)
        if not ok:
            fails.append(what)
            if detail:
                print("  " + detail.strip().replace("\n", "\n  ")[:3000])

    with tempfile.TemporaryDirectory() as tmp:
        fixtures(tmp)
        have_viewer = wrappers(tmp, build)
        # The repository's scripts, each a link in a folder of the scratch tree, so that a script
        # that finds the binary beside itself (../build/cli/attnlab) finds the stand-in.
        os.makedirs(os.path.join(tmp, "scripts"))
        for name in os.listdir(os.path.join(repo, "scripts")):
            os.symlink(os.path.join(repo, "scripts", name), os.path.join(tmp, "scripts", name))
        env = dict(os.environ)
        env["PATH"] = os.path.join(tmp, "bin") + os.pathsep + env.get("PATH", "")
        env["ATTNLAB_DOCS_SHOT"] = os.path.join(tmp, "shot.png")

        # Every option the documents name exists in its program's help.
        helps = {}
        for doc in OPTION_DOCS:
            for no, program, opts in named_options(os.path.join(repo, doc)):
                if program.startswith("attnlab-view") and not have_viewer:
                    continue
                if program not in helps:
                    _, out, err = run(program + " --help", tmp, env)
                    helps[program] = out + err
                unknown = sorted({o for o in opts if o != "--help" and not re.search(re.escape(o) + r"(?![a-z0-9-])", helps[program])})
                check(not unknown, "%s:%d: %s's options in its --help" % (doc, no, program),
                      "not in `%s --help`: %s" % (program, " ".join(unknown)), quiet=True)
                counts["options"] += 1

        for doc in DOCS:
            for first_line, info, lines, above in fenced_blocks(os.path.join(repo, doc)):
                # The outputs the README shows.
                if "`attnlab demo --lang en` prints" in above:
                    _, out, _ = run("attnlab demo --lang en", tmp, env)
                    check(masked_timing(out) == masked_timing("\n".join(lines)),
                          "%s:%d is what `attnlab demo --lang en` prints" % (doc, first_line),
                          "\n".join(difflib.unified_diff(
                              masked_timing("\n".join(lines)).split("\n"), masked_timing(out).split("\n"),
                              "README", "attnlab", lineterm="")))
                    counts["output"] += 1
                if "(`attnlab demo --lang zh`, an excerpt)" in above:
                    _, out, _ = run("attnlab demo --lang zh", tmp, env)
                    real = out.split("\n")
                    at, missing = 0, None
                    for line in lines:
                        if line == "…":
                            continue
                        try:
                            at = real.index(line, at) + 1
                        except ValueError:
                            missing = line
                            break
                    check(missing is None, "%s:%d: each line of the excerpt, in order, in `attnlab demo --lang zh`"
                          % (doc, first_line), "not found (in order): %r" % missing)
                    counts["output"] += 1
                if "`attnlab describe --lang zh` prints only the description" in above:
                    _, out, _ = run("attnlab describe --lang zh", tmp, env)
                    check(out.strip() == "\n".join(lines).strip(),
                          "%s:%d is what `attnlab describe --lang zh` prints" % (doc, first_line), out)
                    counts["output"] += 1
                if "Keys, in this order" in above:
                    _, out, _ = run("attnlab demo --format json", tmp, env)
                    real = list(json.loads(out).keys())
                    shown = json_keys_in_order(lines)
                    check(real == shown, "%s:%d: `attnlab demo --format json`'s keys in the order shown"
                          % (doc, first_line), "README %s\nattnlab %s" % (shown, real))
                    counts["output"] += 1
                if "JSON (stable; −∞" in above:
                    _, out, _ = run("attnlab walk --format json", tmp, env)
                    walk = json.loads(out)
                    real = set(walk) | set(walk["tiles"][0])
                    shown = set(re.findall(r'"([a-z_0-9]+)":', " ".join(lines)))
                    check(real == shown, "%s:%d: the keys of `attnlab walk --format json` (and of a tile)"
                          % (doc, first_line), "only in README %s\nonly in attnlab %s"
                          % (sorted(shown - real), sorted(real - shown)))
                    counts["output"] += 1
                if info not in ("", "sh"):
                    continue
                # The commands.
                for offset, cmd in commands(lines):
                    where = "%s:%d" % (doc, first_line + offset)
                    kind = classify(cmd)
                    if kind is not None:
                        if kind[0] == "skip":
                            print("SKIP: %s %s (%s)" % (where, cmd, kind[1]))
                            counts["skip"] += 1
                        elif kind[0] == "synopsis":
                            counts["synopsis"] += 1
                            if verbose:
                                print("synopsis: %s %s" % (where, cmd))
                        continue
                    if "attnlab-view" in cmd and not have_viewer:
                        print("SKIP: %s %s (the viewer is not built)" % (where, cmd))
                        counts["skip"] += 1
                        continue
                    rc, out, err = run(cmd, tmp, env)
                    if "--backend cuda" in cmd and "no CUDA device" in err:
                        print("SKIP: %s %s (no CUDA device)" % (where, cmd))
                        counts["skip"] += 1
                        continue
                    bad = [] if rc == 0 else ["exit %d" % rc]
                    if re.search(r"^error:", err, re.M):
                        bad.append("an error line")
                    if re.search(r"\bnan\b", out, re.I):
                        bad.append("NaN in its output")
                    check(not bad, "%s %s%s" % (where, cmd, " (" + ", ".join(bad) + ")" if bad else ""),
                          (err or out)[-2000:])
                    if not bad:
                        counts["ok"] += 1
    print("%d commands ran, %d outputs compared, %d mentions' options found in the help, %d skipped (listed), "
          "%d synopsis lines not run; %d failed"
          % (counts["ok"], counts["output"], counts["options"], counts["skip"], counts["synopsis"], len(fails)))
    for f in fails:
        print("FAILED: " + f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
