"""Pairing the rows of the NPU and GPU details tables by ``API Name``, with a status for every key.

Upstream looks each NPU row up in the GPU table, drops NPU rows the GPU file lacks, ignores GPU-only
rows and stops at the first duplicated GPU row (spec §12 item 7). Here every name of the union appears
exactly once in the result, with its ``presence``:

* ``both`` — one row on each side;
* ``npu_only`` / ``gpu_only`` — present on one side only (reported, never dropped);

and ``duplicated_in`` says on which side(s) a name occurs more than once (the first occurrence is kept
as the row's values; :func:`duplicates` lists all of them so the caller can refuse the input).

Order: NPU rows in file order, then GPU-only rows in GPU file order.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from msprobe.compare.table import COLUMNS, LINE, NAME, DetailsTable

BOTH, NPU_ONLY, GPU_ONLY = "both", "npu_only", "gpu_only"


@dataclass(frozen=True)
class Duplicate:
    side: str  # "npu" or "gpu"
    name: str
    lines: tuple[int, ...]


def _side(table: DetailsTable, side: str) -> pd.DataFrame:
    frame = table.frame
    first = frame.drop_duplicates(NAME, keep="first")
    out = first[[NAME, *COLUMNS, LINE]].rename(columns={c: f"{side}:{c}" for c in (*COLUMNS, LINE)})
    out[f"{side}:dup"] = first[NAME].map(frame[NAME].value_counts()).to_numpy() > 1
    out[f"{side}:order"] = range(len(out))
    return out


def merge(npu: DetailsTable, gpu: DetailsTable) -> pd.DataFrame:
    """One row per API Name of the union: ``name``, ``presence``, ``duplicated_in``, ``npu:*``, ``gpu:*``.

    The ``npu:*``/``gpu:*`` cells of an absent side are ``""`` (never read: such rows are not evaluated).
    """
    left, right = _side(npu, "npu"), _side(gpu, "gpu")
    m = left.merge(right, on=NAME, how="outer", indicator=True, sort=False)
    presence = m["_merge"].map({"both": BOTH, "left_only": NPU_ONLY, "right_only": GPU_ONLY}).astype(object)
    npu_dup = m["npu:dup"].fillna(False).astype(bool)
    gpu_dup = m["gpu:dup"].fillna(False).astype(bool)
    dup = pd.Series("", index=m.index, dtype=object)
    dup[npu_dup] = "npu"
    dup[gpu_dup] = "gpu"
    dup[npu_dup & gpu_dup] = "both"
    # NPU order first, then GPU-only rows in GPU order.
    key_npu = m["npu:order"].fillna(len(left) + m["gpu:order"].fillna(0))
    m = m.assign(presence=presence, duplicated_in=dup, _key=key_npu).sort_values("_key", kind="stable")
    m = m.drop(columns=["_merge", "_key", "npu:dup", "gpu:dup", "npu:order", "gpu:order"])
    m = m.rename(columns={NAME: "name"}).reset_index(drop=True)
    for side in ("npu", "gpu"):
        for c in COLUMNS:
            m[f"{side}:{c}"] = m[f"{side}:{c}"].fillna("").astype(object)
        m[f"{side}:{LINE}"] = m[f"{side}:{LINE}"].fillna(-1).astype(int)
    return m


def duplicates(table: DetailsTable, side: str) -> list[Duplicate]:
    """Every API Name that occurs more than once in ``table``, with all its lines, in file order."""
    frame = table.frame
    dup = frame[frame[NAME].duplicated(keep=False)]
    return [
        Duplicate(side=side, name=str(name), lines=tuple(int(x) for x in group[LINE]))
        for name, group in dup.groupby(NAME, sort=False)
    ]
