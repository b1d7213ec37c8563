"""With the dump on (L0, L1, mix), training is bitwise the same as without it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.dump.conftest import load_dump


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)
        self.fc1 = nn.Linear(d, 2 * d)
        self.act = nn.ReLU(inplace=True)  # in place on a hooked module's output
        self.fc2 = nn.Linear(2 * d, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln(x)
        a, _ = self.attn(h, h, h, need_weights=False)
        x = x + a
        x = x + self.drop(self.fc2(self.act(self.fc1(x))))
        return x


class Tiny(nn.Module):
    def __init__(self, vocab: int = 32, d: int = 16) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.Sequential(Block(d), Block(d))
        self.head = nn.Linear(d, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.emb(idx)))


def train(dbg: Any) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    model = Tiny()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.randint(0, 32, (4, 9))
    losses = []
    for _ in range(3):
        if dbg is not None:
            dbg.start(model=model)
        logits = model(data[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 32), data[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.detach().clone())
        if dbg is not None:
            dbg.stop()
            dbg.step()
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.slow
@pytest.mark.parametrize("level", ["L0", "L1", "mix"])
def test_dump_does_not_change_training(tmp_path: Path, debugger: Any, level: str) -> None:
    ref_losses, ref_state = train(None)
    dbg = debugger(level=level)
    losses, state = train(dbg)
    assert all(torch.equal(a, b) for a, b in zip(losses, ref_losses)), (losses, ref_losses)
    assert state.keys() == ref_state.keys()
    for k in state:
        assert torch.equal(state[k], ref_state[k]), k
    data = load_dump(tmp_path / "dump" / "step2" / "rank")["data"]
    kinds = {n.split(".", 1)[0] for n in data}
    assert ("Module" in kinds) == (level in ("L0", "mix"))
    assert ("Functional" in kinds) == (level in ("L1", "mix"))
    if level != "L1":
        assert (
            "Module.blocks.0.act.ReLU.forward.0" in data and "Module.blocks.0.fc2.Linear.backward.0" in data
        )
        # known and documented: fc1's output is a view (Linear on a 3-d input) that ReLU(inplace=True)
        # rewrites, which takes its autograd node out of the graph: fc1 gets no backward record, and
        # the ReLU's record has its output gradient but no input gradient (upstream has neither)
        assert "Module.blocks.0.fc1.Linear.backward.0" not in data
        relu = data["Module.blocks.0.act.ReLU.backward.0"]
        assert [g["shape"] for g in relu["input"]] == [[4, 8, 32]] and relu["output"] == []


@pytest.mark.slow
def test_torch_compile_region_still_works(
    tmp_path: Path, debugger: Any, recwarn: pytest.WarningsRecorder
) -> None:
    dbg = debugger(level="mix")
    net = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    compiled = torch.compile(net, backend="eager")
    x = torch.randn(2, 4)
    expect = net(x)
    dbg.start(model=net)
    y = compiled(x)
    y.sum().backward()
    dbg.stop()
    assert torch.equal(y, expect)
    data = load_dump(tmp_path / "dump" / "step0" / "rank")["data"]
    assert "Module.0.Linear.forward.0" in data and "Functional.linear.0.forward" in data
    assert not [w for w in recwarn if "recompil" in str(w.message)]  # our hooks are not traced


@pytest.mark.slow
def test_no_compile_runs_eagerly_inside_and_outside_compiled_code(recwarn: pytest.WarningsRecorder) -> None:
    """Our hooks' wrapper: a direct call in eager mode, never traced under torch.compile."""
    from msprobe.dump.pytorch.nocompile import no_compile

    traced: list[bool] = []

    def probe(x: torch.Tensor) -> torch.Tensor:
        traced.append(torch.compiler.is_compiling())
        return x + 1

    wrapped = no_compile(probe)
    assert wrapped.__name__ == "probe"
    assert torch.equal(wrapped(torch.ones(2)), torch.full((2,), 2.0))
    compiled = torch.compile(lambda x: wrapped(x) * 2, backend="eager")
    assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 4.0))
    assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 4.0))
    assert traced == [False, False, False]  # the body ran eagerly every time, dynamo never traced it
    assert not [w for w in recwarn if "trace" in str(w.message) or "recompil" in str(w.message)]
