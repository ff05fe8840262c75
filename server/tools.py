"""Tool calls: the request's tools into the chat template, the model's tool-call syntax parsed
back into OpenAI tool_calls, and the grammar that forces a call (tool_choice "required" or a
named function).

The syntax is Hermes/Qwen2.5/Qwen3's: <tool_call>\\n{"name": ..., "arguments": {...}}\\n
</tool_call>, one block per call. A template that takes no `tools` variable (SmolLM2's) gets the
tool list and this syntax in a system message instead.
"""

from __future__ import annotations

import json
import uuid

from cann_llm.text_stream import partial_prefix

__all__ = ["ToolCallParser", "prepare_messages", "call_grammar", "template_takes_tools"]

OPEN, CLOSE = "<tool_call>", "</tool_call>"


def template_takes_tools(source: str | None) -> bool:
    """The chat template renders a `tools` variable (Hugging Face's convention)."""
    return bool(source) and "tools" in source


def _fallback_system(tools: list[dict]) -> str:
    lines = ["You may call one or more functions to help with the user's request. The "
             "functions are described in JSON inside <tools></tools>:", "<tools>"]
    lines += [json.dumps(t, ensure_ascii=False) for t in tools]
    lines += ["</tools>", "To call a function, answer with one block per call:",
              f'{OPEN}\n{{"name": <function-name>, "arguments": <arguments-json-object>}}\n'
              f'{CLOSE}']
    return "\n".join(lines)


def _arguments_object(arguments):
    """The template sees arguments as an object (OpenAI sends them as a JSON string)."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def _call_text(call: dict) -> str:
    f = call.get("function", call)
    body = {"name": f.get("name"), "arguments": _arguments_object(f.get("arguments", {}))}
    return f"{OPEN}\n{json.dumps(body, ensure_ascii=False)}\n{CLOSE}"


def prepare_messages(messages: list[dict], tools: list[dict] | None, native: bool) -> list[dict]:
    """Messages for the template: assistant tool_calls with their arguments as objects; without
    native tool support, the tools in a system message and past calls as text in the syntax."""
    out = []
    for m in messages:
        m = dict(m)
        calls = m.get("tool_calls")
        if calls:
            if native:
                m["tool_calls"] = [{**c, "function": {**c["function"], "arguments":
                                                      _arguments_object(c["function"].get(
                                                          "arguments", {}))}} for c in calls]
            else:
                text = "\n".join(_call_text(c) for c in calls)
                m["content"] = ((m.get("content") or "") + "\n" + text).lstrip("\n")
                del m["tool_calls"]
        elif "tool_calls" in m:
            del m["tool_calls"]
        if not native and m["role"] == "tool":
            m = {"role": "user", "content": f"<tool_response>\n{m.get('content') or ''}\n"
                                            f"</tool_response>"}
        out.append(m)
    if tools and not native:
        system = _fallback_system(tools)
        if out and out[0]["role"] == "system":
            out[0] = {**out[0], "content": out[0]["content"] + "\n\n" + system}
        else:
            out.insert(0, {"role": "system", "content": system})
    return out


def call_grammar(tools: list[dict], name: str | None, parallel: bool = True) -> str:
    """Lark text (llguidance's dialect) of one call of `name`, or with name None of one or more
    calls (just one unless parallel) of any of the tools; arguments validate against the
    function's parameters schema, in compact JSON."""
    bodies = []
    for t in tools:
        f = t["function"]
        if name is not None and f["name"] != name:
            continue
        params = f.get("parameters") or {"type": "object", "properties": {}}
        bodies.append({"type": "object", "properties": {"name": {"const": f["name"]},
                                                        "arguments": params},
                       "required": ["name", "arguments"], "additionalProperties": False})
    schema = bodies[0] if len(bodies) == 1 else {"anyOf": bodies}
    schema = {**schema, "x-guidance": {"whitespace_flexible": False, "item_separator": ",",
                                       "key_separator": ":"}}
    more = ' ("\\n" call)*' if parallel and name is None else ""
    return (f"start: call{more}\n"
            f'call: "{OPEN}\\n" body "\\n{CLOSE}"\n'
            f"body: %json {json.dumps(schema)}\n")


def _new_call(text: str, names: set) -> dict | None:
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    if names and obj["name"] not in names:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if not isinstance(args, str):
        args = json.dumps(args, ensure_ascii=False)
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": obj["name"], "arguments": args}}


class ToolCallParser:
    """add(text) -> (content, new calls); finish() -> the same for the held-back rest.
    Streaming-safe: a tag split across tokens is held back until it is complete, and so is
    whitespace around the calls (dropped there, kept inside text)."""

    def __init__(self, names=()):
        self.names = set(names)
        self.calls: list[dict] = []
        self._buf = ""
        self._in_call = False
        self._gap = ""

    def add(self, text: str) -> tuple[str, list[dict]]:
        self._buf += text
        content, calls = "", []
        while self._buf:
            if self._in_call:
                i = self._buf.find(CLOSE)
                if i < 0:
                    break
                raw, self._buf = self._buf[:i], self._buf[i + len(CLOSE):]
                self._in_call = False
                call = _new_call(raw.strip(), self.names)
                if call is None:                 # not a call after all: show it as it was
                    content += self._gap + OPEN + raw + CLOSE
                else:
                    calls.append(call)
                continue
            i = self._buf.find(OPEN)
            if i >= 0:
                before = self._buf[:i]
                content += before.rstrip()
                self._gap = before[len(before.rstrip()):]    # shown again if no call follows
                self._buf, self._in_call = self._buf[i + len(OPEN):], True
                continue
            keep = partial_prefix(self._buf, OPEN)
            head = self._buf[:len(self._buf) - keep]
            body = head.rstrip()                   # trailing whitespace waits for more text
            if body:
                content += body
                self._buf = self._buf[len(body):]
            break
        self.calls += calls
        return content, calls

    def finish(self) -> tuple[str, list[dict]]:
        rest, self._buf = self._buf, ""
        if self._in_call:                          # a call the model never closed
            self._in_call = False
            call = _new_call(rest.strip(), self.names)
            if call is not None:
                self.calls.append(call)
                return "", [call]
            return (self._gap + OPEN + rest).rstrip(), []
        return ("" if self.calls else rest.rstrip()), []
