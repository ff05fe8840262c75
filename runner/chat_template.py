"""Chat templates: tokenizer.chat_template from a GGUF, rendered in a sandboxed Jinja2 environment.

The environment is the one Hugging Face's apply_chat_template sets up, as the templates shipped in
GGUF files are written for it: jinja2.sandbox.ImmutableSandboxedEnvironment with trim_blocks and
lstrip_blocks, the loop-controls extension, a `tojson` filter that keeps non-ASCII characters, and
the globals `raise_exception(message)` and `strftime_now(format)`. The variables are `messages`,
`add_generation_prompt`, `bos_token`, `eos_token` and any extra keyword given to render().

Access to unsafe attributes (``{{ ''.__class__ }}``) and mutation of the caller's objects
(``{{ messages.append(x) }}``) raise ChatTemplateError instead of rendering.

A model without a template gets CHATML_TEMPLATE (``<|im_start|>role\\ncontent<|im_end|>\\n`` per
message, then ``<|im_start|>assistant\\n`` for the generation prompt).
"""

from __future__ import annotations

import datetime
import json
from functools import lru_cache

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

__all__ = ["CHATML_TEMPLATE", "ChatTemplate", "ChatTemplateError"]

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


class ChatTemplateError(ValueError):
    """A chat template failed to compile or render (the message names the model)."""


class _Env(ImmutableSandboxedEnvironment):
    def unsafe_undefined(self, obj, attribute):
        # the stock sandbox returns an undefined value that renders as ""; refuse outright instead
        raise SecurityError(f"access to attribute {attribute!r} of a {type(obj).__name__!r} "
                            "object is unsafe")


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=False, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(fmt):
    return datetime.datetime.now().strftime(fmt)


@lru_cache(maxsize=1)
def _environment() -> _Env:
    env = _Env(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


@lru_cache(maxsize=32)
def _compile(source: str):
    return _environment().from_string(source)


class ChatTemplate:
    """A compiled chat template.

    >>> ChatTemplate(None, model="m").render([{"role": "user", "content": "hi"}])
    '<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n'
    """

    def __init__(self, source: str | None, *, model: str = "model", bos_token: str = "",
                 eos_token: str = ""):
        self.model = model
        self.is_fallback = not source
        self.source = source or CHATML_TEMPLATE
        self.bos_token = bos_token
        self.eos_token = eos_token
        try:
            self._template = _compile(self.source)
        except jinja2.TemplateError as e:
            raise ChatTemplateError(f"chat template of {model} does not compile: {e}") from e

    @classmethod
    def from_tokenizer(cls, tokenizer, source: str | None = None) -> "ChatTemplate":
        """The template of a cann_llm.tokenizer.Tokenizer's model (ChatML when it has none), or
        `source` in its place (with the model's BOS/EOS texts)."""
        def text(i):
            return tokenizer.tokens[i] if i is not None else ""
        return cls(source if source is not None else tokenizer.chat_template,
                   model=tokenizer.model_name,
                   bos_token=text(tokenizer.bos_id), eos_token=text(tokenizer.eos_id))

    def render(self, messages, *, add_generation_prompt: bool = True, **extra) -> str:
        """The prompt text for `messages` (a list of {"role": ..., "content": ...} dicts)."""
        if isinstance(messages, dict) or not all(isinstance(m, dict) for m in messages):
            raise TypeError("messages must be a list of {'role': ..., 'content': ...} dicts")
        variables = {"bos_token": self.bos_token, "eos_token": self.eos_token, **extra,
                     "messages": list(messages), "add_generation_prompt": add_generation_prompt}
        try:
            return self._template.render(**variables)
        except SecurityError as e:
            raise ChatTemplateError(f"chat template of {self.model} refused: {e}") from e
        except jinja2.TemplateError as e:
            raise ChatTemplateError(f"chat template of {self.model} failed: {e}") from e
        except Exception as e:  # errors of Python objects the template touched
            raise ChatTemplateError(
                f"chat template of {self.model} failed: {type(e).__name__}: {e}") from e
