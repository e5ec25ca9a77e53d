"""The sealed manifest's writer (steps/manifest.dumps_indented) gives exactly `json.dumps(doc, indent=1,
sort_keys=True).encode()`: a replay must seal identical bytes whichever writer sealed first, and the manifests
already sealed stay valid. The fast writer exists for memory (bench/bench_many_files.py, select-candidate on a
100,000-object run)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rlcleanup.steps.manifest import dumps_indented

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=12)
)  # every JSON scalar (text: any code point, so escapes and non-ASCII included)
entries = st.one_of(
    st.dictionaries(st.text(max_size=6), scalars, max_size=7),  # flat: the manifest's own shape
    st.dictionaries(st.text(max_size=4), st.lists(scalars, max_size=3), max_size=2),  # nested: the fallback
)


@settings(max_examples=300, deadline=None)
@given(
    head=st.dictionaries(st.text(max_size=8).filter(lambda k: k != "objects"), scalars, max_size=5),
    objects=st.lists(entries, max_size=6),
)
def test_the_fast_writer_gives_json_dumps_bytes(head: dict[str, Any], objects: list[Any]) -> None:
    document = {**head, "objects": objects}
    assert dumps_indented(document, "objects") == json.dumps(document, indent=1, sort_keys=True).encode()


def test_a_manifest_shaped_document_is_byte_identical() -> None:
    objects = [
        {"source": f"gs://r/run/f{i}.log", "destination": f"gs://p/run/f{i}.log", "size": i, "crc32c": "AAAAAA==",
         "md5": None if i % 2 else "1B2M2Y8AsgTpgAmY7PhCfg==", "kind": "log"}
        for i in range(50)
    ]  # fmt: skip
    document = {"run_id": "r", "preserved_root": "gs://p/run", "object_count": 50, "objects": objects,
                "not_listed": "the manifests themselves (manifest.json, manifest-<sha12>.json)"}  # fmt: skip
    assert dumps_indented(document, "objects") == json.dumps(document, indent=1, sort_keys=True).encode()
    assert dumps_indented({**document, "objects": []}, "objects").endswith(
        b'"objects": [],\n "preserved_root": "gs://p/run",\n "run_id": "r"\n}'
    )
