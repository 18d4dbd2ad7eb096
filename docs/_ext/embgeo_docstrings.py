"""Read embgeo's docstrings as the plain text they are written in.

The docstrings write mathematics in Unicode (``‖W‖``, ``|S|``, ``⟨E_s, p⟩``). In reStructuredText a word
between two bars, ``|S|``, is a substitution reference, so every cardinality would be an error. This
``autodoc-process-docstring`` hook escapes the bars outside inline literals, roles and literal blocks
(where a backslash would show), and shows the types of napoleon's Attributes sections as text, leaving
the docstrings themselves untouched. Entries continued on further-indented lines inside a paragraph
("name : text" followed by an indented continuation) are joined to their paragraph instead of being an
"unexpected indentation" error.
"""

from __future__ import annotations

import re

#: ``literal``, :role:`text` and `interpreted text`: left as they are.
_PROTECTED = re.compile(r"``.+?``|(?::[\w.:+-]+:)?`[^`]+`_{0,2}")


def _escape_line(line: str) -> str:
    out, pos = [], 0
    for m in _PROTECTED.finditer(line):
        out.append(re.sub(r"(?<!\\)\|", r"\\|", line[pos:m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(re.sub(r"(?<!\\)\|", r"\\|", line[pos:]))
    return "".join(out)


def escape_bars(lines: list[str]) -> list[str]:
    """The docstring's lines with substitution-like bars escaped (literal blocks kept verbatim)."""
    out, literal_indent, expect_literal, base_indent = [], None, False, 0
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if literal_indent is not None:
            if stripped and indent <= literal_indent:
                literal_indent = None
            else:
                out.append(line)
                continue
        if expect_literal and stripped:
            expect_literal = False
            if indent > base_indent:
                literal_indent = base_indent
                out.append(line)
                continue
        if stripped.startswith(">>>"):
            out.append(line)
            continue
        if stripped.endswith("::"):
            expect_literal, base_indent = True, indent
        out.append(_escape_line(line) if "|" in line else line)
    return out


_VARTYPE = re.compile(r"^(\s*:vartype [^:]+:\s+)([^*`\\]+?)\s*$")


def plain_types(lines: list[str]) -> list[str]:
    """``:vartype x: ndarray (m, d)`` (napoleon's Attributes) shown as text: a shape in words such as
    "(m, d)" is not a cross-reference (a linked ``m`` would point at whichever attribute is named m)."""
    return [_VARTYPE.sub(r"\1*\2*", line) for line in lines]


_NOT_PLAIN = re.compile(r"^(:|\.\.|[-*+] |#\. |\d+[.)] |\(?[a-zA-Z][.)] |>>>|\||\+[-=])")
#: A border line of a simple table ("=====  =====").
_TABLE_BORDER = re.compile(r"^\s*=+( +=+)*\s*$")


def _plain(line: str) -> bool:
    """A line of running text (not a field, directive, list item or doctest)."""
    return bool(line.strip()) and not _NOT_PLAIN.match(line.strip())


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _ends_unindented(lines: list[str], k: int, base: int) -> bool:
    """Whether the indented run starting at ``lines[k]`` is followed directly (no blank line) by text at
    indentation ``base`` or less: then it cannot be a definition list's definition."""
    for line in lines[k:]:
        if not line.strip():
            return False
        if _indent(line) <= base:
            return True
    return False


def join_hanging(lines: list[str]) -> list[str]:
    """Hanging indents inside a paragraph joined to it.

    Plain-text docstrings continue an entry ("name : text") on lines indented further; inside a paragraph
    reStructuredText reads that as an unexpected indentation (an error). Such a run is moved to the
    paragraph's indentation, so it continues the paragraph. A line after a one-line paragraph (a definition
    list followed by a blank line), after ``::``, after a field or list item, or inside a table is left alone.
    """
    out: list[str] = []
    dedent_to = None
    in_table = False
    for k, line in enumerate(lines):
        if _TABLE_BORDER.match(line):  # simple tables keep their continuation lines as they are
            following = lines[k + 1] if k + 1 < len(lines) else ""
            in_table = not (in_table and not following.strip())
            dedent_to = None
            out.append(line)
            continue
        if in_table:
            out.append(line)
            continue
        if dedent_to is not None:
            if line.strip() and _indent(line) > dedent_to:
                out.append(" " * dedent_to + line.lstrip())
                continue
            dedent_to = None
        if (k >= 1 and line.strip() and _plain(out[-1]) and _indent(line) > _indent(out[-1])
                and not out[-1].rstrip().endswith("::")
                and ((k >= 2 and _plain(out[-2]) and _indent(out[-1]) == _indent(out[-2]))
                     or _ends_unindented(lines, k, _indent(out[-1])))):
            dedent_to = _indent(out[-1])
            out.append(" " * dedent_to + line.lstrip())
            continue
        out.append(line)
    return out


def _process(app, what, name, obj, options, lines):
    lines[:] = escape_bars(plain_types(join_hanging(lines)))


def setup(app):
    app.connect("autodoc-process-docstring", _process)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
