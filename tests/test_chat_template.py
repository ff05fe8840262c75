"""Chat templates: SmolLM2's template from the default model, the ChatML fallback, the sandbox."""

import datetime
import json
import pathlib

import pytest

from cann_llm import model_store as models
from cann_llm.chat_template import CHATML_TEMPLATE, ChatTemplate, ChatTemplateError
from cann_llm.gguf_vocab import read_metadata
from cann_llm.tokenizer import Tokenizer

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
from conftest import GOLDEN_Q4_1  # noqa: E402
from llama_cpp_data import vocab_dir  # noqa: E402
SMOL_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


@pytest.fixture(scope="module")
def smollm():
    try:
        path = models.default_model_path(download=True)
    except models.ModelDownloadError as e:
        pytest.fail(f"the default model could not be fetched: {e}")
    return Tokenizer.from_gguf(path)


@pytest.fixture(scope="module")
def smol_template(smollm):
    t = ChatTemplate.from_tokenizer(smollm)
    assert not t.is_fallback
    return t


def chatml(*turns, gen=False):
    """The ChatML text SmolLM2's template produces, written out by hand."""
    out = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in turns)
    return out + ("<|im_start|>assistant\n" if gen else "")


def test_smollm_default_system(smol_template):
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    text = smol_template.render(msgs, add_generation_prompt=True)
    assert text == chatml(("system", SMOL_SYSTEM), ("user", msgs[0]["content"]), gen=True)


def test_smollm_own_system_no_generation_prompt(smol_template):
    msgs = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"}]
    text = smol_template.render(msgs, add_generation_prompt=False)
    assert text == chatml(("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello!"))
    assert SMOL_SYSTEM not in text


def test_smollm_prompt_matches_golden_ids(smollm, smol_template):
    """The rendered prompt of the golden chat case tokenizes to llama.cpp's prompt ids."""
    golden = json.loads(GOLDEN_Q4_1.read_text())
    case = golden["greedy"][0]
    user = case["prompt"].split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]
    text = smol_template.render([{"role": "user", "content": user}])
    assert text == case["prompt"]
    assert smollm.tokenize(text) == case["prompt_ids"]


def test_qwen2_template_from_vocab():
    tok = Tokenizer.from_gguf(vocab_dir() / "ggml-vocab-qwen2.gguf")
    text = ChatTemplate.from_tokenizer(tok).render([{"role": "user", "content": "hi"}])
    assert text == chatml(("system", "You are a helpful assistant"), ("user", "hi"), gen=True)


def test_fallback_is_chatml():
    tok = Tokenizer.from_gguf(vocab_dir() / "ggml-vocab-gpt-2.gguf")
    assert tok.chat_template is None
    t = ChatTemplate.from_tokenizer(tok)
    assert t.is_fallback and t.source == CHATML_TEMPLATE
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert t.render(msgs) == chatml(("system", "S"), ("user", "U"), gen=True)
    assert t.render(msgs, add_generation_prompt=False) == chatml(("system", "S"), ("user", "U"))


def test_variables_and_helpers():
    src = ("{{ bos_token }}|{{ eos_token }}|{{ messages[0] | tojson }}|{{ strftime_now('%Y') }}"
           "|{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m.role }}"
           "{% endfor %}|{{ extra }}")
    t = ChatTemplate(src, model="m", bos_token="<s>", eos_token="</s>")
    out = t.render([{"role": "user", "content": "café"}, {"role": "x", "content": ""}], extra=7)
    year = str(datetime.datetime.now().year)
    assert out == f'<s>|</s>|{{"role": "user", "content": "café"}}|{year}|user|7'


def test_raise_exception_names_model():
    t = ChatTemplate("{{ raise_exception('roles must alternate') }}", model="TestModel-1B")
    with pytest.raises(ChatTemplateError, match="TestModel-1B.*roles must alternate"):
        t.render([{"role": "user", "content": "x"}])


def test_syntax_error_names_model():
    with pytest.raises(ChatTemplateError, match="TestModel-1B.*does not compile"):
        ChatTemplate("{% for m in messages %}", model="TestModel-1B")


@pytest.mark.parametrize("src", [
    "{{ ''.__class__ }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ messages.__class__ }}",
    "{{ raise_exception.__globals__ }}",
])
def test_sandbox_refuses_unsafe_attributes(src):
    t = ChatTemplate(src, model="EvilModel")
    with pytest.raises(ChatTemplateError, match="EvilModel.*unsafe"):
        t.render([{"role": "user", "content": "x"}])


def test_sandbox_refuses_mutation():
    msgs = [{"role": "user", "content": "x"}]
    t = ChatTemplate("{{ messages.append(1) }}{{ messages[0].update({'role': 'system'}) }}",
                     model="EvilModel")
    with pytest.raises(ChatTemplateError, match="EvilModel"):
        t.render(msgs)
    assert msgs == [{"role": "user", "content": "x"}]


def test_messages_must_be_dicts():
    with pytest.raises(TypeError):
        ChatTemplate(None).render({"role": "user", "content": "x"})


def test_template_text_read_from_gguf():
    meta = read_metadata(vocab_dir() / "ggml-vocab-qwen2.gguf")
    assert meta["tokenizer.chat_template"].startswith("{% for message in messages %}")


def test_qwen3_template_enable_thinking():
    """Qwen3's own template (llama.cpp's models/templates copy): enable_thinking=False closes an
    empty think block in the generation prompt, the default leaves the model to open one, earlier
    assistant turns lose their reasoning; server.reasoning reads which case a prompt is."""
    from cann_llm.server.reasoning import prompt_opens_thinking
    t = ChatTemplate((vocab_dir() / "Qwen-Qwen3-0.6B.jinja").read_text(), model="qwen3",
                     eos_token="<|im_end|>")
    msgs = [{"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "<think>\nGreet back.\n</think>\n\nHello!"},
            {"role": "user", "content": "2+2?"}]
    default = t.render(msgs)
    assert default.endswith("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n")
    assert "Greet back" not in default and "<|im_start|>assistant\nHello!<|im_end|>" in default
    off = t.render(msgs, enable_thinking=False)
    assert off == default + "<think>\n\n</think>\n\n"
    assert t.render(msgs, enable_thinking=True) == default
    assert not prompt_opens_thinking(off) and not prompt_opens_thinking(default)
