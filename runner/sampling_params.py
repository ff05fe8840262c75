"""SamplingParams: the sampling settings of one request and their defaults (llama.cpp's), in the
one place they live. The CLI's flags and, later, the server's request fields come from its field
metadata. Kept free of numpy so that building the CLI's parser stays cheap; the sampler itself is
cann_llm.sampler.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields

__all__ = ["SamplingParams"]


def _opt(default, flags, help, type_=None, **extra):
    """A SamplingParams field with what the CLI needs: its flags, argparse dest and help."""
    meta = {"flags": tuple(flags), "help": help, "type": type_ or type(default), **extra}
    meta.setdefault("dest", flags[-1].lstrip("-").replace("-", "_"))
    return field(default=default, metadata=meta)


@dataclass
class SamplingParams:
    """The sampling settings of one request, with llama.cpp's defaults (common/common.h): the
    one place they live. The CLI's flags come from add_arguments(), the sampler from these."""

    temperature: float = _opt(0.8, ["--temp"], "temperature; <= 0 greedy (0.8)")
    top_k: int = _opt(40, ["--top-k"], "top-k, <= 0 off (40)")
    top_p: float = _opt(0.95, ["--top-p"], "top-p, 1 off (0.95)")
    min_p: float = _opt(0.05, ["--min-p"], "min-p, 0 off (0.05)")
    repeat_penalty: float = _opt(1.0, ["--repeat-penalty"], "1 off (1.0)")
    repeat_last_n: int = _opt(64, ["--repeat-last-n"], "penalty window; -1 all (64)")
    presence_penalty: float = _opt(0.0, ["--presence-penalty"], "0 off (0.0)")
    frequency_penalty: float = _opt(0.0, ["--frequency-penalty"], "0 off (0.0)")
    seed: int = _opt(-1, ["-s", "--seed"], "RNG seed; -1 random (-1)")
    logit_bias: dict = field(default_factory=dict)        # token id -> bias; no CLI flag
    grammar: object = None      # a cann_llm.grammar.Grammar constraining the output; no flag

    @classmethod
    def add_arguments(cls, parser) -> None:
        """Add one flag per field that has flags (argparse parser or argument group)."""
        for f in fields(cls):
            m = f.metadata
            if "flags" in m:
                parser.add_argument(*m["flags"], dest=m["dest"], type=m["type"],
                                    default=f.default, help=m["help"])

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "SamplingParams":
        """The settings parsed by a parser that add_arguments() filled."""
        return cls(**{f.name: getattr(args, f.metadata["dest"]) for f in fields(cls)
                      if "flags" in f.metadata})

    def sampler(self) -> "Sampler":
        """A Sampler with these settings (ValueError names a bad one)."""
        from .sampler import Sampler
        return Sampler(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                       min_p=self.min_p, repeat_penalty=self.repeat_penalty,
                       repeat_last_n=self.repeat_last_n, presence_penalty=self.presence_penalty,
                       frequency_penalty=self.frequency_penalty, logit_bias=self.logit_bias,
                       seed=self.seed, grammar=self.grammar)
