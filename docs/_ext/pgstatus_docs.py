"""
Sphinx extension: the reference pages that pg-status's own code generates.

- ``{pgstatus-settings}``: a table of every ``pg_status__*`` variable, from
  the settings table (:data:`pgstatus.config.table.SETTINGS`): its default,
  the values it accepts, whether a reload applies it, and what it does.
  Each variable is also registered as an ``envvar`` object, so other pages
  link to it with ``{envvar}`pg_status__sleep_ms``` (and, with
  ``nitpicky``, a link to a variable that does not exist fails the build).
- ``{pgstatus-openapi}``: the HTTP API, from the OpenAPI document
  (:data:`pgstatus.http.openapi.DOCUMENT`): every path with its
  parameters and responses, then the schemas.  The document's descriptions
  are CommonMark, so the directive writes Markdown and has MyST parse it.

Neither page can drift from the code: it is the code, printed.
"""

from __future__ import annotations

import json
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


class SettingsTable(SphinxDirective):
    """
    Every variable of the settings table, as one table.
    """

    has_content = False

    def run(self) -> list[nodes.Node]:
        from pgstatus.config.settings import PREFIX
        from pgstatus.config.table import SETTINGS

        std = self.env.get_domain("std")
        table = nodes.table(classes=["pgstatus-settings"])
        widths = (28, 12, 30, 8, 22)
        group = nodes.tgroup(cols=len(widths))
        table += group
        for w in widths:
            group += nodes.colspec(colwidth=w)
        head = nodes.thead()
        group += head
        head += _row("variable", "default", "values", "reload", "what it does")
        body = nodes.tbody()
        group += body
        for s in SETTINGS:
            name = PREFIX + s.name
            node_id = "envvar-" + name
            term = nodes.literal(name, name)
            row = _row(term, nodes.literal(s.default, s.default) if s.default else "(none)",
                       s.accepts, "yes" if s.reload else "restart", s.summary)
            row["ids"].append(node_id)
            std.note_object("envvar", name, node_id, location=row)
            body += row
        return [table]


def _row(*cells: str | nodes.Node) -> nodes.row:
    row = nodes.row()
    for cell in cells:
        entry = nodes.entry()
        para = nodes.paragraph()
        para += nodes.Text(cell) if isinstance(cell, str) else cell
        entry += para
        row += entry
    return row


class OpenAPIReference(SphinxDirective):
    """
    The paths, parameters, responses and schemas of the OpenAPI document.
    """

    has_content = False

    def run(self) -> list[nodes.Node]:
        from pgstatus.http.openapi import DOCUMENT

        container = nodes.container(classes=["pgstatus-openapi"])
        text = openapi_markdown(DOCUMENT)
        self.state.nested_parse(StringList(text.splitlines(), source="openapi.json"),
                                self.content_offset, container)
        return [container]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _schema_type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[1]
    if "const" in schema:
        return "`" + json.dumps(schema["const"]) + "`"
    if "oneOf" in schema:
        return " or ".join(_schema_type(s) for s in schema["oneOf"])
    kind = schema.get("type", "any")
    kinds = kind if isinstance(kind, list) else [kind]
    out = " or ".join(kinds)
    bounds = [f"{k} {schema[k]}" for k in ("minimum", "maximum", "minLength", "maxLength")
              if k in schema]
    if bounds:
        out += " (" + ", ".join(bounds) + ")"
    return out


def _resolve(doc: dict[str, Any], ref: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    if "$ref" not in ref:
        return None, ref
    _, _, kind, name = ref["$ref"].split("/")
    return name, doc["components"][kind][name]


def openapi_markdown(doc: dict[str, Any]) -> str:
    """
    The API reference as MyST Markdown: every path of ``doc`` in order, with
    its GET operation's parameters and responses (HEAD answers the same
    without a body; other methods 405), then the component schemas.  No
    headings, since this is parsed inside a directive: each path is a
    rubric with a label ``api-<path>``.

    :param doc: the OpenAPI document.
    """
    out: list[str] = [doc["info"]["description"], ""]
    for path, item in doc["paths"].items():
        get = item["get"]
        label = "api" + path.replace("/", "-").replace(".", "-")
        out += [f"({label})=", "```{rubric} GET, HEAD " + path, "```", "",
                f"**{get['summary']}.** {get['description']}", ""]
        params = [_resolve(doc, p)[1] for p in item.get("parameters", [])]
        if params:
            out += ["| parameter | required | type | meaning |", "|---|---|---|---|"]
            for p in params:
                out.append(f"| `{p['name']}` | {'yes' if p.get('required') else 'no'} | "
                           f"{_cell(_schema_type(p['schema']))} | {_cell(p['description'])} |")
            out.append("")
        out += ["| status | body | meaning |", "|---|---|---|"]
        for code, resp in sorted(get["responses"].items()):
            _, resp = _resolve(doc, resp)
            types = ", ".join(f"`{t}`" for t in resp.get("content", {})) or "empty"
            if resp.get("x-empty-body"):
                types = "empty, or with `Accept: application/json` " + types
            out.append(f"| {code} | {types} | {_cell(resp['description'])} |")
        out.append("")
    out += ["```{rubric} Schemas", "```", ""]
    for name, schema in doc["components"]["schemas"].items():
        out += [f"(api-schema-{name})=", f"**{name}**: {schema.get('description', '')}", ""]
        props = schema.get("properties")
        if props:
            out += ["| field | type | meaning |", "|---|---|---|"]
            for field, fs in props.items():
                out.append(f"| `{field}` | {_cell(_schema_type(fs))} | "
                           f"{_cell(fs.get('description', ''))} |")
            out.append("")
        elif "pattern" in schema:
            out += [f"A string matching `{schema['pattern']}`.", ""]
    return "\n".join(out) + "\n"


def setup(app: Sphinx) -> dict[str, Any]:
    """
    Register the two directives and the ``haproxy`` code-block language.
    """
    from pygments.lexers.special import TextLexer

    # the HAProxy recipes are fenced as `haproxy` so that a test can find
    # and check them; Pygments has no lexer for the format
    app.add_lexer("haproxy", TextLexer)
    app.add_directive("pgstatus-settings", SettingsTable)
    app.add_directive("pgstatus-openapi", OpenAPIReference)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
