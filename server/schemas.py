"""Request and response bodies of the OpenAI-compatible API, as pydantic models.

Requests forbid unknown fields (a 400 naming the field, never silently ignored); fields that
clients send routinely with null, empty or default values are accepted in exactly those forms,
and anything they ask for that is not implemented is refused by `unsupported()`. The OpenAPI
schema at /openapi.json is generated from these models.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator

__all__ = ["ChatCompletionRequest", "CompletionRequest", "EmbeddingRequest", "TokenizeRequest",
           "DetokenizeRequest", "ChatMessage", "Usage", "ChatCompletion", "Completion",
           "EmbeddingList", "ModelList", "ModelCard", "TokenizeResponse", "DetokenizeResponse",
           "ErrorResponse", "HealthResponse"]

Finite = Annotated[float, Field(strict=True, allow_inf_nan=False)]   # no bools, no strings
TokenId = Annotated[StrictInt, Field(ge=0)]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StreamOptions(_Request):
    include_usage: StrictBool | None = None


class _Sampling(_Request):
    """What chat and text completions share: the model, sampling, stops and penalties."""
    model: str | None = Field(None, description="the served model's id (GET /v1/models)")
    max_tokens: Annotated[StrictInt, Field(ge=1)] | None = None
    temperature: Annotated[Finite, Field(ge=0, le=2)] | None = None
    top_p: Annotated[Finite, Field(ge=0, le=1)] | None = None
    top_k: Annotated[StrictInt, Field(ge=-1)] | None = Field(
        None, description="top-k, <= 0 off (llama.cpp's default 40)")
    min_p: Annotated[Finite, Field(ge=0, le=1)] | None = None
    seed: Annotated[StrictInt, Field(ge=-1, le=2**63 - 1)] | None = None
    stop: Union[str, Annotated[list[Annotated[str, Field(min_length=1)]],
                               Field(max_length=16)]] | None = None
    presence_penalty: Annotated[Finite, Field(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[Finite, Field(ge=-2, le=2)] | None = None
    repeat_penalty: Annotated[Finite, Field(gt=0, le=10)] | None = None
    repeat_last_n: Annotated[StrictInt, Field(ge=-1)] | None = None
    logit_bias: dict[str, Annotated[Finite, Field(ge=-100, le=100)]] | None = Field(
        None, description="token id (as a string) -> bias added to its logit")
    n: Annotated[StrictInt, Field(ge=1, le=64)] = 1
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    user: str | None = Field(None, description="accepted and ignored on purpose")
    grammar: str | None = Field(
        None, description="a llama.cpp-style GBNF grammar (or Lark) the output must match")

    @field_validator("logit_bias")
    @classmethod
    def _token_keys(cls, v):
        for key in v or {}:
            if not key.strip().isdigit():
                raise ValueError(f"logit_bias keys must be token ids, got {key!r}")
        return v


class TextPart(_Request):
    type: Literal["text"]
    text: str


class FunctionCall(_Request):
    name: str
    arguments: str = Field(description="the arguments as a JSON text")


class ToolCall(_Request):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Request):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None          # assistant: calls it made
    tool_call_id: str | None = None                   # tool: the call it answers
    # fields an OpenAI client puts back when it re-sends an answer: accepted while empty
    refusal: None = None
    function_call: None = None
    audio: None = None
    annotations: Annotated[list[Any], Field(max_length=0)] | None = None
    reasoning_content: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.text for p in self.content)


class JsonSchemaFormat(_Request):
    name: Annotated[str, Field(min_length=1, max_length=64)]
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema",
                                           description="the JSON schema the output must match")
    strict: StrictBool | None = None


class ResponseFormat(_Request):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class FunctionDef(_Request):
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
    description: str | None = None
    parameters: dict[str, Any] | None = Field(
        None, description="a JSON schema of the arguments (an object)")
    strict: StrictBool | None = None


class Tool(_Request):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(_Request):
    name: str


class NamedToolChoice(_Request):
    type: Literal["function"]
    function: NamedFunction


def _format_problem(body) -> tuple[str, str] | None:
    rf = body.response_format
    if rf is not None and rf.type == "json_schema" and rf.json_schema is None:
        return "response_format", ("response_format json_schema needs a json_schema "
                                   "object {name, schema, strict}")
    if rf is not None and rf.type != "text" and body.grammar is not None:
        return "grammar", "give grammar or a JSON response_format, not both"
    return None


class ChatCompletionRequest(_Sampling):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: Annotated[StrictInt, Field(ge=1)] | None = None
    logprobs: StrictBool | None = None
    top_logprobs: Annotated[StrictInt, Field(ge=0, le=20)] | None = None
    chat_template_kwargs: dict[str, Any] | None = Field(
        None, description="extra variables for the chat template (e.g. enable_thinking)")
    response_format: ResponseFormat | None = None
    tools: Annotated[list[Tool], Field(max_length=128)] | None = None
    tool_choice: Union[Literal["none", "auto", "required"], NamedToolChoice] | None = None
    parallel_tool_calls: StrictBool | None = None
    store: StrictBool | None = None
    metadata: dict[str, str] | None = None

    def unsupported(self) -> tuple[str, str] | None:
        """(field, why) for a request of something not implemented, else None."""
        why = _format_problem(self)
        if why is not None:
            return why
        names = [t.function.name for t in self.tools or []]
        if len(set(names)) != len(names):
            return "tools", "tools: two functions have the same name"
        if self.tool_choice not in (None, "none", "auto") and not names:
            return "tool_choice", "tool_choice 'required' or a named function needs tools"
        if isinstance(self.tool_choice, NamedToolChoice) and \
                self.tool_choice.function.name not in names:
            return "tool_choice", (f"tool_choice names '{self.tool_choice.function.name}', "
                                   f"which is not among the tools")
        if names and self.tool_choice != "none" and (self.grammar is not None or (
                self.response_format is not None and self.response_format.type != "text")):
            return "tools", "tools do not go together with grammar or a JSON response_format"
        if self.store:
            return "store", "stored completions are not supported (store must be false)"
        if self.top_logprobs and not self.logprobs:
            return "top_logprobs", "top_logprobs needs logprobs: true"
        return None


class CompletionRequest(_Sampling):
    prompt: Union[str, Annotated[list[str], Field(min_length=1)],
                  Annotated[list[TokenId], Field(min_length=1)],
                  Annotated[list[Annotated[list[TokenId], Field(min_length=1)]],
                            Field(min_length=1)]]
    max_tokens: Annotated[StrictInt, Field(ge=1)] | None = 16
    echo: StrictBool = False
    logprobs: Annotated[StrictInt, Field(ge=0, le=20)] | None = None
    suffix: None = Field(None, description="not supported: must be null")
    best_of: Annotated[StrictInt, Field(ge=1, le=1)] | None = None
    response_format: ResponseFormat | None = Field(
        None, description="json_object or json_schema: the completion is that JSON")

    def unsupported(self) -> tuple[str, str] | None:
        why = _format_problem(self)
        if why is not None:
            return why
        if self.echo and self.logprobs is not None:
            return "logprobs", "logprobs together with echo (prompt logprobs) is not supported"
        return None


class EmbeddingRequest(_Request):
    model: str | None = None
    input: Union[Annotated[str, Field(min_length=1)],
                 Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)],
                 Annotated[list[TokenId], Field(min_length=1)],
                 Annotated[list[Annotated[list[TokenId], Field(min_length=1)]],
                           Field(min_length=1)]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: None = Field(None, description="not supported: must be null")
    user: str | None = None


class TokenizeRequest(_Request):
    content: str
    add_special: StrictBool = False
    with_pieces: StrictBool = False


class DetokenizeRequest(_Request):
    tokens: list[TokenId]


# ---- responses ---------------------------------------------------------------------------

class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprob] | None


class OutFunctionCall(BaseModel):
    name: str
    arguments: str


class OutToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: OutFunctionCall


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    reasoning_content: str | None = None
    tool_calls: list[OutToolCall] | None = None


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: Literal["stop", "length", "tool_calls"]


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    system_fingerprint: str
    choices: list[ChatChoice]
    usage: Usage


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: Literal["stop", "length"]


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    system_fingerprint: str
    choices: list[CompletionChoice]
    usage: Usage


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "cann-llm"
    meta: dict[str, Any] | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class TokenPiece(BaseModel):
    id: int
    piece: str


class TokenizeResponse(BaseModel):
    tokens: list[int] | list[TokenPiece]


class DetokenizeResponse(BaseModel):
    content: str


class HealthResponse(BaseModel):
    status: Literal["ok", "loading"]


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | int | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail
