"""Prompts exactly as docs/architecture.md §Evaluation protocol specifies, rendered with each model's own chat template.

A model whose tokenizer has a chat template (``chat_template.jinja`` or ``tokenizer_config.json``'s
``chat_template``: every instruct model, Qwen2.5-Math base included) gets the paper's system and user
turns through that template with ``add_generation_prompt=True``.

A model without one (a plain base checkpoint: Llama-3.2-1B, a GGUF exported without its template) gets
the **plain format** :data:`PLAIN_TEMPLATE`, a Jinja template of our own written in the chat-template
style so that it is recorded and hashed like any other:

    <bos>{system prompt}\\n\\n{problem} Let's think step by step and output the final answer within \\boxed{}\\n\\n

(``<bos>`` only where the tokenizer defines a BOS token; prompts are encoded without special tokens,
so it is written here as chat templates write it). Every run manifest records which format was used
(:func:`prompt_format`) and the template text with its sha256 (:func:`chat_template_text`,
:func:`template_hash`). An engine built with ``require_chat_template=True`` refuses a model without
a template instead (PromptError).
"""

from __future__ import annotations

from prl_core.errors import UserError
import hashlib
from typing import Any

SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
USER_SUFFIX = " Let's think step by step and output the final answer within \\boxed{}"

PLAIN_TEMPLATE = (
    "{{ bos_token if bos_token else '' }}"
    "{% for message in messages %}{{ message['content'] }}\n\n{% endfor %}"
)
"""The plain format for models without a chat template (module docstring); add_generation_prompt adds nothing."""

PROMPT_FORMATS = ("chat_template", "plain")


class PromptError(UserError, ValueError):
    """The tokenizer cannot render prompts (e.g. it has no chat template and one is required)."""


def messages_for(problem: str) -> list[dict[str, str]]:
    """System + user turns for one problem."""
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": problem + USER_SUFFIX}]


def has_chat_template(tokenizer) -> bool:
    """Whether the tokenizer carries a chat template of its own."""
    return bool(getattr(tokenizer, "chat_template", None))


def prompt_format(tokenizer) -> str:
    """'chat_template' (the model's own) or 'plain' (:data:`PLAIN_TEMPLATE`)."""
    return "chat_template" if has_chat_template(tokenizer) else "plain"


def require_chat_template(tokenizer) -> str:
    """The tokenizer's own chat template text; PromptError naming the model if it has none."""
    if not has_chat_template(tokenizer):
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise PromptError(
            f"{name}: the tokenizer has no chat template (chat_template.jinja or tokenizer_config.json "
            "'chat_template'); add one, or allow the documented plain format (require_chat_template=False)"
        )
    template = tokenizer.chat_template
    return template if isinstance(template, str) else str(template)


def chat_template_text(tokenizer) -> str:
    """The template prompts are rendered with: the model's own, else :data:`PLAIN_TEMPLATE`."""
    return require_chat_template(tokenizer) if has_chat_template(tokenizer) else PLAIN_TEMPLATE


def build_prompt(tokenizer, problem: str) -> str:
    """The prompt string for ``problem``: the model's chat template (add_generation_prompt=True), or the
    plain format for a model without one."""
    if has_chat_template(tokenizer):
        return tokenizer.apply_chat_template(messages_for(problem), tokenize=False, add_generation_prompt=True)
    return tokenizer.apply_chat_template(messages_for(problem), chat_template=PLAIN_TEMPLATE, tokenize=False,
                                         add_generation_prompt=True)


def template_hash(tokenizer) -> str:
    """sha256 of the template text prompts are rendered with, recorded in every run manifest."""
    return hashlib.sha256(chat_template_text(tokenizer).encode("utf-8")).hexdigest()


def template_record(tokenizer) -> dict[str, str]:
    """What a run manifest records about the prompts: the format, the template text and its sha256."""
    return {"format": prompt_format(tokenizer), "template_sha256": template_hash(tokenizer),
            "template": chat_template_text(tokenizer)}


def prompt_record(template: dict[str, Any] | None = None) -> dict[str, Any]:
    """A run manifest's ``prompt`` section: the system turn, the user suffix and the template
    (:func:`template_record`, when known)."""
    return {"system": SYSTEM_PROMPT, "user_suffix": USER_SUFFIX, "add_generation_prompt": True, **(template or {})}
