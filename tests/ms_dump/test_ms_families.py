"""The family table: which namespaces are wrapped, and how communication calls are finished."""

from __future__ import annotations

import mindspore as ms
from mindspore import mint, ops

from msprobe.dump.mindspore.families import BY_PREFIX, FAMILIES, Patcher, finish_collective, load_api_list


class FakeWork:
    def __init__(self) -> None:
        self.waited = False

    def wait(self) -> bool:
        self.waited = True
        return True


def test_prefixes_and_namespaces():
    assert [f.prefix for f in FAMILIES] == [
        "Functional",
        "Tensor",
        "Mint",
        "MintFunctional",
        "Distributed",
        "MintDistributed",
    ]
    lists = load_api_list()
    assert (
        "__mul__" in lists["tensor"]
        and "silu" in lists["mint.nn.functional"]
        and "flatten" in lists["mint.ops"]
    )


def test_patch_and_restore_every_family():
    seen: list[tuple[str, str]] = []
    patcher = Patcher(lambda key, func, args, kwargs: (seen.append(key), func(*args, **kwargs))[1])
    before = (ops.square, mint.flatten, ms.Tensor.__dict__.get("__sub__"))
    count = patcher.patch_families(load_api_list())
    try:
        assert count > 900
        x = ms.Tensor([1.0, 2.0])
        ops.square(x - x)
        assert ("Tensor", "__sub__") in seen and ("Functional", "square") in seen
    finally:
        patcher.restore_all()
    assert (ops.square, mint.flatten, ms.Tensor.__dict__.get("__sub__")) == before


def test_async_collectives_are_waited_and_in_place_ones_record_their_arguments():
    work = FakeWork()
    returned, recorded = finish_collective(
        BY_PREFIX["MintDistributed"], "all_reduce", work, ("t",), {"async_op": True}
    )
    assert work.waited and returned.wait() and recorded == ["t", True]
    works = [FakeWork(), FakeWork()]
    returned, _ = finish_collective(BY_PREFIX["MintDistributed"], "batch_isend_irecv", works, ([],), {})
    assert all(w.waited for w in works) and len(returned) == 2
    out = ("tensor", FakeWork())
    returned, recorded = finish_collective(BY_PREFIX["Distributed"], "irecv", out, ("t",), {})
    assert out[1].waited and returned[0] == "tensor" and recorded is returned
    sent = ("tensor", FakeWork())  # isend only reads its tensor: never waited inside the call
    returned, _ = finish_collective(BY_PREFIX["Distributed"], "isend", sent, ("t",), {})
    assert not sent[1].waited and returned is sent
    assert finish_collective(BY_PREFIX["Functional"], "add", 3, (1, 2), {}) == (3, 3)
