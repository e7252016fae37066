"""Prompts exactly as DESIGN §3 specifies, rendered with each model's own chat template."""

from __future__ import annotations

import hashlib

SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
USER_SUFFIX = " Let's think step by step and output the final answer within \\boxed{}"


class PromptError(ValueError):
    """The tokenizer cannot render prompts (e.g. it has no chat template)."""


def messages_for(problem: str) -> list[dict[str, str]]:
    """System + user turns for one problem."""
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": problem + USER_SUFFIX}]


def chat_template_text(tokenizer) -> str:
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise PromptError(
            f"{name}: the tokenizer has no chat template (chat_template.jinja or tokenizer_config.json "
            "'chat_template'); prompts are built with the model's own template, so add one"
        )
    return template if isinstance(template, str) else str(template)


def build_prompt(tokenizer, problem: str) -> str:
    """The prompt string for ``problem``: the model's chat template with add_generation_prompt=True."""
    chat_template_text(tokenizer)
    return tokenizer.apply_chat_template(messages_for(problem), tokenize=False, add_generation_prompt=True)


def template_hash(tokenizer) -> str:
    """sha256 of the chat template text, recorded in every run manifest."""
    return hashlib.sha256(chat_template_text(tokenizer).encode("utf-8")).hexdigest()
