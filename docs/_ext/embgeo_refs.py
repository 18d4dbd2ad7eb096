"""Cross-references that follow code moves: ``:func:`embgeo.ntp.theory.w_star``` still links after ``w_star``
moves to another module that ``embgeo.ntp.theory`` re-exports.

On ``missing-reference`` for the Python domain, the target is imported as written; if it names an object
whose defining module (``__module__``) differs, the reference is resolved to the object's canonical name, where
autodoc documents it. An object that cannot be imported stays plain text, as without this hook (the site is
not built nitpicky).
"""

from __future__ import annotations

import importlib


def canonical_name(target: str) -> str | None:
    """``module.qualname`` where the object named ``target`` is defined, or None."""
    parts = target.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
        return f"{module}.{qualname}" if module and qualname else None
    return None


def _missing_reference(app, env, node, contnode):
    if node.get("refdomain") != "py" or not node.get("reftarget", "").startswith("embgeo."):
        return None
    name = canonical_name(node["reftarget"])
    if not name or name == node["reftarget"]:
        return None
    domain = env.get_domain("py")
    return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], name, node, contnode)


def setup(app):
    app.connect("missing-reference", _missing_reference)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
