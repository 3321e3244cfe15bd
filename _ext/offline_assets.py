"""Sphinx extension: the built book loads its JavaScript from its own ``_static`` folder, never a CDN.

The versions served are pinned in ``package.json`` / ``package-lock.json`` at the top of the
repository and installed into ``node_modules/`` by ``npm ci`` (the Makefile's set-up does it).
At the end of an HTML build this extension

1. copies MathJax 3 and vega / vega-lite / vega-embed from ``node_modules/`` into
   ``_static/vendor/`` and points Sphinx's ``mathjax_path`` at the local MathJax;
2. rewrites, in every built page, the ``cdn.jsdelivr.net`` addresses from which altair's chart
   outputs (stored in the notebooks as text/html) load vega, to the local copies. The notebooks
   themselves are untouched, so the same charts still render in Jupyter and Colab from the CDN;
3. checks each page: a version altair asks for that the pinned package does not satisfy, or a
   ``<script src>`` / ``<link href>`` left pointing at another host, is a Sphinx warning, so the
   strict build (``-W``) fails instead of publishing a page that needs the network.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util import logging

logger = logging.getLogger(__name__)

VENDOR = "npm"  # folder under _static (the theme already uses _static/vendor)
# npm package -> (files or folders to copy, relative to the package; the file pages load).
PACKAGES = {
    "mathjax": (
        [
            "es5/tex-mml-chtml.js",
            "es5/input",
            "es5/output/chtml",
            "es5/ui",
            "es5/a11y",
            "es5/sre",
            "es5/adaptors",
            "LICENSE",
        ],
        "es5/tex-mml-chtml.js",
    ),
    "vega": (["build/vega.min.js", "LICENSE"], "build/vega.min.js"),
    "vega-lite": (["build/vega-lite.min.js", "LICENSE"], "build/vega-lite.min.js"),
    "vega-embed": (["build/vega-embed.min.js", "LICENSE"], "build/vega-embed.min.js"),
}
# What altair's HTML renderer writes: "https://cdn.jsdelivr.net/npm/vega-lite@6.4.1?noext".
# "vega-lib" is listed in its path table but never loaded; it is mapped to vega all the same.
CDN_RE = re.compile(
    r"https://cdn\.jsdelivr\.net/npm/(vega-embed|vega-lite|vega-lib|vega)(?:@([0-9][0-9A-Za-z.\-]*))?"
    r"(\?noext)?"
)
# A tag that makes the browser fetch something: script src, link href (stylesheets, fonts, icons).
REMOTE_TAG_RE = re.compile(
    r"<(?:script|link|img|iframe)\b[^>]*?\b(?:src|href)=[\"']((?:https?:)?//[^\"']+)[\"'][^>]*>",
    re.IGNORECASE,
)


def _node_modules(app: Sphinx) -> Path:
    return Path(app.confdir) / "node_modules"


def _installed_version(app: Sphinx, package: str) -> str:
    manifest = _node_modules(app) / package / "package.json"
    if not manifest.is_file():
        raise ExtensionError(
            f"offline_assets: {manifest} is missing. The book serves its JavaScript itself; "
            "install the pinned packages with `npm ci` at the top of the repository "
            "(`make book` does it)."
        )
    return json.loads(manifest.read_text(encoding="utf-8"))["version"]


def satisfies(installed: str, wanted: str | None) -> bool:
    """altair asks for a major ("6"), or an exact version ("6.4.1"); a prefix match covers both."""
    if not wanted:
        return True
    return installed == wanted or installed.startswith(wanted + ".")


def use_local_mathjax(app: Sphinx, config) -> None:
    """Point Sphinx's MathJax at the copy in _static (a relative mathjax_path is under _static)."""
    config.mathjax_path = f"{VENDOR}/mathjax/{PACKAGES['mathjax'][1].removeprefix('es5/')}"


def check_installed(app: Sphinx) -> None:
    if app.builder.format != "html":
        return
    for package in PACKAGES:
        _installed_version(app, package)


def _copy_assets(app: Sphinx) -> dict[str, str]:
    """Copy the pinned files into _static/vendor/<package>/; return package -> loaded file URL part."""
    static = Path(app.outdir) / "_static" / VENDOR
    entry = {}
    for package, (parts, main) in PACKAGES.items():
        src_root = _node_modules(app) / package
        dst_root = static / package
        for part in parts:
            src = src_root / part
            # MathJax's es5/ prefix is dropped, so that its own loader finds input/, output/... beside it.
            dst = dst_root / (
                part.removeprefix("es5/") if package == "mathjax" else Path(part).name
            )
            if src.is_dir():
                shutil.copytree(src, dst, dirs_exist_ok=True)
            else:
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
        entry[package] = f"{VENDOR}/{package}/" + (
            main.removeprefix("es5/") if package == "mathjax" else Path(main).name
        )
    return entry


def rewrite_page(
    page: Path, outdir: Path, entry: dict[str, str], versions: dict[str, str]
) -> None:
    text = page.read_text(encoding="utf-8")
    static = os.path.relpath(outdir / "_static", page.parent).replace(os.sep, "/")
    docname = page.relative_to(outdir).as_posix()

    def local(match: re.Match) -> str:
        package, wanted, noext = match.group(1), match.group(2), match.group(3) or ""
        package = "vega" if package == "vega-lib" else package
        if not satisfies(versions[package], wanted):
            logger.warning(
                f"offline_assets: {docname} asks for {package}@{wanted} but package.json pins "
                f"{package} {versions[package]}; update package.json and package-lock.json "
                "(npm install --save-exact) to a version that satisfies it.",
                type="offline_assets",
            )
        return f"{static}/{entry[package]}{noext}"

    new = CDN_RE.sub(local, text) if "cdn.jsdelivr.net/npm/vega" in text else text
    if new != text:
        page.write_text(new, encoding="utf-8")
    for url in REMOTE_TAG_RE.findall(new):
        logger.warning(
            f"offline_assets: {docname} loads {url} from another host; serve it from _static instead.",
            type="offline_assets",
        )


def finish(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    versions = {package: _installed_version(app, package) for package in PACKAGES}
    entry = _copy_assets(app)
    outdir = Path(app.outdir)
    for page in sorted(outdir.rglob("*.html")):
        if "_static" in page.relative_to(outdir).parts:
            continue
        rewrite_page(page, outdir, entry, versions)


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", use_local_mathjax)
    app.connect("builder-inited", check_installed)
    app.connect("build-finished", finish)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
