"""Tool calls: the request's tools into the chat template, the model's tool-call syntax parsed
back into OpenAI tool_calls, and the grammar that forces a call (tool_choice "required" or a
named function).

The syntax is Hermes/Qwen2.5/Qwen3's: <tool_call>\\n{"name": ..., "arguments": {...}}\\n
</tool_call>, one block per call. A template that takes no `tools` variable (SmolLM2's) gets the
tool list and this syntax in a system message instead.
"""

from __future__ import annotations

import json
import re
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


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


def _arguments_text(after_header: str) -> str:
    """The arguments' text: what follows "arguments": up to the outer object's closing brace."""
    args = after_header.rstrip()
    return args[:-1].rstrip() if args.endswith("}") else args


_HEADER = re.compile(r'\s*\{\s*"name"\s*:\s*"([^"\\]+)"\s*,\s*"arguments"\s*:\s*')


class ToolCallParser:
    """add(text) -> (content, call deltas); finish() -> the same for the held-back rest.

    Deltas are OpenAI's streamed tool_calls entries: {"index", "id", "type", "function":
    {"name", "arguments": ""}} when a call's name is known, then {"index", "function":
    {"arguments": fragment}} as its arguments arrive (the model's own text, without the outer
    object's closing brace). A call written in another key order, or with a name that is not
    a tool, is only judged once complete: one whole delta, or text again if it is no call.
    Tags split across tokens and the whitespace around calls are held back (dropped there,
    kept inside text); `calls` holds the finished calls."""

    def __init__(self, names=()):
        self.names = set(names)
        self.calls: list[dict] = []
        self._buf = ""
        self._in_call = False
        self._gap = ""
        self._call = None          # the call being streamed, once its header is read
        self._args_at = 0          # where its arguments start in _buf
        self._sent = 0             # argument characters sent so far

    def add(self, text: str) -> tuple[str, list[dict]]:
        self._buf += text
        content, deltas = "", []
        while self._buf:
            if self._in_call:
                i = self._buf.find(CLOSE)
                if i < 0:
                    deltas += self._stream_arguments()
                    break
                raw, self._buf = self._buf[:i], self._buf[i + len(CLOSE):]
                text_back, new = self._end_call(raw)
                content += text_back
                deltas += new
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
        return content, deltas

    def _stream_arguments(self) -> list[dict]:
        out = []
        if self._call is None:
            m = _HEADER.match(self._buf)
            if m is None or m.group(1) not in self.names:
                return out
            self._call = {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                          "function": {"name": m.group(1), "arguments": ""}}
            self._args_at, self._sent = m.end(), 0
            out.append({"index": len(self.calls), **json.loads(json.dumps(self._call))})
        args = self._buf[self._args_at:]
        # hold back a partial </tool_call>, trailing whitespace and the last "}" (it may be
        # the outer object's)
        safe = args[:len(args) - partial_prefix(args, CLOSE)].rstrip()
        if safe.endswith("}"):
            safe = safe[:-1]
        if len(safe) > self._sent:
            out.append({"index": len(self.calls),
                        "function": {"arguments": safe[self._sent:]}})
            self._sent = len(safe)
        return out

    def _end_call(self, raw: str) -> tuple[str, list[dict]]:
        """(text given back, deltas) for a call body that ended (closed or at the end)."""
        self._in_call = False
        call, self._call = self._call, None
        m = _HEADER.match(raw) if call is None else None
        if m is not None and m.group(1) in self.names and _is_json(raw[m.end():].rstrip()[:-1]):
            # the whole call arrived at once: the same arguments text as when streamed
            call = {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                    "function": {"name": m.group(1), "arguments": ""}}
            self._args_at, self._sent = m.end(), 0
            self.calls.append(call)
            call["function"]["arguments"] = _arguments_text(raw[m.end():])
            return "", [{"index": len(self.calls) - 1, **json.loads(json.dumps(call))}]
        if call is not None:
            args = _arguments_text(raw[self._args_at:])
            rest = args[self._sent:]
            call["function"]["arguments"] = args
            self.calls.append(call)
            return "", [{"index": len(self.calls) - 1, "function": {"arguments": rest}}] \
                if rest else []
        call = _new_call(raw.strip(), self.names)
        if call is None:                        # not a call after all: show it as it was
            return self._gap + OPEN + raw + CLOSE, []
        self.calls.append(call)
        return "", [{"index": len(self.calls) - 1, **json.loads(json.dumps(call))}]

    def finish(self) -> tuple[str, list[dict]]:
        rest, self._buf = self._buf, ""
        if self._in_call:                          # a call the model never closed
            text_back, deltas = self._end_call(rest)
            if text_back:
                return (text_back[:-len(CLOSE)]).rstrip(), deltas
            return "", deltas
        return ("" if self.calls else rest.rstrip()), []
