"""
Sphinx extension: the reference pages that pg-status's own code generates.

- ``{pgstatus-settings}``: every ``pg_status__*`` variable, from the
  settings table (:data:`pgstatus.config.table.SETTINGS`), in a section
  per topic (:data:`pgstatus.config.table.GROUPS`): what it does, its
  default, the values it accepts, and whether a reload applies it.
  Each variable is also registered as an ``envvar`` object, so other pages
  link to it with ``{envvar}`pg_status__sleep_ms``` (and, with
  ``nitpicky``, a link to a variable that does not exist fails the build).
- ``{pgstatus-metrics}``: every family ``/metrics`` exports, from the
  metric table (:data:`pgstatus.http.families.METRICS`): its name, type,
  labels and meaning, in a section per kind of instance that exports it.
  Each name is also registered as a ``metric`` object, so other pages link
  to it with ``{metric}`pgstatus_ready```.
- ``{pgstatus-openapi}``: the HTTP API, from the OpenAPI document
  (:data:`pgstatus.http.openapi.DOCUMENT`): every path with its
  parameters, responses and sample requests and answers, then the
  schemas.  The document's descriptions are CommonMark, so the directive
  writes Markdown and has MyST parse it.  The samples come from
  ``docs/reference/api-samples.json``, written from a real run by ``make
  docs-samples`` and held to the service's answers by
  ``tests/docs/test_api_samples.py``; a path without a sample fails the
  build.

No such page can drift from the code: it is the code, printed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


class SettingsReference(SphinxDirective):
    """
    Every variable of the settings table, by topic: a list of the topics,
    then a section per topic (:data:`pgstatus.config.table.GROUPS`) with
    its introduction, the pages about it, and each of its variables as a
    term (``envvar-<name>``) followed by what it does, its default, the
    values it accepts and whether a reload applies it.  No table: nothing
    to scroll sideways at any width.
    """

    has_content = False

    def run(self) -> list[nodes.Node]:
        from pgstatus.config.table import GROUPS, SETTINGS

        loose = [s.name for s in SETTINGS if s.group not in {g.key for g in GROUPS}]
        if loose:
            raise self.error(f"settings in no group of GROUPS: {', '.join(loose)}")
        topics = nodes.bullet_list(classes=["pgstatus-settings-topics"])
        out: list[nodes.Node] = [topics]
        for group in GROUPS:
            members = [s for s in SETTINGS if s.group == group.key]
            if not members:
                raise self.error(f"group {group.key!r} has no settings")
            topics += self._topic(group, members)
            out.append(self._section(group, members))
        return out

    @staticmethod
    def _topic(group: Any, members: list[Any]) -> nodes.list_item:
        """The list's line for ``group``: its title and its variables, as links."""
        from pgstatus.config.settings import PREFIX

        item = nodes.paragraph()
        item += nodes.reference("", group.title, refid="settings-" + group.key, internal=True)
        item += nodes.Text(": ")
        for i, s in enumerate(members):
            if i:
                item += nodes.Text(", ")
            ref = nodes.reference("", "", refid="envvar-" + PREFIX + s.name, internal=True)
            ref += nodes.literal(s.name, s.name)
            item += ref
        return nodes.list_item("", item)

    def _section(self, group: Any, members: list[Any]) -> nodes.section:
        """``group``'s section: title, introduction, pages, then its variables."""
        section = nodes.section(ids=["settings-" + group.key],
                                names=[nodes.fully_normalize_name(group.title)])
        section += nodes.title(group.title, group.title)
        section += nodes.paragraph(group.intro, group.intro)
        if group.see:
            see = nodes.paragraph(classes=["pgstatus-settings-see"])
            see += nodes.Text("See also: ")
            for i, doc in enumerate(group.see):
                if i:
                    see += nodes.Text(", ")
                ref = addnodes.pending_xref("", refdomain="std", reftype="doc",
                                            reftarget="/" + doc, refexplicit=False,
                                            refdoc=self.env.docname)
                ref += nodes.inline(doc, doc)
                see += ref
            see += nodes.Text(".")
            section += see
        entries = nodes.definition_list(classes=["pgstatus-settings"])
        for s in members:
            entries += self._entry(s)
        section += entries
        return section

    def _entry(self, s: Any) -> nodes.definition_list_item:
        """
        One variable: its name (the ``envvar`` target), what it does, then
        one line of facts: default, values, reload.
        """
        from pgstatus.config.settings import PREFIX

        name = PREFIX + s.name
        node_id = "envvar-" + name
        term = nodes.term("", "", ids=[node_id])
        term += nodes.strong("", "", nodes.literal(name, name))
        self.env.get_domain("std").note_object("envvar", name, node_id, location=term)
        definition = nodes.definition()
        definition += nodes.paragraph(s.summary, s.summary)
        facts = nodes.paragraph(classes=["pgstatus-setting-facts"])
        default = (nodes.literal(s.default, s.default, classes=["default"]) if s.default
                   else nodes.inline("(none)", "(none)", classes=["default"]))
        reload = "applies" if s.reload else "needs a restart"
        for i, (label, value) in enumerate((
                ("Default:", default),
                ("Values:", nodes.inline(s.accepts, s.accepts, classes=["values"])),
                ("Reload:", nodes.inline(reload, reload, classes=["reload"])))):
            if i:
                facts += nodes.Text(" · ")
            facts += nodes.strong(label, label)
            facts += nodes.Text(" ")
            facts += value
        definition += facts
        return nodes.definition_list_item("", term, definition)


#: the API samples, relative to the documentation's source directory
SAMPLES = "reference/api-samples.json"
#: a JSON body longer than this is shown indented
_ONE_LINE = 100


def sample_markdown(sample: dict[str, Any]) -> list[str]:
    """
    One sample as MyST Markdown: its note, then the curl command and the
    answer as ``curl -i`` prints it (status line, headers, body), in a
    ``console`` block.  A JSON body longer than a line is indented; a body
    that was cut ends with ``…``; an event stream's first ``data`` is
    repeated below it, indented.

    :param sample: an entry of the samples file.
    """
    body = sample["body"]
    ctype = dict((k.lower(), v) for k, v in sample["headers"]).get("content-type")
    if ctype == "application/json" and len(body) > _ONE_LINE and not sample["truncated"]:
        body = json.dumps(json.loads(body), indent=2)
    lines = [f"$ {sample['curl']}", f"HTTP/1.1 {sample['status']} {sample['reason']}",
             *(f"{k}: {v}" for k, v in sample["headers"]), ""]
    lines += body.rstrip("\n").split("\n") if body else []
    if sample["truncated"]:
        lines[-1] += " …"
    out = [f"*{sample['note']}*", "", "````console", *lines, "````", ""]
    if ctype == "text/event-stream":
        # the first event's data line, too long to read on one line
        data = next(ln[len("data: "):] for ln in body.split("\n") if ln.startswith("data: "))
        out += ["The first event's `data`, indented:", "", "````json",
                json.dumps(json.loads(data), indent=2), "````", ""]
    return out


#: the metric sections' titles, by scope
METRIC_SCOPES = (
    ("all", "Every instance"),
    ("hub", "Instances that poll PostgreSQL (not followers)"),
    ("follower", "Followers only"),
    ("patroni", "Instances that watch Patroni's leader key (pg_status__patroni_etcd)"),
)


class MetricsReference(SphinxDirective):
    """
    Every family of the metric table, in a section per scope
    (:data:`METRIC_SCOPES`), each family as a term (``metric-<name>``)
    followed by its meaning, then its type and labels.  No table, as for
    the settings: nothing to scroll sideways at any width.
    """

    has_content = False

    def run(self) -> list[nodes.Node]:
        from pgstatus.http.families import METRICS

        out: list[nodes.Node] = []
        for scope, title in METRIC_SCOPES:
            members = [m for m in METRICS if m.scope == scope]
            if not members:
                raise self.error(f"scope {scope!r} has no metrics")
            section = nodes.section(ids=["metrics-" + scope],
                                    names=[nodes.fully_normalize_name(title)])
            section += nodes.title(title, title)
            entries = nodes.definition_list(classes=["pgstatus-metrics"])
            for m in members:
                entries += self._entry(m)
            section += entries
            out.append(section)
        unknown = {m.scope for m in METRICS} - {scope for scope, _ in METRIC_SCOPES}
        if unknown:
            raise self.error(f"metrics of no scope of METRIC_SCOPES: {', '.join(unknown)}")
        return out

    def _entry(self, m: Any) -> nodes.definition_list_item:
        """
        One family: its name (the ``metric`` target), its meaning, then one
        line of facts: type, labels.
        """
        node_id = "metric-" + m.name
        term = nodes.term("", "", ids=[node_id])
        term += nodes.strong("", "", nodes.literal(m.name, m.name))
        self.env.get_domain("std").note_object("metric", m.name, node_id, location=term)
        definition = nodes.definition()
        definition += nodes.paragraph(m.help, m.help)
        facts = nodes.paragraph(classes=["pgstatus-metric-facts"])
        labels = ", ".join(m.labels + (("le",) if m.kind == "histogram" else ()))
        facts += nodes.strong("Type:", "Type:")
        facts += nodes.Text(" ")
        facts += nodes.inline(m.kind, m.kind, classes=["type"])
        facts += nodes.Text(" · ")
        facts += nodes.strong("Labels:", "Labels:")
        facts += nodes.Text(" ")
        facts += (nodes.literal(labels, labels, classes=["labels"]) if labels
                  else nodes.inline("none", "none", classes=["labels"]))
        definition += facts
        return nodes.definition_list_item("", term, definition)


class OpenAPIReference(SphinxDirective):
    """
    The paths, parameters, responses and schemas of the OpenAPI document.
    """

    has_content = False

    def run(self) -> list[nodes.Node]:
        from pgstatus.http.openapi import DOCUMENT

        path = Path(self.env.srcdir) / SAMPLES
        self.env.note_dependency(str(path))
        samples = json.loads(path.read_text())["samples"]
        missing = sorted(set(DOCUMENT["paths"]) - {s["route"] for s in samples})
        if missing:
            raise self.error(f"{SAMPLES}: no sample for {', '.join(missing)} "
                             "(add it to tests/docs/api_samples.py, run make docs-samples)")
        container = nodes.container(classes=["pgstatus-openapi"])
        text = openapi_markdown(DOCUMENT, samples)
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


def openapi_markdown(doc: dict[str, Any], samples: Sequence[dict[str, Any]] = ()) -> str:
    """
    The API reference as MyST Markdown: every path of ``doc`` in order, with
    its GET operation's parameters and responses (HEAD answers the same
    without a body; other methods 405) and its samples, then the component
    schemas.  No headings, since this is parsed inside a directive: each
    path is a rubric with a label ``api-<path>``.

    :param doc: the OpenAPI document.
    :param samples: the samples file's entries, in the order to print them.
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
        mine = [s for s in samples if s["route"] == path]
        if mine:
            out += ["**Examples.**" if len(mine) > 1 else "**Example.**", ""]
            for sample in mine:
                out += sample_markdown(sample)
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
    Register the directives, the ``metric`` object type and the ``haproxy``
    code-block language.
    """
    from pygments.lexers.special import TextLexer

    # the HAProxy recipes are fenced as `haproxy` so that a test can find
    # and check them; Pygments has no lexer for the format
    app.add_lexer("haproxy", TextLexer)
    app.add_directive("pgstatus-settings", SettingsReference)
    app.add_directive("pgstatus-openapi", OpenAPIReference)
    app.add_directive("pgstatus-metrics", MetricsReference)
    # {metric}`name` links to a metric's row; the rows note the objects
    app.add_object_type("metric", "metric", objname="metric")
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
