#!/usr/bin/env python3
"""Assembles the English training corpus of the trained `tiny` model.

The text comes from freely licensed documentation that this machine's Debian
and Python installations carry:

  * the Python standard library: module, class and function docstrings
    (extracted with `ast`, no code) and the language reference topics that
    pydoc ships (pydoc_data/topics.py); PSF licence;
  * Debian's manual pages (English sections 1-8 only), rendered to plain
    text with groff; each page's package comes from dpkg's file lists and its
    licence from the package's copyright file, and only packages whose
    licence is a recognised free licence are kept;
  * Debian's GNU info manuals, same package and licence rules;
  * the licence texts in Debian's common-licenses directory.

Text is normalised (NFKC, typographic punctuation to ASCII, whitespace),
lines that are mostly not prose (symbol tables, code, doctest lines) are
dropped, and paragraphs of 60 characters or more are kept only at their first
occurrence. Documents are written in a fixed order (sources in a fixed order,
files sorted by path) and every 50th document goes to the held-out split.

Output (in --out_dir):
  corpus_train.txt.xz, corpus_heldout.txt.xz  documents, each followed by a
                                              line holding a form feed ("\\f")
  sources.tsv                                 one row per source (package or
                                              stdlib module group): documents,
                                              bytes kept, licence
With --plain_dir, the uncompressed train/held-out files are also written
there (for the tokenizer trainer and tokenize_corpus.py).

Standard library only; deterministic for a given machine.

  python3 tools/train/corpus/build_corpus.py --out_dir=tools/train/data \\
      --plain_dir=/tmp/weir_train
"""

import argparse
import ast
import bz2
import collections
import concurrent.futures
import gzip
import hashlib
import lzma
import os
import re
import subprocess
import sys
import sysconfig
import unicodedata

HELDOUT_EVERY = 50
DEDUP_MIN_CHARS = 60
MIN_DOC_CHARS = 200
DOC_SEPARATOR = "\f\n"

MAN_ROOT = "/usr/share/man"
INFO_ROOT = "/usr/share/info"
LICENSES_ROOT = "/usr/share/common-licenses"
DPKG_INFO = "/var/lib/dpkg/info"
DPKG_STATUS = "/var/lib/dpkg/status"
DOC_ROOT = "/usr/share/doc"

# Packages whose manual pages are generated command references (thousands of
# near-identical pages): only every Nth page (in sorted order) is rendered.
MAN_PAGE_STRIDE = {"google-cloud-cli": 8}
# Upper bound on the clean bytes one package may contribute; documents past
# it are dropped (in order), so one generated reference cannot dominate.
PACKAGE_BYTE_CAP = 3_000_000

# ---------------------------------------------------------------------------
# Licences.

# Recognised free licences: (regex on a DEP-5 License: name or free-form
# copyright text, short name). Order matters for the free-form scan only in
# which names are reported first.
_FREE_DEP5 = [
    (r"^(l|a)?gpl", None), (r"^bsd", None), (r"^expat$", "MIT"), (r"^mit", "MIT"),
    (r"^apache", None), (r"^psf", None), (r"^python", "PSF"), (r"^artistic", None),
    (r"^public[- ]domain", "public-domain"), (r"^isc", None), (r"^zlib", None),
    (r"^boost", None), (r"^mpl", None), (r"^cc0", None), (r"^x11", None),
    (r"^linux-man-pages", None), (r"^edl", None), (r"^fsf", None), (r"^gfdl", None),
    (r"^ofl", None), (r"^unicode", None), (r"^curl", None), (r"^openssl", None),
    (r"^ssleay", None), (r"^perl", "Artistic or GPL"), (r"^permissive", None),
    (r"^w3c", None), (r"^ncsa", None), (r"^ijg", None), (r"^libpng", None),
    (r"^bzip2", None), (r"^tcl", None), (r"^sgi", None), (r"^hpnd", None),
    (r"^unlicense", None), (r"^wtfpl", None), (r"^0bsd", None), (r"^cc-by(-sa)?-[0-9]", None),
    (r"^other", None), (r"^dlmalloc", None), (r"^mingw", None), (r"^lgpl", None),
]
_NONFREE_MARKERS = re.compile(r"non-?free|proprietary|\bcc-by-nc|\bcc-by-nd|-nc-|-nd-",
                              re.IGNORECASE)
_FREEFORM = [
    (r"GNU (Library|Lesser) General Public License", "LGPL"),
    (r"GNU General Public License", "GPL"),
    (r"GNU Free Documentation License", "GFDL"),
    (r"Apache License", "Apache-2.0"),
    (r"Artistic License", "Artistic"),
    (r"Python Software Foundation", "PSF"),
    (r"Permission is hereby granted, free of charge", "MIT"),
    (r"Redistribution and use in source and binary forms", "BSD"),
    (r"Permission to use, copy, modify, and(/or)? distribute", "ISC-style"),
    (r"Permission to use, copy, modify, distribute, and sell", "X11-style"),
    (r"Info-ZIP license", "Info-ZIP"),
    (r"public domain", "public-domain"),
    (r"Permission is granted to make and distribute verbatim copies", "verbatim-permissive"),
    (r"Mozilla Public License", "MPL"),
]
_FREEFORM = [(re.compile(p.replace(" ", r"\s+"), re.IGNORECASE), n) for p, n in _FREEFORM]


def dep5_licences(text):
    """Returns the License: names of a machine-readable copyright file."""
    names = []
    for m in re.finditer(r"^License:[ \t]*(\S[^\n]*)$", text, re.MULTILINE):
        for part in re.split(r"\s+(?:or|and)\s+|,\s*|\s*\|\s*", m.group(1).strip()):
            part = part.strip(" ()")
            if part:
                names.append(part)
    return names


def classify_licence(text):
    """Returns (is_free, short licence string) for a copyright file's text."""
    if not text:
        return False, "unknown"
    names = dep5_licences(text)
    found = []
    if names:
        for name in names:
            low = name.lower()
            if _NONFREE_MARKERS.search(low):
                return False, "non-free: " + name
            for pattern, short in _FREE_DEP5:
                if re.search(pattern, low):
                    label = short or name
                    if low.startswith("other") or low.startswith("permissive"):
                        label = None
                    if label and label not in found:
                        found.append(label)
                    break
            else:
                # An unrecognised name: accept only if the rest is free; it is
                # reported so that the manifest shows it.
                if name not in found:
                    found.append(name + "?")
    if not [f for f in found if not f.endswith("?")]:
        for pattern, short in _FREEFORM:
            if pattern.search(text) and short not in found:
                found.append(short)
    free = [f for f in found if not f.endswith("?")]
    if not free:
        return False, ";".join(found) or "unknown"
    return True, ";".join(found[:6]) + (";..." if len(found) > 6 else "")


class Packages:
    """Maps installed files to Debian packages and packages to licences."""

    def __init__(self):
        self.owner = {}
        for name in sorted(os.listdir(DPKG_INFO)):
            if not name.endswith(".list"):
                continue
            pkg = name[:-5].split(":")[0]
            with open(os.path.join(DPKG_INFO, name), encoding="utf-8",
                      errors="replace") as f:
                for line in f:
                    self.owner.setdefault(line.rstrip("\n"), pkg)
        self.section = {}
        with open(DPKG_STATUS, encoding="utf-8", errors="replace") as f:
            pkg = None
            for line in f:
                if line.startswith("Package: "):
                    pkg = line[9:].strip()
                elif line.startswith("Section: ") and pkg:
                    self.section[pkg] = line[9:].strip()
        self._licences = {}

    def licence(self, pkg):
        if pkg not in self._licences:
            path = os.path.join(DOC_ROOT, pkg, "copyright")
            text = ""
            if os.path.isfile(path):
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
            free, short = classify_licence(text)
            sec = self.section.get(pkg, "")
            if sec.startswith("non-free") or sec.startswith("contrib"):
                free, short = False, "section " + sec
            self._licences[pkg] = (free, short)
        return self._licences[pkg]


# ---------------------------------------------------------------------------
# Text normalisation and filtering.

_TRANSLATE = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u2033": '"', "\u00ab": '"', "\u00bb": '"',
    "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": " - ",
    "\u2015": "-", "\u2212": "-", "\u2022": "*", "\u00b7": "*", "\u2023": "*",
    "\u25cf": "*", "\u2026": "...", "\u00a0": " ", "\u00ad": "", "\u200b": "",
    "\u2002": " ", "\u2003": " ", "\u2009": " ", "\u202f": " ", "\t": " ",
    "\u00a9": "(c)", "\u00ae": "(R)", "\u2122": "(TM)", "\u2192": "->", "\u2190": "<-",
    "\u21d2": "=>", "\u2264": "<=", "\u2265": ">=", "\u2260": "!=", "\u00d7": "x",
    "\u27e8": "<", "\u27e9": ">", "\u2020": "+", "\u2021": "++", "\ufeff": "",
})
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_SPACES = re.compile(r" {2,}")
_BULLET = re.compile(r"^(\s*)([-*+o]|\d+[.)]|\(?[a-z0-9]\)|[A-Z][.)])\s")


def normalise(text):
    text = unicodedata.normalize("NFKC", text).translate(_TRANSLATE)
    return _CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def prose_line(line):
    """True when a (stripped) line is mostly words."""
    if not line:
        return False
    if line.startswith((">>>", "... ", "$ ", "# ", "%")):
        return False
    nonspace = sum(1 for c in line if not c.isspace())
    letters = sum(1 for c in line if c.isalpha())
    if nonspace == 0 or letters < 2 or letters < 0.6 * nonspace:
        return False
    nonascii = sum(1 for c in line if ord(c) > 127)
    if nonascii > 0.05 * len(line):
        return False
    # Code: many brackets/operators per word, or statement-like endings.
    code = sum(line.count(c) for c in "{}[]();=<>\\|&$@#")
    if code > 0.12 * nonspace:
        return False
    if line.endswith((";", "{", "}")) and not line.endswith(".;"):
        return False
    return True


def split_paragraphs(text):
    paras, cur = [], []
    for line in text.split("\n"):
        if line.strip():
            cur.append(line.rstrip())
        elif cur:
            paras.append(cur)
            cur = []
    if cur:
        paras.append(cur)
    return paras


def unwrap(lines):
    """Joins the hard-wrapped lines of a paragraph: a line continues the one
    before when both have the same indentation, the one before is long (it
    was wrapped, not ended), and the line is not a list item or a prompt."""
    out = []
    prev_indent = -1
    for line in lines:
        indent = len(line) - len(line.lstrip())
        body = line.strip()
        if (out and indent == prev_indent and len(out[-1]) >= 40
                and not _BULLET.match(line) and not body.startswith((">>>", "..."))):
            out[-1] += " " + body
        else:
            out.append(line)
            prev_indent = indent
    return out


def clean_document(text, wrapped):
    """Normalises one document; returns its paragraphs (lists of lines)."""
    out = []
    for para in split_paragraphs(normalise(text)):
        if wrapped:
            para = unwrap(para)
        kept = []
        for line in para:
            line = _SPACES.sub(" ", line.strip())
            if prose_line(line):
                kept.append(line)
        if kept:
            out.append("\n".join(kept))
    return out


# ---------------------------------------------------------------------------
# Sources. Each yields (source name, licence, document name, raw text,
# wrapped) in a fixed order.

def stdlib_dir():
    return sysconfig.get_paths()["stdlib"]


_STDLIB_SKIP = re.compile(
    r"(^|/)(test|tests|idle_test|site-packages|dist-packages|__pycache__|"
    r"turtledemo|encodings|lib2to3|ensurepip|_distutils_hack|config-[^/]*)(/|$)")


def _docstrings(tree, module):
    """Yields (qualified name, docstring) in source order."""
    doc = ast.get_docstring(tree, clean=True)
    if doc:
        yield module, doc

    def walk(node, prefix):
        for child in node.body:
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + "." + child.name
                d = ast.get_docstring(child, clean=True)
                if d:
                    yield name, d
                if isinstance(child, ast.ClassDef):
                    yield from walk(child, name)

    yield from walk(tree, module)


def stdlib_sources():
    root = stdlib_dir()
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel = os.path.relpath(dirpath, root)
        if rel != "." and _STDLIB_SKIP.search(rel.replace(os.sep, "/")):
            dirnames[:] = []
            continue
        for fn in sorted(filenames):
            if fn.endswith(".py") and not fn.startswith("test_"):
                files.append(os.path.join(dirpath, fn))
    files.sort()
    topics = os.path.join(root, "pydoc_data", "topics.py")
    for path in files:
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        with open(path, "rb") as f:
            source = f.read()
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            continue
        if path == topics:
            # The language reference and library topics, as pydoc renders them.
            for node in ast.walk(tree):
                if isinstance(node, ast.Dict):
                    for k, v in zip(node.keys, node.values):
                        if (isinstance(k, ast.Constant) and isinstance(v, ast.Constant)
                                and isinstance(v.value, str)):
                            yield ("python-stdlib:pydoc-topics", "PSF-2.0",
                                   "pydoc topic " + k.value, v.value, True)
            continue
        module = rel[:-3].replace("/", ".")
        if module.endswith(".__init__"):
            module = module[: -len(".__init__")]
        parts = []
        for name, doc in _docstrings(tree, module):
            parts.append(name + "\n\n" + doc)
        if parts:
            top = module.split(".")[0]
            yield ("python-stdlib:" + top, "PSF-2.0", "module " + module,
                   "\n\n".join(parts), True)


def _python_module_document(path, rel):
    """Returns (module name, docstrings text) of one Python file, or None."""
    with open(path, "rb") as f:
        source = f.read()
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    module = rel[:-3].replace("/", ".")
    if module.endswith(".__init__"):
        module = module[: -len(".__init__")]
    parts = [name + "\n\n" + doc for name, doc in _docstrings(tree, module)]
    return (module, "\n\n".join(parts)) if parts else None


def _metadata_licence(meta):
    """Classifies a wheel's METADATA licence fields."""
    fields = re.findall(r"^License-Expression:[ \t]*(.+)$", meta, re.MULTILINE)
    fields += re.findall(r"^Classifier: License :: (.+)$", meta, re.MULTILINE)
    fields += [l for l in re.findall(r"^License:[ \t]*(.+)$", meta, re.MULTILINE)
               if len(l) < 60]
    names = []
    for field in fields:
        for part in re.split(r"\s+(?:OR|AND|or|and)\s+|\s*::\s*", field):
            part = part.strip(" ()")
            part = re.sub(r"^\d-clause bsd( license)?$", "BSD", part, flags=re.IGNORECASE)
            if part and part not in ("OSI Approved",) and part not in names:
                names.append(part)
    if not names:
        return False, "unknown"
    text = "\n".join("License: " + n for n in names)
    free, short = classify_licence(text)
    if not free:
        free, short = classify_licence("\n".join(names))
    # Free-text License: fields that are not licence names are left out.
    short = ";".join(p for p in short.split(";") if not p.endswith("?")) or short
    return free, short


def site_package_sources(dirs):
    """Docstrings of the Python packages installed in `dirs` (PyPI wheels),
    one source per distribution, with the licence its metadata declares."""
    for base in dirs:
        if not os.path.isdir(base):
            continue
        for info in sorted(os.listdir(base)):
            if not info.endswith(".dist-info"):
                continue
            meta_path = os.path.join(base, info, "METADATA")
            record_path = os.path.join(base, info, "RECORD")
            if not (os.path.isfile(meta_path) and os.path.isfile(record_path)):
                continue
            with open(meta_path, encoding="utf-8", errors="replace") as f:
                meta = f.read()
            m = re.search(r"^Name:[ \t]*(\S+)", meta, re.MULTILINE)
            dist = m.group(1).lower() if m else info
            if dist in ("pip", "setuptools"):
                continue  # the installers, not part of the pinned set
            free, lic = _metadata_licence(meta)
            if not free:
                print("skip pypi:%s (%s)" % (dist, lic), file=sys.stderr)
                continue
            with open(record_path, encoding="utf-8", errors="replace") as f:
                rels = sorted({line.split(",")[0] for line in f})
            for rel in rels:
                if (not rel.endswith(".py") or rel.startswith("..")
                        or _STDLIB_SKIP.search(rel) or "/_vendor/" in rel
                        or os.path.basename(rel).startswith(("test_", "conftest"))):
                    continue
                path = os.path.join(base, rel)
                if not os.path.isfile(path):
                    continue
                doc = _python_module_document(path, rel)
                if doc:
                    yield "pypi:" + dist, lic, "module " + doc[0], doc[1], True


def read_compressed(path):
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    elif path.endswith(".xz") or path.endswith(".lzma"):
        data = lzma.decompress(data)
    elif path.endswith(".bz2"):
        data = bz2.decompress(data)
    return data


def render_man(path):
    """Renders one manual page to plain UTF-8 text (None on failure)."""
    try:
        data = read_compressed(path)
    except (OSError, EOFError, lzma.LZMAError):
        return None
    head = data[:200].lstrip()
    if head.startswith(b".so ") and data.count(b"\n") <= 2:
        return None  # an alias of another page
    try:
        proc = subprocess.run(
            ["groff", "-k", "-t", "-mandoc", "-Tutf8", "-P-cbou", "-rLL=2000n",
             "-rHY=0", "-dAD=l"],
            input=data, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            timeout=60, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}, check=False)
    except subprocess.TimeoutExpired:
        return None
    if proc.returncode != 0:
        return None
    lines = proc.stdout.decode("utf-8", errors="replace").split("\n")
    nonblank = [i for i, l in enumerate(lines) if l.strip()]
    if len(nonblank) < 3:
        return None
    # Drop the running header and footer lines.
    lines = lines[nonblank[0] + 1: nonblank[-1]]
    return "\n".join(lines)


def man_files(packages):
    out = []
    for section in range(1, 9):
        d = os.path.join(MAN_ROOT, "man%d" % section)
        if not os.path.isdir(d):
            continue
        for fn in sorted(os.listdir(d)):
            p = os.path.join(d, fn)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            out.append((packages.owner.get(p, "unknown"), p))
    out.sort(key=lambda t: (t[0], t[1]))
    # Stride sampling inside packages with generated references.
    kept, seen = [], collections.Counter()
    for pkg, p in out:
        stride = MAN_PAGE_STRIDE.get(pkg, 1)
        if seen[pkg] % stride == 0:
            kept.append((pkg, p))
        seen[pkg] += 1
    return kept


def man_sources(packages, jobs):
    files = []
    for pkg, p in man_files(packages):
        free, lic = packages.licence(pkg)
        if free:
            files.append((pkg, lic, p))
        else:
            print("skip %s (%s): %s" % (pkg, lic, p), file=sys.stderr)
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        rendered = pool.map(lambda t: render_man(t[2]), files, chunksize=8)
        for (pkg, lic, p), text in zip(files, rendered):
            if text:
                yield pkg, lic, "man " + os.path.basename(p), text, False


_INFO_NODE = re.compile(r"^\x1f\n(File: [^\n]*)\n", re.MULTILINE)


def info_sources(packages):
    # Group the parts of each manual (name.info, name.info-1, ...).
    groups = collections.defaultdict(list)
    for fn in sorted(os.listdir(INFO_ROOT)) if os.path.isdir(INFO_ROOT) else []:
        m = re.match(r"^(.*?\.info)(-(\d+))?(\.gz|\.xz|\.bz2)?$", fn)
        if not m:
            continue
        groups[m.group(1)].append((int(m.group(3) or 0), os.path.join(INFO_ROOT, fn)))
    for name in sorted(groups):
        parts = sorted(groups[name])
        pkg = packages.owner.get(parts[0][1], "unknown")
        free, lic = packages.licence(pkg)
        if not free:
            print("skip %s (%s): %s" % (pkg, lic, name), file=sys.stderr)
            continue
        nodes = []
        for _, p in parts:
            data = read_compressed(p).decode("utf-8", errors="replace")
            # The text before the first node is makeinfo's preamble.
            nodes.extend(data.split("\x1f\n")[1:])
        # Nodes become paragraphs of one document; menus and headers dropped.
        body = []
        for node in nodes:
            if node.startswith(("Tag Table:", "End Tag Table", "Indirect:", "Local Variables")):
                continue
            lines = node.split("\n")
            if lines and lines[0].startswith("File: "):
                lines = lines[1:]
            keep, in_menu = [], False
            for line in lines:
                if line.startswith("* Menu:"):
                    in_menu = True
                    continue
                if in_menu:
                    if line.startswith("* ") or line.startswith("  ") or not line.strip():
                        continue
                    in_menu = False
                if re.match(r"^[=*\-.]{3,}$", line.strip()):
                    continue  # section underlines
                keep.append(line)
            body.append("\n".join(keep))
        yield pkg, lic, "info " + name, "\n\n".join(body), True


def licence_sources():
    if not os.path.isdir(LICENSES_ROOT):
        return
    for fn in sorted(os.listdir(LICENSES_ROOT)):
        p = os.path.join(LICENSES_ROOT, fn)
        if os.path.islink(p) or not os.path.isfile(p):
            continue
        with open(p, encoding="utf-8", errors="replace") as f:
            yield ("common-licenses", "licence texts (verbatim copying permitted)",
                   "licence " + fn, f.read(), True)


# ---------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out_dir", required=True, help="where the .xz files and sources.tsv go")
    ap.add_argument("--plain_dir", default="", help="also write uncompressed text here")
    ap.add_argument("--jobs", type=int, default=2, help="parallel groff processes")
    ap.add_argument("--no_info", action="store_true", help="leave out the GNU info manuals")
    ap.add_argument("--site_packages", default="",
                    help="comma-separated site-packages directories whose wheels' docstrings "
                         "are added (the project's pinned Python environment)")
    args = ap.parse_args()

    packages = Packages()
    seen_paras = set()
    docs = []  # (source, licence, name, text)
    per_source = collections.OrderedDict()
    dropped_cap = collections.Counter()

    def add(source, lic, name, raw, wrapped):
        st = per_source.setdefault(source, {"licence": lic, "docs": 0, "bytes": 0})
        if st["bytes"] >= PACKAGE_BYTE_CAP:
            dropped_cap[source] += 1
            return
        kept = []
        for para in clean_document(raw, wrapped):
            if len(para) >= DEDUP_MIN_CHARS:
                key = hashlib.sha1(para.lower().encode("utf-8")).digest()
                if key in seen_paras:
                    continue
                seen_paras.add(key)
            kept.append(para)
        text = "\n\n".join(kept).strip()
        if len(text) < MIN_DOC_CHARS:
            return
        text += "\n"
        docs.append((source, name, text))
        st["docs"] += 1
        st["bytes"] += len(text.encode("utf-8"))

    streams = [licence_sources(), stdlib_sources()]
    if args.site_packages:
        streams.append(site_package_sources(sorted(
            d for d in args.site_packages.split(",") if d)))
    if not args.no_info:
        streams.append(info_sources(packages))
    streams.append(man_sources(packages, args.jobs))
    for stream in streams:
        for source, lic, name, raw, wrapped in stream:
            add(source, lic, name, raw, wrapped)
        print("documents so far: %d, %.1f MB" % (
            len(docs), sum(len(d[2]) for d in docs) / 1e6), file=sys.stderr)

    train, heldout = [], []
    for i, (_, _, text) in enumerate(docs):
        (heldout if i % HELDOUT_EVERY == HELDOUT_EVERY - 1 else train).append(text)
    train_text = DOC_SEPARATOR.join(train) + DOC_SEPARATOR
    heldout_text = DOC_SEPARATOR.join(heldout) + DOC_SEPARATOR

    os.makedirs(args.out_dir, exist_ok=True)
    for name, text in (("corpus_train.txt", train_text), ("corpus_heldout.txt", heldout_text)):
        data = text.encode("utf-8")
        # Raw .xz stream with preset 9 (as `xz -9`), no timestamps: deterministic.
        with open(os.path.join(args.out_dir, name + ".xz"), "wb") as f:
            f.write(lzma.compress(data, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64,
                                  preset=9))
        if args.plain_dir:
            os.makedirs(args.plain_dir, exist_ok=True)
            with open(os.path.join(args.plain_dir, name), "wb") as f:
                f.write(data)

    with open(os.path.join(args.out_dir, "sources.tsv"), "w", encoding="utf-8") as f:
        f.write("source\tlicence\tdocuments\tbytes\n")
        for source, st in per_source.items():
            if st["docs"]:
                f.write("%s\t%s\t%d\t%d\n" % (source, st["licence"], st["docs"], st["bytes"]))
    print("train: %d documents, %d bytes; held-out: %d documents, %d bytes" % (
        len(train), len(train_text.encode()), len(heldout), len(heldout_text.encode())),
        file=sys.stderr)
    for source, n in sorted(dropped_cap.items()):
        print("cap: %s dropped %d documents" % (source, n), file=sys.stderr)


if __name__ == "__main__":
    main()
