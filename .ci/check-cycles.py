#!/usr/bin/env python3
"""Fails on any import cycle between the modules of a crate (issue 26, item 4).

For every crate of the repository (each package's library and binaries, found from the
Cargo.toml files outside target/), this builds the graph of its modules from the source:

- a module is a file (`foo.rs`, `foo/mod.rs`, a `#[path]` file) with the inline modules it
  holds; `#[cfg(test)]` modules are left out (tests may use any layer);
- an edge `a -> b` is a reference in `a` to an item defined in `b`: a `use crate::...`,
  `use super::...`, `use self::...` or `use child::...` declaration, or a path in the code
  (`crate::x::f()`, `super::Y`, `child::Z`, or a path through a name imported by `use`);
- a path is resolved to the module that defines the item: through every module's `use`
  declarations (so `crate::Name` re-exported by the crate root's `pub use` leads to the module
  that defines `Name`). A `pub use` is a re-export, not a dependency, unless the module's own
  code uses the name; `#[cfg(doc)]` imports (for doc links) are not dependencies either.

Each strongly connected component of more than one module is a cycle: it is printed with
its modules and one `file:line` per edge inside it, and the script exits 1. Python 3.11
standard library only; it reads the source as text (comments and literals skipped), it does
not build anything.

Usage: .ci/check-cycles.py [--allow CRATE ...] [--edges CRATE ...] [ROOT]
  --allow CRATE  report the cycles of CRATE (a package name, or `package:bin`) without
                 failing; for a cycle being removed on another branch.
  --edges CRATE  also print every edge of CRATE's graph.
"""

from __future__ import annotations

import argparse
import os
import sys
import tomllib
from dataclasses import dataclass, field

SKIP_DIRS = {"target", ".git", "node_modules", ".venv", "venv"}


# ---------------------------------------------------------------------------------------
# Lexing: identifiers, `::`, string literals (kept, for `#[path = "..."]`), punctuation.


@dataclass
class Tok:
    kind: str  # "id", "str", "p" (punctuation), "num", "life"
    text: str
    line: int


def lex(src: str) -> list[Tok]:
    toks: list[Tok] = []
    i, n, line = 0, len(src), 1

    def string_end(j: int, hashes: int, raw: bool) -> int:
        """Index after the closing quote of a string whose opening quote is at j - 1."""
        nonlocal line
        while j < n:
            c = src[j]
            if c == "\n":
                line += 1
            if not raw and c == "\\":
                if j + 1 < n and src[j + 1] == "\n":
                    line += 1
                j += 2
                continue
            if c == '"' and src[j + 1 : j + 1 + hashes] == "#" * hashes:
                return j + 1 + hashes
            j += 1
        return n

    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif src.startswith("//", i):
            while i < n and src[i] != "\n":
                i += 1
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    line += src[i] == "\n"
                    i += 1
        elif c == '"':
            start_line = line
            j = string_end(i + 1, 0, False)
            toks.append(Tok("str", src[i + 1 : j - 1], start_line))
            i = j
        elif c == "'":
            # A char literal ('a', '\n', '\u{..}', '\'') or a lifetime ('a).
            if i + 1 < n and src[i + 1] == "\\":
                j = i + 2
                while j < n and src[j] != "'":
                    j += 2 if src[j] == "\\" else 1
                i = j + 1
            elif i + 2 < n and src[i + 2] == "'":
                i += 3
            else:
                j = i + 1
                while j < n and (src[j].isalnum() or src[j] == "_"):
                    j += 1
                toks.append(Tok("life", src[i:j], line))
                i = j
        elif c.isalpha() or c == "_":
            j = i
            while j < n and (src[j].isalnum() or src[j] == "_"):
                j += 1
            word = src[i:j]
            # String prefixes: b"..", r"..", r#".."#, br"..", c"..", cr#".."#.
            if word in ("b", "c") and j < n and src[j] == '"':
                start_line = line
                k = string_end(j + 1, 0, False)
                toks.append(Tok("str", src[j + 1 : k - 1], start_line))
                i = k
                continue
            if word in ("r", "br", "cr") and j < n and src[j] in '"#':
                k = j
                while k < n and src[k] == "#":
                    k += 1
                if k < n and src[k] == '"':
                    hashes = k - j
                    start_line = line
                    e = string_end(k + 1, hashes, True)
                    toks.append(Tok("str", src[k + 1 : e - 1 - hashes], start_line))
                    i = e
                    continue
                if word == "r" and k == j + 1:  # r#ident
                    m = k
                    while m < n and (src[m].isalnum() or src[m] == "_"):
                        m += 1
                    toks.append(Tok("id", src[k:m], line))
                    i = m
                    continue
            toks.append(Tok("id", word, line))
            i = j
        elif c.isdigit():
            j = i
            while j < n and (src[j].isalnum() or src[j] == "_"):
                j += 1
            if j + 1 < n and src[j] == "." and src[j + 1].isdigit():
                j += 1
                while j < n and (src[j].isalnum() or src[j] == "_"):
                    j += 1
            toks.append(Tok("num", src[i:j], line))
            i = j
        elif src.startswith("::", i):
            toks.append(Tok("p", "::", line))
            i += 2
        else:
            toks.append(Tok("p", c, line))
            i += 1
    return toks


# ---------------------------------------------------------------------------------------
# Modules of a crate.


@dataclass
class Module:
    path: tuple[str, ...]  # from the crate root; () is the root
    file: str  # the file that holds it (an inline module: its file's)
    file_module: tuple[str, ...]  # the module of that file (inline modules collapse to it)
    children: dict[str, "Module"] = field(default_factory=dict)
    # name imported by `use` -> (its path as written, line, is_pub)
    aliases: dict[str, tuple[tuple[str, ...], int, bool]] = field(default_factory=dict)
    # references as written: (kind, segments, line, imported name), kind "use", "glob",
    # "path" or "pubuse" (resolved once the whole crate is read)
    refs: list[tuple[str, tuple[str, ...], int, str]] = field(default_factory=list)
    # identifiers used outside `use` declarations (to see whether a `pub use` is used)
    idents: set[str] = field(default_factory=set)


class Crate:
    def __init__(self, name: str, root_file: str):
        self.name = name
        self.root_file = root_file
        self.modules: dict[tuple[str, ...], Module] = {}
        self.warnings: list[str] = []
        root = self.new_module((), root_file, ())
        self.parse_file(root, root_file, os.path.dirname(root_file))

    def new_module(self, path, file, file_module) -> Module:
        m = self.modules.get(path)
        if m is None:
            m = Module(path, file, file_module)
            self.modules[path] = m
        return m

    # -- parsing ------------------------------------------------------------------------

    def parse_file(self, module: Module, file: str, child_dir: str) -> None:
        with open(file, encoding="utf-8") as f:
            toks = lex(f.read())
        Parser(self, toks, file).run(module, child_dir)

    def child_file(self, child_dir: str, name: str, path_attr: str | None, here: str) -> str | None:
        if path_attr is not None:
            p = os.path.join(os.path.dirname(here), path_attr)
            return p if os.path.isfile(p) else None
        for p in (os.path.join(child_dir, name + ".rs"), os.path.join(child_dir, name, "mod.rs")):
            if os.path.isfile(p):
                return p
        return None

    # -- resolution ---------------------------------------------------------------------

    def absolute(self, module: Module, segs: tuple[str, ...], depth: int = 0) -> tuple[str, ...] | None:
        """`segs` as written in `module`, from the crate root; None for an extern path."""
        if not segs or depth > 32:
            return None
        i = 0
        if segs[0] == "crate":
            base, i = (), 1
        elif segs[0] in ("self", "super"):
            base = module.path
            while i < len(segs) and segs[i] in ("self", "super"):
                if segs[i] == "super":
                    if not base:
                        return None
                    base = base[:-1]
                i += 1
        elif segs[0] in module.children:
            base = module.path
        elif segs[0] in module.aliases:
            target = self.absolute(module, module.aliases[segs[0]][0], depth + 1)
            return None if target is None else target + segs[1:]
        else:
            return None
        return base + segs[i:]

    def defining_module(self, segs: tuple[str, ...], depth: int = 0) -> tuple[str, ...]:
        """The module that defines the item at the absolute path `segs` (or the module the
        path names), following `use` declarations (re-exports)."""
        m = self.modules[()]
        i = 0
        while i < len(segs) and segs[i] in m.children:
            m = m.children[segs[i]]
            i += 1
        if i < len(segs) and depth < 32 and segs[i] in m.aliases:
            target = self.absolute(m, m.aliases[segs[i]][0])
            if target is not None and target != m.path + (segs[i],):
                return self.defining_module(target + segs[i + 1 :], depth + 1)
        return m.path

    def edges(self) -> dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[str, int]]:
        """(from file module, to file module) -> the first file:line that makes the edge."""
        out: dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[str, int]] = {}
        for m in self.modules.values():
            for kind, segs, line, name in sorted(m.refs, key=lambda r: r[2]):
                if kind == "pubuse" and name not in m.idents:
                    continue
                target = self.absolute(m, segs)
                if target is None:
                    continue
                to = self.defining_module(target)
                a, b = m.file_module, self.modules[to].file_module
                if a != b and (a, b) not in out:
                    out[(a, b)] = (m.file, line)
        return out


class Parser:
    """Walks the tokens of one file: module declarations, `use` trees and paths."""

    def __init__(self, crate: Crate, toks: list[Tok], file: str):
        self.c, self.t, self.file = crate, toks, file
        self.i = 0

    def peek(self, k: int = 0) -> Tok | None:
        j = self.i + k
        return self.t[j] if j < len(self.t) else None

    def attrs(self) -> tuple[bool, bool, str | None]:
        """Reads the outer attributes at the cursor: (cfg(test), cfg(doc), path = "...")."""
        test = doc = False
        path = None
        while self.peek() and self.peek().text == "#" and self.peek(1) and self.peek(1).text in ("[", "!"):
            j = self.i + (2 if self.t[self.i + 1].text == "[" else 3)
            depth, start = 1, j
            while j < len(self.t) and depth:
                depth += {"[": 1, "]": -1}.get(self.t[j].text, 0)
                j += 1
            body = self.t[start : j - 1]
            words = [x.text for x in body]
            if words[:1] == ["cfg"] and "test" in words and "not" not in words:
                test = True
            if words[:1] == ["cfg"] and "doc" in words and "not" not in words:
                doc = True
            if words[:2] == ["path", "="] and len(body) > 2 and body[2].kind == "str":
                path = body[2].text
            self.i = j
        return test, doc, path

    def run(self, module: Module, child_dir: str) -> None:
        self.block(module, child_dir, top=True)

    def block(self, module: Module, child_dir: str, top: bool) -> None:
        """Items until the closing brace of this module (or the end of the file)."""
        depth = 0
        is_pub = False
        while self.i < len(self.t):
            test, doc, path_attr = self.attrs()
            tok = self.peek()
            if tok is None:
                break
            if tok.text == "pub" and tok.kind == "id":
                is_pub = True
                self.i += 1
                if self.peek() and self.peek().text == "(":
                    while self.peek() and self.peek().text != ")":
                        self.i += 1
                    self.i += 1
                continue
            if tok.kind == "id" and tok.text == "mod" and self.peek(1) and self.peek(1).kind == "id":
                name = self.peek(1).text
                after = self.peek(2)
                self.i += 2
                if after is not None and after.text == ";":
                    self.i += 1
                    if not test:
                        self.declare_file_module(module, child_dir, name, path_attr)
                elif after is not None and after.text == "{":
                    self.i += 1
                    if test:
                        self.skip_braces()
                    else:
                        inner = self.c.new_module(module.path + (name,), self.file, module.file_module)
                        module.children[name] = inner
                        self.block(inner, os.path.join(child_dir, name), top=False)
                is_pub = False
                continue
            if tok.kind == "id" and tok.text == "use" and not (self.peek(1) and self.peek(1).text == "<"):
                self.i += 1
                self.use_decl(module, is_pub, doc)
                is_pub = False
                continue
            if tok.text == "{":
                depth += 1
            elif tok.text == "}":
                if depth == 0 and not top:
                    self.i += 1
                    return
                depth -= 1
            if tok.kind == "id":
                self.path_at(module)
                continue
            if tok.text in (";", "{", "}"):
                is_pub = False
            self.i += 1

    def skip_braces(self) -> None:
        depth = 1
        while self.i < len(self.t) and depth:
            depth += {"{": 1, "}": -1}.get(self.t[self.i].text, 0)
            self.i += 1

    def declare_file_module(self, module: Module, child_dir: str, name: str, path_attr: str | None) -> None:
        file = self.c.child_file(child_dir, name, path_attr, self.file)
        if file is None:
            self.c.warnings.append(f"{self.file}: no file for `mod {name};`")
            return
        path = module.path + (name,)
        child = self.c.new_module(path, file, path)
        module.children[name] = child
        sub_dir = os.path.dirname(file) if os.path.basename(file) == "mod.rs" else os.path.splitext(file)[0]
        if path_attr is not None:
            sub_dir = os.path.splitext(file)[0]
        self.c.parse_file(child, file, sub_dir)

    def use_decl(self, module: Module, is_pub: bool, doc_only: bool) -> None:
        line = self.peek().line if self.peek() else 0
        trees: list[tuple[tuple[str, ...], str | None]] = []
        self.use_tree((), trees)
        if self.peek() and self.peek().text == ";":
            self.i += 1
        for segs, alias in trees:
            if not segs or segs[0] == "::":
                continue
            if alias is not None and alias != "_":
                module.aliases[alias] = (segs, line, is_pub)
            if doc_only:
                continue
            kind = "glob" if alias is None else "pubuse" if is_pub else "use"
            module.refs.append((kind, segs, line, alias or ""))

    def use_tree(self, prefix: tuple[str, ...], out: list) -> None:
        segs = list(prefix)
        if self.peek() and self.peek().text == "::":
            segs.append("::")
            self.i += 1
        while True:
            tok = self.peek()
            if tok is None:
                return
            if tok.text == "{":
                self.i += 1
                while self.peek() and self.peek().text != "}":
                    self.use_tree(tuple(segs), out)
                    if self.peek() and self.peek().text == ",":
                        self.i += 1
                self.i += 1
                return
            if tok.text == "*":
                self.i += 1
                out.append((tuple(segs), None))
                return
            if tok.kind == "id":
                self.i += 1
                if tok.text == "self" and segs and segs != ["::"]:
                    name = segs[-1]
                else:
                    segs.append(tok.text)
                    name = tok.text
                if self.peek() and self.peek().text == "::":
                    self.i += 1
                    continue
                if self.peek() and self.peek().text == "as":
                    self.i += 1
                    name = self.peek().text
                    self.i += 1
                out.append((tuple(segs), name))
                return
            return

    def path_at(self, module: Module) -> None:
        """A path starting at the identifier under the cursor (`a::b::c`), or one identifier."""
        start = self.i
        prev = self.t[start - 1].text if start else ""
        segs = [self.t[self.i].text]
        line = self.t[self.i].line
        self.i += 1
        while (
            self.peek()
            and self.peek().text == "::"
            and self.peek(1) is not None
            and self.peek(1).kind == "id"
        ):
            segs.append(self.peek(1).text)
            self.i += 2
        module.idents.update(segs)
        if len(segs) < 2 or prev in (".", "::"):
            return
        # `std::`, `core::` and `alloc::` name the standard library, never a module here.
        if segs[0] not in ("std", "core", "alloc"):
            module.refs.append(("path", tuple(segs), line, ""))


# ---------------------------------------------------------------------------------------
# Finding the crates, and the cycles.


def crates_of(root: str) -> list[tuple[str, str]]:
    """(crate name, root file) of every library and binary of every package under `root`."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        if "Cargo.toml" not in filenames:
            continue
        with open(os.path.join(dirpath, "Cargo.toml"), "rb") as f:
            manifest = tomllib.load(f)
        package = manifest.get("package")
        if not package:
            continue
        name = package["name"]
        roots: dict[str, str] = {}
        lib = manifest.get("lib", {}).get("path", "src/lib.rs")
        if os.path.isfile(os.path.join(dirpath, lib)):
            roots[name] = os.path.join(dirpath, lib)
        bins: dict[str, str] = {}  # root file -> binary name
        if os.path.isfile(os.path.join(dirpath, "src/main.rs")):
            bins[os.path.join(dirpath, "src/main.rs")] = name
        bin_dir = os.path.join(dirpath, "src/bin")
        if os.path.isdir(bin_dir):
            for e in sorted(os.listdir(bin_dir)):
                p = os.path.join(bin_dir, e)
                if e.endswith(".rs"):
                    bins[p] = e[:-3]
                elif os.path.isfile(os.path.join(p, "main.rs")):
                    bins[os.path.join(p, "main.rs")] = e
        for b in manifest.get("bin", []):
            if "path" in b:
                bins[os.path.join(dirpath, b["path"])] = b["name"]
        for p, b in bins.items():
            roots[f"{name}:{b}" if name in roots or b != name else name] = p
        for crate, p in sorted(roots.items()):
            found.append((crate, os.path.normpath(p)))
    return found


def cycles(nodes, edges) -> list[list[tuple[str, ...]]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    graph: dict = {v: [] for v in nodes}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict = {}
    low: dict = {}
    on_stack: set = set()
    stack: list = []
    out = []
    counter = 0
    for v0 in sorted(graph):
        if v0 in index:
            continue
        work = [(v0, iter(sorted(graph[v0])))]
        index[v0] = low[v0] = counter
        counter += 1
        stack.append(v0)
        on_stack.add(v0)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def name_of(path: tuple[str, ...]) -> str:
    return "::".join(("crate",) + path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--allow", action="append", default=[], metavar="CRATE")
    ap.add_argument("--edges", action="append", default=[], metavar="CRATE", help="also print every edge of CRATE")
    args = ap.parse_args()
    root = os.path.normpath(args.root)
    failed = False
    summary = []
    for crate_name, root_file in crates_of(root):
        crate = Crate(crate_name, root_file)
        for w in crate.warnings:
            print(f"warning: {crate_name}: {os.path.relpath(w, root) if os.path.isabs(w) else w}")
        edges = crate.edges()
        if crate_name in args.edges:
            for (a, b), (file, line) in sorted(edges.items()):
                print(f"edge in {crate_name}: {name_of(a)} -> {name_of(b)}  ({os.path.relpath(file, root)}:{line})")
        nodes = {m.file_module for m in crate.modules.values()}
        found = cycles(nodes, edges)
        allowed = crate_name in args.allow or crate_name.split(":")[0] in args.allow
        summary.append(f"{crate_name}: {len(nodes)} modules, {len(found)} cycle(s)" + (" (allowed)" if found and allowed else ""))
        for comp in found:
            members = set(comp)
            tag = "allowed cycle" if allowed else "cycle"
            print(f"{tag} in {crate_name}: {', '.join(name_of(m) for m in comp)}")
            for (a, b), (file, line) in sorted(edges.items()):
                if a in members and b in members:
                    print(f"  {name_of(a)} -> {name_of(b)}  ({os.path.relpath(file, root)}:{line})")
            failed |= not allowed
    for s in summary:
        print(s)
    if failed:
        print("error: import cycles between modules (see above); break each with the leaf module that is missing")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
