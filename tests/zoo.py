"""Tiny random-init Hugging Face transformers models, trained as users train them (AdamW).

The architectures our users port (decoder-only Llama/Qwen2/GPT-2, encoder BERT, encoder-decoder T5,
the Mixtral mixture of experts), each with a config small enough for a CPU test. The Llama and BERT
configs are those of the upstream 8.1.1 dumps under ``tests/data/zoo`` (same sizes, seeds and data),
so a dump of ours can be matched record for record against upstream's.

``transformers`` is a test dependency (the ``dev`` extra); a test module that needs it calls
``pytest.importorskip("transformers")`` through :func:`require_transformers`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch

VOCAB = 256
BATCH, SEQ = 2, 16


def require_transformers() -> Any:
    return pytest.importorskip("transformers")


# The decoder-only sizes (Llama, Qwen2, Mixtral); BERT takes the same without grouped-query heads.
_DECODER: dict[str, int] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "vocab_size": VOCAB,
}


def _llama(t: Any) -> Any:
    return t.LlamaForCausalLM(t.LlamaConfig(**_DECODER))


def _qwen2(t: Any) -> Any:
    return t.Qwen2ForCausalLM(t.Qwen2Config(**_DECODER))


def _gpt2(t: Any) -> Any:
    cfg = t.GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=64, vocab_size=VOCAB)
    return t.GPT2LMHeadModel(cfg)


def _bert(t: Any) -> Any:
    sizes = {k: v for k, v in _DECODER.items() if k != "num_key_value_heads"}
    return t.BertForMaskedLM(t.BertConfig(**sizes))


def _t5(t: Any) -> Any:
    cfg = t.T5Config(
        d_model=64,
        d_ff=128,
        d_kv=16,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        vocab_size=VOCAB,
        decoder_start_token_id=0,
        pad_token_id=0,
    )
    return t.T5ForConditionalGeneration(cfg)


def _mixtral(t: Any) -> Any:
    cfg = t.MixtralConfig(**_DECODER, num_local_experts=4, num_experts_per_tok=2)
    return t.MixtralForCausalLM(cfg)


BUILDERS: dict[str, Callable[[Any], Any]] = {
    "llama": _llama,
    "qwen2": _qwen2,
    "gpt2": _gpt2,
    "bert": _bert,
    "t5": _t5,
    "mixtral": _mixtral,
}


@dataclass
class Trained:
    """What a training run leaves: the losses of each step and every tensor of its state."""

    losses: list[torch.Tensor]
    state: dict[str, torch.Tensor]


def build(name: str, seed: int = 1234) -> torch.nn.Module:
    """A fresh model; ``seed_all(seed)`` first, as the scripts that made the upstream dumps did."""
    t = require_transformers()
    from msprobe.pytorch import seed_all

    seed_all(seed)
    model = BUILDERS[name](t)
    return model.train()


def batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    labels = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    return ids, labels


def train(name: str, steps: int = 2, debugger: Any = None, model: torch.nn.Module | None = None) -> Trained:
    """Train ``steps`` AdamW steps; with ``debugger`` each step is dumped (start/stop/step).

    The state holds every parameter, buffer and optimizer state tensor, so "bitwise equal" covers all.
    """
    model = build(name) if model is None else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids, labels = batch()
    losses = []
    for _ in range(steps):
        if debugger is not None:
            debugger.start(model=model)
        out = model(input_ids=ids, labels=labels)
        out.loss.backward()
        opt.step()
        opt.zero_grad()
        if debugger is not None:
            debugger.stop()
            debugger.step()
        losses.append(out.loss.detach().clone())
    state = {f"model.{k}": v.detach().clone() for k, v in model.state_dict().items()}
    for i, per_param in enumerate(opt.state.values()):
        for key, value in per_param.items():
            if isinstance(value, torch.Tensor):
                state[f"optim.{i}.{key}"] = value.detach().clone()
    return Trained(losses, state)


def differences(a: Trained, b: Trained) -> list[str]:
    """Names of the losses and state tensors that are not bitwise equal (empty: identical runs)."""
    out = [f"loss[{i}]" for i, (x, y) in enumerate(zip(a.losses, b.losses)) if not torch.equal(x, y)]
    if a.state.keys() != b.state.keys():
        out.append(f"state keys differ: {sorted(a.state.keys() ^ b.state.keys())[:5]}")
    out += [k for k in a.state if k in b.state and not torch.equal(a.state[k], b.state[k])]
    return out
