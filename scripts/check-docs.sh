#!/usr/bin/env bash
# Fails when a tracked Markdown page (README.md, every other README.md, docs/**/*.md) cites
# something the code no longer has: the house rule "keep README, crate docs and docs/ true to
# the code in the same commit" checked mechanically. Five kinds of citation are read:
#
#  path   A repository path: a word that starts with a top-level directory of the repository
#         and a slash (`engine/tests/engine_srq.rs`, `scripts/soak.sh`, `tcp/src/recovery/`)
#         or is a tracked top-level file (`Cargo.toml`). Read inside backticks, on the lines
#         of fenced code blocks, and in prose when it has a file extension or ends in "/".
#         It must be a tracked file or a directory holding one, or a path git ignores (an
#         output a tool writes, e.g. `fuzz/artifacts/`). A word after a slash ("../scripts",
#         "$X/scripts", URLs) is not one; placeholders are skipped: a part with <, >, *, {,
#         }, [, ], $, |, "..." or a part whose name before any dot is in capitals (NAME,
#         TARGET, OUT_DIR, NAME.sh; README is a name). Paths relative to the page
#         (`engine.md`, `bodies.rs`) are not read.
#  test   A test named next to its file. A Rust file is a repository path (`tcp/tests/x.rs`,
#         or a directory holding .rs files: `tcp/src/recovery/`) or a bare `x.rs` naming
#         exactly one tracked file; a test name, a backticked snake_case word with an
#         underscore (`several_qps_drain_one_queue`). Each name must be declared in one of
#         the files it is cited with (under one of the directories) as `fn NAME`, or be a
#         module's name there. Cited with is: the same table row; a parenthesis that opens
#         with a list of backticked words, one of them a file ((`engine/tests/x.rs`, `name`),
#         (`x.rs`: `name`, `name`)), or that follows a file (`x.rs` (`name`, `name`; prose));
#         `FILE::NAME`, and `STEM::NAME` where STEM.rs is one file under a tests/ directory
#         and no module under src/ (`rdmap::check_inbound` is a module path, not read); and
#         `name` (tcp/tests/x.rs). A name right before "..." is a fragment, skipped. Names in
#         prose without a file are not read: nothing says where they live.
#  cargo  A cargo command (`cargo test -p CRATE --test NAME`, `--lib FILTER`, `--example`,
#         `--bin`, `--bench`; test, run, bench, build, check): the package must be one of
#         the tracked Cargo.toml files' packages, and the target must exist (tests/NAME.rs,
#         tests/NAME/main.rs or a [[test]] entry; the same for examples/, src/bin/, benches/).
#         A test filter (`--lib recovery`, `--test T -- --ignored NAME`) must match: each of
#         its "::" parts a substring of a module or fn name of the package's src/ (with --lib)
#         or of the target's file (with --test).
#  option A script's long option: in `scripts/x.sh --opt ...` (backticked, or a line of a
#         code block; `[--opt]` and `--opt=V` too), each --opt before a "--", a quote or a
#         shell operator must be spelled in the script or in a library under scripts/lib/.
#  env    An environment variable spelled WARPCORE_* or IWPERF_* (whole name, not a prefix
#         like WARPCORE_SKIP_*): some tracked file that is not Markdown (and not this script)
#         must name it on a line that is not a comment.
#
#  req    A requirement ID (MPA-7.1.2-16, DDP-7.1-12, MPA2-9.1-11..14 cites MPA2-9.1-11) must be a
#         row of REQUIREMENTS.md. The checklist lives beside the repository, not in it
#         (../shared/specs/REQUIREMENTS.md from the work tree's top), and a check must pass on
#         a lone clone: without that file no ID is read (the last line says so).
#
#   scripts/check-docs.sh           # the checkout this script lives in
#   scripts/check-docs.sh DIR       # the git work tree at DIR (the harness plants defects there)
#
# Prints every finding as FILE:LINE: KIND: what is wrong, and exits 1; exits 0 when there is
# none, 2 when DIR is not the top directory of a git work tree. About a second.
set -uo pipefail

dir=${1:-$(dirname "$0")/..}
cd "$dir" || exit 2
top=$(git rev-parse --show-toplevel 2>/dev/null)
if [ -z "$top" ] || [ "$top" != "$(pwd -P)" ]; then
    echo "check-docs: $dir is not the top of a git work tree (the check reads git ls-files)" >&2
    exit 2
fi

exec python3 - <<'PY'
import os, re, subprocess, sys, tomllib

def git(*args, stdin=None):
    return subprocess.run(["git", *args], input=stdin, capture_output=True, text=True).stdout

tracked = [f for f in git("ls-files", "-z").split("\0") if f and os.path.isfile(f)]
tracked_set = set(tracked)
dirs = set()
for f in tracked:
    parts = f.split("/")
    for i in range(1, len(parts)):
        dirs.add("/".join(parts[:i]))
tops = {f.split("/")[0] for f in tracked if "/" in f}
top_files = {f for f in tracked if "/" not in f}
pages = sorted(f for f in tracked if f.endswith(".md") and
               (os.path.basename(f) == "README.md" or f.startswith("docs/")))
rs_files = [f for f in tracked if f.endswith(".rs")]
by_base = {}
for f in rs_files:
    by_base.setdefault(os.path.basename(f), []).append(f)

src_modules = {re.sub(r"\.rs$", "", p) for f in rs_files if "/src/" in "/" + f
               for p in f.split("/")[f.split("/").index("src") + 1:]} if rs_files else set()
findings = []
seen = {"path": 0, "test": 0, "cargo": 0, "env": 0, "option": 0, "req": 0}
def report(page, line, kind, what):
    findings.append(f"{page}:{line}: {kind}: {what}")

_text = {}
def text(f):
    if f not in _text:
        try:
            with open(f, "rb") as fh:
                b = fh.read(4_000_000)
            _text[f] = "" if b"\0" in b else b.decode("utf-8", "replace")
        except OSError:
            _text[f] = ""
    return _text[f]

# ---- what the code declares ------------------------------------------------------------
FN = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")
MOD = re.compile(r"\bmod\s+([A-Za-z_][A-Za-z0-9_]*)")
def rs_under(p):
    """The Rust files a cited path stands for: the file, or every .rs under the directory."""
    p = p.rstrip("/")
    if p in tracked_set:
        return [p] if p.endswith(".rs") else []
    return [f for f in rs_files if f.startswith(p + "/")]
def names(files):
    """Module and fn names a test filter may match (file-derived modules too)."""
    s = set()
    for f in files:
        s.update(FN.findall(text(f)))
        s.update(MOD.findall(text(f)))
        s.update(x for x in re.split(r"[/.]", f[:-3]) if x not in ("mod", "lib", "main"))
    return s

# ---- packages and their targets -----------------------------------------------------------
packages = {}
for f in tracked:
    if os.path.basename(f) != "Cargo.toml":
        continue
    try:
        with open(f, "rb") as fh:
            t = tomllib.load(fh)
    except Exception as e:
        report(f, 1, "cargo", f"cannot read: {e}")
        continue
    if "package" not in t:
        continue
    d = os.path.dirname(f)
    pre = d + "/" if d else ""
    tg = {k: set() for k in ("test", "example", "bin", "bench")}
    for kind, sub in (("test", "tests"), ("example", "examples"), ("bin", "src/bin"), ("bench", "benches")):
        for x in tracked:
            if not x.startswith(pre + sub + "/"):
                continue
            rest = x[len(pre + sub) + 1:]
            if re.fullmatch(r"[^/]+\.rs", rest):
                tg[kind].add(rest[:-3])
            elif re.fullmatch(r"[^/]+/main\.rs", rest):
                tg[kind].add(rest.split("/")[0])
        for e in t.get(kind, []):
            if "name" in e:
                tg[kind].add(e["name"])
    if pre + "src/main.rs" in tracked_set:
        tg["bin"].add(t["package"]["name"])
    tg["lib"] = pre + "src/lib.rs" in tracked_set or "lib" in t
    packages[t["package"]["name"]] = (d, tg)

# ---- environment variables the code names --------------------------------------------------
ENV = re.compile(r"\b(?:WARPCORE|IWPERF)_[A-Z0-9_]*[A-Z0-9]\b")
def comment(line):
    s = line.lstrip()
    return s.startswith(("//", "/*", "* ", "# ")) or s == "#"
env_read = set()
for f in tracked:
    if f.endswith(".md") or f == "scripts/check-docs.sh" or f.startswith("fuzz/corpus/"):
        continue
    t = text(f)
    if "WARPCORE_" not in t and "IWPERF_" not in t:
        continue
    for line in t.splitlines():
        if not comment(line):
            env_read.update(ENV.findall(line))

# ---- requirement IDs, where the checklist sits beside the checkout ---------------------------
req_file = os.path.join("..", "shared", "specs", "REQUIREMENTS.md")
req_ids = None
if os.path.isfile(req_file):
    with open(req_file, encoding="utf-8", errors="replace") as fh:
        req_ids = set(re.findall(r"^\|\s*([A-Z][A-Z0-9]*-[0-9][0-9.]*-[0-9]+)\s*\|", fh.read(), re.M))
REQ = re.compile(r"(?<![\w-])((?:" + "|".join(sorted({i.split("-")[0] for i in req_ids or []}, key=len,
                 reverse=True)) + r")-[0-9](?:[0-9.]*[0-9])?-[0-9]+)(?![\w-])") if req_ids else None

# ---- reading the pages ----------------------------------------------------------------------
PLACEHOLDER = re.compile(r"[<>*{}\[\]$|]|\.\.\.")
CAPS = re.compile(r"[A-Z][A-Z0-9_]*")
IDENT = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")

def as_path(word):
    """The repository path a word cites, or None."""
    word = word.strip("'\"(),;:")
    word = word.split("::")[0]
    while word and word[-1] in ".,;:)":
        word = word[:-1]
    if not word or PLACEHOLDER.search(word):
        return None
    if word in top_files:
        return word
    if "/" not in word or word.split("/")[0] not in tops:
        return None
    if any(CAPS.fullmatch(p.split(".")[0]) and p.split(".")[0] not in ("README", "LICENSE")
           for p in word.split("/")):
        return None
    return word

def exists(p):
    p = p.rstrip("/")
    return p in tracked_set or p in dirs
missing_paths = []  # (page, line, path): checked against .gitignore in one go at the end

def check_path(page, line, p):
    seen["path"] += 1
    if not exists(p):
        missing_paths.append((page, line, p))

def check_options(page, line, words):
    """`scripts/x.sh --opt ...`: each long option before a "--", a quote or a shell
    operator must be spelled in the script (or in a library under scripts/lib/)."""
    if not words or (p := as_path(words[0])) is None or p not in tracked_set or p.endswith(".rs"):
        return
    body = text(p) + "".join(text(f) for f in tracked if f.startswith("scripts/lib/"))
    for w in words[1:]:
        if w == "--" or w[0] in "'\"|&;#<>" or w.startswith("$("):
            break
        m = re.fullmatch(r"\[?(--[a-z][a-z0-9-]*)(?:=\S*)?\]?\.?,?", w)
        if m:
            seen["option"] += 1
            if not re.search(re.escape(m.group(1)) + r"(?![a-z0-9-])", body):
                report(page, line, "option", f"`{p}` takes no `{m.group(1)}`")

def resolve_rs(word):
    """The Rust file or directory a backticked word in a table row names, or None."""
    p = as_path(word)
    if p:
        return p if (p.endswith(".rs") and p in tracked_set) or \
            (p.rstrip("/") in dirs and rs_under(p)) else None
    w = word.strip()
    if re.fullmatch(r"[A-Za-z0-9_]+\.rs", w) and len(by_base.get(w, [])) == 1:
        return by_base[w][0]
    return None

def cite(s):
    """(Rust file or directory, test name) a backticked word cites; either may be None. A
    word `FILE::NAME` or `STEM::NAME` gives both (STEM the stem of one file under a tests/
    directory and of no module under a src/ one: `rdmap::check_inbound` is a module path)."""
    if "::" in s:
        head, rest = s.split("::", 1)
        f = resolve_rs(head)
        if not f:
            hits = [x for x in by_base.get(head + ".rs", []) if "/tests/" in "/" + x]
            f = hits[0] if len(hits) == 1 and head not in src_modules else None
        return (f, rest) if f and IDENT.fullmatch(rest) else (None, None)
    f = resolve_rs(s)
    return (f, None) if f else (None, s if IDENT.fullmatch(s) else None)

def check_idents(page, line, idents, files, where):
    if not files:
        return
    have = names([x for f in files for x in rs_under(f)])
    for ident in idents:
        seen["test"] += 1
        if ident not in have:
            report(page, line, "test", f"`{ident}` is no `fn` (nor module) in {where}")

CARGO = re.compile(r"\bcargo\s+(?:\+\S+\s+)?(?:miri\s+)?(test|run|bench|build|check)\b([^|;&#`\n]*)")
def check_cargo(page, line, sub, args):
    seen["cargo"] += 1
    words = args.split()
    if "--" in words:
        i = words.index("--")
        words, after = words[:i], words[i + 1:]
    else:
        after = []
    pkgs, targets, filters, lib = [], [], [], False
    i = 0
    while i < len(words):
        w = words[i]
        v = words[i + 1] if i + 1 < len(words) else None
        if w in ("-p", "--package") and v:
            pkgs.append(v); i += 2; continue
        if w in ("--test", "--example", "--bin", "--bench") and v and not v.startswith("-"):
            targets.append((w[2:], v)); i += 2; continue
        if w in ("--features", "-F", "--profile", "--target", "--manifest-path", "-j", "--jobs"):
            i += 2; continue
        if w == "--lib":
            lib = True
        elif not w.startswith("-") and sub in ("test", "bench"):
            filters.append(w)
        i += 1
    if sub == "test":
        skip_next = False
        for w in after:
            if skip_next:
                skip_next = False
            elif w in ("--skip", "--test-threads", "--format", "--color"):
                skip_next = True
            elif not w.startswith("-"):
                filters.append(w)
    skip = lambda s: bool(PLACEHOLDER.search(s) or CAPS.fullmatch(s) or not re.fullmatch(r"[A-Za-z0-9_:./'-]+", s))
    cand = []
    for p in pkgs:
        if skip(p):
            return
        if p not in packages:
            report(page, line, "cargo", f"no package `{p}` (packages: {', '.join(sorted(packages))})")
            return
        cand.append(p)
    if not cand:
        cand = list(packages)
    files = []
    for kind, name in targets:
        if skip(name):
            return
        hit = [p for p in cand if name in packages[p][1][kind]]
        if not hit:
            report(page, line, "cargo", f"no --{kind} target `{name}` in {' or '.join(cand) if pkgs else 'any package'}")
            return
        for p in hit:
            d = packages[p][0]
            pre = d + "/" if d else ""
            sub_dir = {"test": "tests", "example": "examples", "bin": "src/bin", "bench": "benches"}[kind]
            files += [f for f in rs_files if f == f"{pre}{sub_dir}/{name}.rs" or f.startswith(f"{pre}{sub_dir}/{name}/")]
    if lib:
        for p in cand:
            if not packages[p][1]["lib"]:
                report(page, line, "cargo", f"package `{p}` has no library (--lib)")
                return
            d = packages[p][0]
            files += [f for f in rs_files if f.startswith((d + "/" if d else "") + "src/")]
    if sub != "test" or not files:
        return
    have = names(files)
    for flt in filters:
        if skip(flt.strip("'")):
            continue
        for part in flt.strip("'").split("::"):
            if part and not any(part in n for n in have):
                report(page, line, "cargo", f"test filter `{flt}` matches no module or fn of "
                       f"{'the library' if lib else ', '.join(t for _, t in targets)}")
                break

for page in pages:
    lines = text(page).splitlines()
    fence = False
    para = []  # (line number, text) of the prose paragraph being gathered

    def prose(chunk, is_row=False):
        """A paragraph (or one table row): its backtick spans, paths, tests and commands."""
        if not chunk:
            return
        joined, starts = "", []
        for n, l in chunk:
            starts.append((len(joined), n))
            joined += l + "\n"
        def line_of(off):
            n = starts[0][1]
            for s, ln in starts:
                if s <= off:
                    n = ln
            return n
        spans = [(m.start(), m.group(1)) for m in re.finditer(r"`([^`]+)`", joined)]
        # paths in backticks
        for off, s in spans:
            for w in s.split():
                p = as_path(w)
                if p:
                    check_path(page, line_of(off), p)
            for m in CARGO.finditer(s):
                check_cargo(page, line_of(off), m.group(1), m.group(2))
            check_options(page, line_of(off), s.split())
        # paths in prose outside backticks: with an extension or a trailing slash only
        bare = re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), joined)
        for m in re.finditer(r"(?:(?<=[\s(])|^)([a-z0-9.][A-Za-z0-9_./-]*/[A-Za-z0-9_./-]*)", bare, re.M):
            w = m.group(1).rstrip(".,;:")
            if re.search(r"\.[a-z]+$|/$", w):
                p = as_path(w)
                if p:
                    check_path(page, line_of(m.start()), p)
        if is_row:
            files = [f for _, s in spans if (f := resolve_rs(s))]
            idents = [s for off, s in spans if IDENT.fullmatch(s) and
                      not joined[off + len(s) + 2:].startswith("...")]
            stems = {os.path.basename(f.rstrip("/")).removesuffix(".rs") for f in files}
            check_idents(page, chunk[0][0], [i for i in idents if i not in stems], files,
                         " or ".join(f"`{f}`" for f in files))
        else:
            # a parenthesis that opens with a list of backticked words holding a Rust file
            # (`engine/tests/x.rs`, `name`; `x.rs`: `name`; `x::name`, `name`), or that
            # follows one: `FILE` (`name`, `name` and `name`; prose...): the list's other
            # words name its tests
            for m in re.finditer(r"(?:`([^`]+)`\s*)?\(((?:\s*(?:,|:|and|or)?\s*`[^`]+`)+)", joined):
                ss = re.findall(r"`([^`]+)`", m.group(2))
                before = [m.group(1)] if m.group(1) else []
                cites = [cite(s) for s in before + ss]
                files = [f for f, _ in cites if f]
                if not files:
                    continue
                tail = joined[m.end():]
                idents = [i for f, i in cites[len(before):] if i]
                if tail.startswith("...") and idents and idents[-1] == ss[-1]:
                    idents.pop()
                check_idents(page, line_of(m.start()), idents, files, " or ".join(f"`{f}`" for f in files))
            # `name` (path/to/file.rs): the file unquoted in the parenthesis
            for m in re.finditer(r"`([a-z0-9_]+)`\s*\(([a-z][A-Za-z0-9_./-]*\.rs)\)", joined):
                f = resolve_rs(m.group(2))
                if f and IDENT.fullmatch(m.group(1)):
                    check_idents(page, line_of(m.start()), [m.group(1)], [f], f"`{f}`")
        for off, s in spans:
            if "::" in s and not is_row:
                f, i = cite(s)
                if f and i:
                    check_idents(page, line_of(off), [i], [f], f"`{f}`")

    for n, l in enumerate(lines, 1):
        if re.match(r"\s*(```|~~~)", l):
            prose(para); para = []
            fence = not fence
            continue
        if fence:
            for w in l.split():
                p = as_path(w)
                if p:
                    check_path(page, n, p)
            for m in CARGO.finditer(l):
                check_cargo(page, n, m.group(1), m.group(2))
            for part in re.split(r"[|;&]", l):
                check_options(page, n, part.split())
            continue
        if l.lstrip().startswith("|"):
            prose(para); para = []
            prose([(n, l)], True)
            continue
        if not l.strip():
            prose(para); para = []
            continue
        para.append((n, l))
    prose(para)
    for n, l in enumerate(lines, 1):
        for i in (REQ.findall(l) if REQ else []):
            seen["req"] += 1
            if i not in req_ids:
                report(page, n, "req", f"{i}: no such row in {req_file}")
        for v in ENV.findall(l):
            seen["env"] += 1
            if v not in env_read:
                report(page, n, "env", f"{v}: no script or source file reads it")

if missing_paths:
    ignored = set(git("check-ignore", "--no-index", "--stdin",
                      stdin="\n".join(p.rstrip("/") for _, _, p in missing_paths) + "\n").split("\n"))
    for page, line, p in missing_paths:
        if p.rstrip("/") not in ignored:
            report(page, line, "path", f"`{p}` does not exist (not tracked, not ignored)")

def order(f):
    page, line, rest = f.split(":", 2)
    return (page, int(line), rest)
findings.sort(key=order)
for f in findings:
    print(f)
if findings:
    print(f"check-docs: FAILED: {len(findings)} stale citation(s) above in {len(pages)} pages",
          file=sys.stderr)
    sys.exit(1)
print(f"check-docs: ok: {len(pages)} pages: {seen['path']} paths, {seen['test']} test names, "
      f"{seen['cargo']} cargo commands, {seen['option']} script options, {seen['env']} environment "
      f"variables" + (f", {seen['req']} requirement IDs" if req_ids else
                       " (no requirement IDs: no ../shared/specs/REQUIREMENTS.md)") +
      " cited, all in the tree")
PY
