#!/usr/bin/env python3
"""tests/docs/check_doc_snippets.py ROOT DOC... -- HARNESS...

Every C++ block of the docs (``` cpp, c++ or cuda fences in each DOC, paths
relative to ROOT) must be compiled: it must appear, verbatim, as a snippet of
a HARNESS file (the build compiles those), between a line

    // doc-snippet DOC            (or "// doc-snippet DOC (continued)": appended
                                   to that file's previous snippet, for a block
                                   whose parts need different scopes)

and a line "// end doc-snippet". Indentation is compared after removing what
the snippet's lines share, trailing spaces and blank lines at either end are
ignored. A snippet that no longer matches a block of its DOC fails too (the
block was edited or removed). A block shown as a whole file is marked by the
line before its fence, "<!-- the code below is FILE -->" (FILE relative to
ROOT, compiled by the tests that include it), and must be FILE's text, compared
the same way. Two marks skip a block: "<!-- readme-example -->" (README's
first program, checked by the example_readme tests) and
"<!-- schematic: ... -->" (an outline that is not C++).
Prints what is missing, with a diff against the nearest text, and exits 1.
First it checks itself: a block changed, a block added, a snippet lost and a
whole-file block changed (in memory) must each fail the check.
"""
import difflib
import os
import re
import sys

FENCE = re.compile(r"^```(cpp|c\+\+|cuda)\s*$")
SKIP_MARKERS = ("<!-- readme-example -->", "<!-- schematic")
WHOLE_FILE = re.compile(r"^<!-- the code below is (\S+) -->$")
BEGIN = re.compile(r"^\s*// doc-snippet (\S+)( \(continued\))?\s*$")
END = re.compile(r"^\s*// end doc-snippet\s*$")


def dedented(lines):
    """The lines without trailing spaces and without the indentation they all share."""
    lines = [line.rstrip() for line in lines]
    cut = min((len(line) - len(line.lstrip(" ")) for line in lines if line), default=0)
    return [line[cut:] for line in lines]


def normalized(lines):
    lines = dedented(lines)
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def read(root, path, overrides):
    if path in overrides:
        return overrides[path].split("\n")
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return f.read().split("\n")


def doc_blocks(root, doc, overrides):
    """(line of the fence, text) of each C++ block of `doc` not marked, the marked ones skipped, and
    (line, text, FILE) of each block marked as FILE's text."""
    blocks, skipped, whole_files = [], 0, []
    lines = read(root, doc, overrides)
    i = 0
    while i < len(lines):
        if FENCE.match(lines[i]):
            start = i
            i += 1
            while i < len(lines) and lines[i].rstrip() != "```":
                i += 1
            if i == len(lines):
                sys.exit(f"{doc}:{start + 1}: a C++ block that does not end")
            before = next((line.strip() for line in reversed(lines[:start]) if line.strip()), "")
            whole_file = WHOLE_FILE.match(before)
            if whole_file:
                whole_files.append((start + 1, normalized(lines[start + 1:i]), whole_file.group(1)))
            elif before.startswith(SKIP_MARKERS):
                skipped += 1
            else:
                blocks.append((start + 1, normalized(lines[start + 1:i])))
        i += 1
    return blocks, skipped, whole_files


def harness_snippets(root, harness, overrides):
    """(doc, line of the first marker, text) of each snippet of `harness`."""
    snippets = []
    lines = read(root, harness, overrides)
    i = 0
    while i < len(lines):
        begin = BEGIN.match(lines[i])
        if END.match(lines[i]):
            sys.exit(f"{harness}:{i + 1}: '// end doc-snippet' without a '// doc-snippet' line before it")
        if begin:
            start = i
            i += 1
            while i < len(lines) and not END.match(lines[i]):
                if BEGIN.match(lines[i]):
                    sys.exit(f"{harness}:{i + 1}: a '// doc-snippet' line inside the snippet of line {start + 1}")
                i += 1
            if i == len(lines):
                sys.exit(f"{harness}:{start + 1}: a snippet without its '// end doc-snippet' line")
            part = dedented(lines[start + 1:i])  # a part's own indentation goes before parts are joined
            if begin.group(2):
                if not snippets or snippets[-1][0] != begin.group(1):
                    sys.exit(f"{harness}:{start + 1}: '(continued)' follows no snippet of {begin.group(1)}")
                snippets[-1][2].extend(part)
            else:
                snippets.append((begin.group(1), start + 1, part))
        i += 1
    return [(doc, line, normalized(part)) for doc, line, part in snippets]


def nearest(text, candidates):
    best = max(candidates, key=lambda c: difflib.SequenceMatcher(None, text, c[1]).ratio(), default=None)
    if best is None or difflib.SequenceMatcher(None, text, best[1]).ratio() < 0.5:
        return None
    return best


def check(root, docs, harnesses, overrides, report=print):
    """The number of failures, each reported; the files' texts from `overrides` where it has them."""
    blocks = {doc: doc_blocks(root, doc, overrides) for doc in docs}
    snippets = [(harness,) + s for harness in harnesses for s in harness_snippets(root, harness, overrides)]
    failures = 0
    for doc, (_, _, whole_files) in blocks.items():
        for line, text, path in whole_files:
            if not os.path.isfile(os.path.join(root, path)) and path not in overrides:
                failures += 1
                report(f"{doc}:{line}: the block is marked as the text of {path}, which does not exist")
                continue
            shown = normalized(read(root, path, overrides))
            if text != shown:
                failures += 1
                report(f"{doc}:{line}: this block is marked as the text of {path} and differs from it:")
                diff = difflib.unified_diff(shown.split("\n"), text.split("\n"), path, f"{doc}:{line}", lineterm="")
                report("\n".join("    " + d for d in diff))
    for doc, (doc_list, _, _) in blocks.items():
        texts = {s[3] for s in snippets if s[1] == doc}
        for line, text in doc_list:
            if text in texts:
                continue
            failures += 1
            report(f"{doc}:{line}: this C++ block is compiled nowhere: copy it into {' or '.join(harnesses)} "
                  f"between '// doc-snippet {doc}' and '// end doc-snippet', with what it needs declared around it")
            near = nearest(text, [(s, s[3]) for s in snippets if s[1] == doc])
            if near:
                harness, _, snippet_line, snippet = near[0]
                report(f"  nearest snippet, {harness}:{snippet_line}, differs:")
                diff = difflib.unified_diff(snippet.split("\n"), text.split("\n"), f"{harness}:{snippet_line}",
                                            f"{doc}:{line}", lineterm="")
                report("\n".join("    " + d for d in diff))
    for harness, doc, line, text in snippets:
        if doc not in blocks:
            failures += 1
            report(f"{harness}:{line}: a snippet of {doc}, which is not among the checked docs ({', '.join(docs)})")
        elif text not in {t for _, t in blocks[doc][0]}:
            failures += 1
            report(f"{harness}:{line}: this snippet matches no C++ block of {doc} any more (edited or removed there?)")
    counted = sum(len(b) for b, _, _ in blocks.values())
    skipped = sum(s for _, s, _ in blocks.values())
    files = sum(len(w) for _, _, w in blocks.values())
    if not failures:
        report(f"check_doc_snippets: all {counted} C++ blocks of {len(docs)} docs are compiled ({len(snippets)} "
               f"snippets in {len(harnesses)} files), {files} whole-file block(s) match their files; {skipped} marked "
               f"block(s) skipped (the README example, outlines)")
    return failures


def self_test(root, docs, harnesses):
    """The check must fail when a block changes, when a snippet is lost, and when a block is added;
    returns what it let pass."""
    text = "\n".join(read(root, docs[0], {}))
    fence = text.find("\n```cpp\n", text.find("\n```cpp\n") + 1)  # the second block (the first may be marked)
    assert fence >= 0, f"{docs[0]} has fewer than two C++ blocks"
    changed = text[:fence + 8] + "int changed_by_the_self_test;\n" + text[fence + 8:]
    added = text + "\n```cpp\nint added_by_the_self_test;\n```\n"
    harness = "\n".join(read(root, harnesses[0], {}))
    lost = re.sub(r"// doc-snippet [^\n]*\n", "", harness, count=1)
    lost = re.sub(r"\n\s*// end doc-snippet", "", lost, count=1)
    cases = {"a block changed": {docs[0]: changed}, "a block added": {docs[0]: added},
             "a snippet lost": {harnesses[0]: lost}}
    for doc in docs:  # the first whole-file block, a line added to it
        doc_text = "\n".join(read(root, doc, {}))
        mark = re.search(r"\n<!-- the code below is \S+ -->\n```\w*\n", doc_text)
        if mark:
            cases["a whole-file block changed"] = {
                doc: doc_text[:mark.end()] + "int changed_by_the_self_test;\n" + doc_text[mark.end():]}
            break
    quiet = lambda *_: None
    return [name for name, overrides in cases.items() if check(root, docs, harnesses, overrides, quiet) == 0]


def main():
    if "--" not in sys.argv[2:]:
        sys.exit(__doc__)
    split = sys.argv.index("--")
    root, docs, harnesses = sys.argv[1], sys.argv[2:split], sys.argv[split + 1:]
    passed = self_test(root, docs, harnesses)
    if passed:
        print(f"check_doc_snippets: the check let these pass: {', '.join(passed)} (the checker is broken)")
        return 1
    failures = check(root, docs, harnesses, {})
    if failures:
        print(f"check_doc_snippets: {failures} failure(s)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
