#!/usr/bin/env python3
"""Lists the import circles among a Rust crate's source files.

A file imports another when it names an item through a path (`use crate::a::b::Item`,
`super::Item`, `crate::a::f()` in code, or a child module's name from its parent): the edge goes
to the file that defines the item, following `pub use` re-exports, so a parent module that
only declares and re-exports its children is not a hub. Test code (`#[cfg(test)]` items and
files named tests.rs or *_tests.rs) is left out: it may look at anything. A circle is a
strongly connected component of two or more files. Edges between a module's file and the
files of its own submodules are left out: a folder and its mod.rs are one unit (the parent
declares and re-exports its children, the children share the parent's types).

    python3 scripts/import_cycles.py                 # every crate of the workspace
    python3 scripts/import_cycles.py crates/kharden  # one crate
    python3 scripts/import_cycles.py --count         # the number of circles only
    python3 scripts/import_cycles.py --edges         # and, under each circle, its imports

Exits 0; prints one line per circle (its size and files), then the total.
"""
import os
import re
import sys

USE = re.compile(r"\b(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);")
PUB_USE = re.compile(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);")
INLINE = re.compile(r"(?<![\w:])((?:crate|super|self)(?:::\w+)+)")


def strip(text):
    """Removes comments, string and char literals, and #[cfg(test)] items."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not text[i - 1].isalnum() and text[i - 1] != "_"):
            m = re.match(r'r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + len(m.group(0)))
            i = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""')
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append('""')
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:])
            if m:
                i += len(m.group(0))
                out.append("' '")
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return drop_cfg_test("".join(out))


def drop_cfg_test(text):
    """Cuts each item that follows #[cfg(test)] (a block to its closing brace, or one line)."""
    while True:
        m = re.search(r"#\[cfg\(test\)\]", text)
        if not m:
            return text
        j = m.end()
        brace, semi = text.find("{", j), text.find(";", j)
        if brace < 0 or (0 <= semi < brace):
            end = semi + 1
        else:
            depth, k = 0, brace
            while k < len(text):
                if text[k] == "{":
                    depth += 1
                elif text[k] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                k += 1
            end = k + 1
        text = text[: m.start()] + text[end:]


def expand(tree):
    """Flattens a use tree (`a::{b, c::{d as e}}`) to its paths; a rename `d as e` is `d@e`."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+(\w+)", r"@\1", tree))
    brace = tree.find("{")
    if brace < 0:
        return [tree]
    prefix, inner = tree[:brace], tree[brace + 1 : tree.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    paths = []
    for p in parts:
        for sub in expand(p) if p else []:
            paths.append(prefix.rstrip(":") if sub == "self" else prefix + sub)
    return paths


class Crate:
    def __init__(self, src):
        self.src = src
        self.files = {}  # module path tuple -> file
        self.text = {}
        root = "lib.rs" if os.path.exists(os.path.join(src, "lib.rs")) else "main.rs"
        self._load((), os.path.join(src, root))
        self.module_of = {f: m for m, f in self.files.items()}

    def _load(self, module, path):
        with open(path, encoding="utf-8") as f:
            raw = f.read()
        text = strip(raw)
        self.files[module] = path
        self.text[module] = text
        directory = os.path.dirname(path) if os.path.basename(path) in ("mod.rs", "lib.rs", "main.rs") else path[:-3]
        for m in re.finditer(r"^\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text, re.M):
            name = m.group(1)
            for cand in (os.path.join(directory, name + ".rs"), os.path.join(directory, name, "mod.rs")):
                if os.path.exists(cand):
                    if not is_test_file(cand):
                        self._load(module + (name,), cand)
                    break

    def defines(self, module, name):
        return re.search(
            r"^\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?(?:unsafe\s+|async\s+|const\s+)*"
            r"(?:struct|enum|union|trait|fn|type|const|static|macro_rules!)\s+" + re.escape(name) + r"\b",
            self.text[module],
            re.M,
        )

    def reexports(self, module):
        out = []
        for m in PUB_USE.finditer(self.text[module]):
            for p in expand(m.group(1)):
                out.append(p)
        return out

    def absolute(self, module, segs):
        """Turns a path as written in `module` into an absolute module-path list, or None."""
        segs = list(segs)
        if not segs:
            return None
        if segs[0] == "crate":
            return segs[1:]
        if segs[0] in ("self", "super"):
            base = list(module)
            while segs and segs[0] in ("self", "super"):
                if segs.pop(0) == "super":
                    if not base:
                        return None
                    base.pop()
            return base + segs
        if module + (segs[0],) in self.files:
            return list(module) + segs
        return None  # an external crate or std

    def resolve(self, segs, seen=None):
        """The file defining the item at absolute path `segs` (a list of names)."""
        seen = seen or set()
        key = tuple(segs)
        if key in seen:
            return None
        seen.add(key)
        module = ()
        i = 0
        while i < len(segs) and module + (segs[i],) in self.files:
            module += (segs[i],)
            i += 1
        if i == len(segs) or segs[i] == "*":
            return self.files[module]
        name = segs[i]
        if self.defines(module, name):
            return self.files[module]
        for path in self.reexports(module):
            parts = path.split("::")
            original, _, shown = parts[-1].partition("@")
            shown = shown or original
            if original == "*":
                # A glob re-export: the item is the source module's, if that defines it.
                source = self.absolute(module, parts[:-1])
                if source is not None:
                    f = self.resolve(source + segs[i:], seen)
                    if f and f != self.files.get(tuple(source)) or (f and self.defines(tuple(source), name)):
                        return f
            elif shown == name:
                target = self.absolute(module, parts[:-1] + [original])
                if target is not None:
                    f = self.resolve(target + segs[i + 1 :], seen)
                    if f:
                        return f
        return self.files[module]

    def edges(self):
        graph = {f: set() for f in self.files.values()}
        for module, text in self.text.items():
            here = self.files[module]
            paths = []
            for m in USE.finditer(text):
                paths += expand(m.group(1))
            body = USE.sub(" ", text)
            paths += [m.group(1) for m in INLINE.finditer(body)]
            for p in paths:
                parts = p.split("::")
                parts[-1] = parts[-1].split("@")[0]
                target = self.absolute(module, [s for s in parts if s])
                if target is None:
                    continue
                f = self.resolve(target)
                if f and f != here and not self.nested(here, f):
                    graph[here].add(f)
        return graph

    def nested(self, a, b):
        """Whether one file's module holds the other's: a folder and its mod.rs are one unit."""
        ma, mb = self.module_of[a], self.module_of[b]
        return mb[: len(ma)] == ma or ma[: len(mb)] == mb


def is_test_file(path):
    base = os.path.basename(path)
    return base == "tests.rs" or base.endswith("_tests.rs")


def circles(graph):
    """Tarjan's strongly connected components of two or more nodes, largest first."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out, key=lambda c: (-len(c), c))


def main(argv):
    only_count = "--count" in argv
    roots = [a for a in argv if not a.startswith("--")]
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not roots:
        roots = sorted(os.path.join(here, "crates", c) for c in os.listdir(os.path.join(here, "crates")))
    total = 0
    for root in roots:
        src = os.path.join(root, "src")
        if not os.path.isdir(src):
            continue
        graph = Crate(src).edges()
        found = circles(graph)
        total += len(found)
        if only_count:
            continue
        for comp in found:
            names = [os.path.relpath(f, src) for f in comp]
            print(f"{os.path.basename(os.path.normpath(root))}: {len(comp)} files: {' '.join(names)}")
            if "--edges" in argv:
                for f in comp:
                    inside = sorted(os.path.relpath(g, src) for g in graph[f] if g in comp)
                    print(f"    {os.path.relpath(f, src)} -> {' '.join(inside)}")
    print(total if only_count else f"{total} import circles")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
