"""Read embgeo's docstrings as the plain text they are written in.

The docstrings write mathematics in Unicode (``‖W‖``, ``|S|``, ``⟨E_s, p⟩``). In reStructuredText a word
between two bars, ``|S|``, is a substitution reference, so every cardinality would be an error. This
``autodoc-process-docstring`` hook escapes the bars outside inline literals, roles and literal blocks
(where a backslash would show), and shows the types of napoleon's Attributes sections as text, leaving
the docstrings themselves untouched. Entries continued on further-indented lines inside a paragraph
("name : text" followed by an indented continuation) are joined to their paragraph instead of being an
"unexpected indentation" error.

Each attribute is listed once. A class's Attributes section becomes its "Variables" fields (napoleon's
``:ivar NAME:``, with the description), while autodoc would also list the same dataclass fields and properties
as members of their own, empty but for a type: a ``doctree-read`` hook removes the members the class's
Attributes section describes. A reference ``:attr:`Class.name``` to such an attribute links to the class,
where its description is.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # Sphinx is imported by the hooks that need it: the tests import this module without it
    from docutils import nodes

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


def described_attributes(content: nodes.Element) -> set[str]:
    """The attribute names a class's "Variables" fields (its Attributes section) describe, from the class's
    ``desc_content`` (its own fields only, not those of a nested class)."""
    from docutils import nodes
    from sphinx import addnodes

    names = set()
    for field_list in (c for c in content.children if isinstance(c, nodes.field_list)):
        for field in field_list.children:
            if field.next_node(nodes.field_name).astext() != "Variables":
                continue
            for paragraph in field.findall(nodes.paragraph):
                strong = paragraph.next_node(addnodes.literal_strong)
                if strong is not None and paragraph.index(strong) == 0:
                    names.add(strong.astext())
    return names


def drop_described_members(env, doctree: nodes.document) -> None:
    """In each class, the member entries (attributes, properties) of attributes that the class's Attributes
    section describes are removed with their index entries and their objects in the Python domain, so each
    attribute is listed once, with its description. (autodoc documents a dataclass's fields as members even
    without a docstring, and its events do not say which class a member belongs to, so this is done on the
    page, by a transform that runs before the index and the table of contents are collected.)"""
    from sphinx import addnodes

    domain = env.get_domain("py")
    for desc in list(doctree.findall(addnodes.desc)):
        if desc.get("objtype") not in ("class", "exception"):
            continue
        content = next((c for c in desc.children if isinstance(c, addnodes.desc_content)), None)
        described = described_attributes(content) if content is not None else set()
        if not described:
            continue
        for member in [c for c in content.children if isinstance(c, addnodes.desc)
                       and c.get("objtype") in ("attribute", "property")]:
            ids = [i for sig in member.findall(addnodes.desc_signature) for i in sig["ids"]]
            if not ids or ids[0].rsplit(".", 1)[-1] not in described:
                continue
            before = content.index(member) - 1
            if before >= 0 and isinstance(content[before], addnodes.index):
                content.remove(content[before])
            content.remove(member)
            for fullname in ids:
                domain.objects.pop(fullname, None)


def _attribute_reference(app, env, node, contnode):
    """An unresolved ``:attr:`Class.name``` (an attribute described in its class's Attributes section has no
    entry of its own): a link to the class, where the attribute is described."""
    target = node.get("reftarget", "")
    if node.get("refdomain") != "py" or node.get("reftype") != "attr" or "." not in target:
        return None
    owner = target.rsplit(".", 1)[0]
    return env.get_domain("py").resolve_xref(env, node["refdoc"], app.builder, "class", owner, node, contnode)


def setup(app):
    from sphinx.transforms import SphinxTransform

    class DropDescribedMembers(SphinxTransform):
        """:func:`drop_described_members` on each page, before the index entries are collected (SphinxDomains,
        priority 850) and the table of contents (on doctree-read)."""

        default_priority = 800

        def apply(self, **kwargs) -> None:
            drop_described_members(self.env, self.document)

    app.connect("autodoc-process-docstring", _process)
    app.add_transform(DropDescribedMembers)
    app.connect("missing-reference", _attribute_reference)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
