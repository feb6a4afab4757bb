#!/usr/bin/python3
"""Reference renderer for the chat template tests: Python's jinja2 set up as Hugging Face
transformers sets it up for chat templates (ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks and the loopcontrols extension; its own tojson; raise_exception; strftime_now;
tools/documents passed as None when absent).

stdin: one JSON case per line
  {"template": str, "messages": [...], "tools"?: [...], "add_generation_prompt"?: bool,
   "bos_token"?: str, "eos_token"?: str, "extra"?: {...}}
stdout: one JSON line per case: {"text": rendered} or {"error": message, "type": exception class}
"""
import json
import sys
from datetime import datetime

from jinja2 import nodes
from jinja2.exceptions import TemplateError
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


class AssistantTracker(Extension):
    """transformers' {% generation %} ... {% endgeneration %} tag: renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


env = ImmutableSandboxedEnvironment(
    trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols]
)
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now

compiled = {}
for line in sys.stdin:
    if not line.strip():
        continue
    case = json.loads(line)
    try:
        src = case["template"]
        if src not in compiled:
            compiled[src] = env.from_string(src)
        kwargs = dict(
            messages=case.get("messages", []),
            tools=case.get("tools"),
            documents=None,
            add_generation_prompt=case.get("add_generation_prompt", False),
            bos_token=case.get("bos_token", ""),
            eos_token=case.get("eos_token", ""),
        )
        kwargs.update(case.get("extra", {}))
        out = {"text": compiled[src].render(**kwargs)}
    except Exception as e:  # the test compares failures too
        out = {"error": str(e), "type": type(e).__name__}
    sys.stdout.write(json.dumps(out) + "\n")
