"""Sphinx extension: remove two console errors that Jupyter Book 1's theme stack prints on every page.

The browser test (tests/browser) fails on any console error, so these are fixed here, not ignored:

1. ``Identifier 'THEBE_JS_URL' has already been declared``: sphinx-thebe adds its inline
   configuration script on every ``env-before-read-docs``, and Jupyter Book's build fires that
   more than once, so each page carries two identical ``const THEBE_JS_URL = ...`` scripts and
   the second one throws. Identical script entries are dropped from each page.
2. ``Got invalid theme mode: . Resetting to auto.``: pydata-sphinx-theme reads the colour mode
   from localStorage, falling back to the page context's ``default_mode``, which Jupyter Book
   leaves empty; on a reader's first visit the mode is "". It is set to "auto" (follow the
   system), which is what the theme resets to anyway.
"""

from __future__ import annotations

from sphinx.application import Sphinx


def fix_page(app: Sphinx, pagename, templatename, context, doctree) -> None:
    if not context.get("default_mode"):
        context["default_mode"] = "auto"
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        # The same script added twice at different priorities is still the same script.
        # (An inline script has filename None or "" depending on who added it.)
        key = (
            str(getattr(script, "filename", script) or ""),
            tuple(sorted(getattr(script, "attributes", {}).items())),
        )
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique


def setup(app: Sphinx) -> dict:
    app.connect("html-page-context", fix_page)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
