"""Discovery's listing grows with the run's structure, not with its files (issue 17, work per invocation).

`discover` names the run's step directories and attempts from delimiter listings (`ports.storage.child_names`):
the checkpoints' rank files, the exports' shards and the attempts' log files are never listed by discovery. An
attempt carries its `logs/` prefix; the log-scan plan lists it, a bounded number of objects per invocation
(`terminal-plan-page:<n>`). The step numbers must be exactly those the old walk of every object gave, on a backend
with a children listing and on one without, and the plan must find every log the old discovery listed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from rlcleanup.adapters.local_storage import LocalStorage
from rlcleanup.parsing.attempt_logs import is_scanned_log
from rlcleanup.ports.storage import ChildPage, ObjectInfo
from rlcleanup.samples.large import write_large_run
from rlcleanup.steps import logscan
from rlcleanup.steps.layout import discover


class Recording:
    """A local store that remembers every object a recursive `list` yielded (children listings pass through)."""

    def __init__(self, children: bool) -> None:
        self.inner = LocalStorage()
        self.listed: list[str] = []
        if children:
            self.list_children = self._children  # only then is it a ListsChildren backend

    def _children(self, prefix_uri: str, page_token: str | None = None, page_size: int = 200) -> ChildPage:
        return self.inner.list_children(prefix_uri, page_token, page_size)

    def list(self, prefix_uri: str) -> Iterator[ObjectInfo]:
        for info in self.inner.list(prefix_uri):
            self.listed.append(info.uri)
            yield info

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def _old_steps(root: Path) -> list[int]:
    """What the walk of every object gave: the N of each global_step_<N> directory holding a file."""
    firsts = {p.relative_to(root).parts[0] for p in root.rglob("*") if p.is_file() and p.parent != root}
    return sorted(int(name.removeprefix("global_step_")) for name in firsts if name.startswith("global_step_"))


def test_discovery_lists_no_checkpoint_or_export_file(tmp_path: Path) -> None:
    run = write_large_run(tmp_path, ranks=12, attempts=2, exports=3, log_bytes_total=64 * 1024, shards=4)
    storage = Recording(children=True)
    layout = discover(storage, str(run))  # type: ignore[arg-type]
    assert layout.checkpoints_root and layout.exports_root
    assert layout.export_steps == _old_steps(Path(layout.exports_root)) and len(layout.export_steps) == 3
    assert layout.checkpoint_steps == _old_steps(Path(layout.checkpoints_root)) and layout.checkpoint_steps
    below = [u for u in storage.listed if u.startswith((layout.checkpoints_root + "/", layout.exports_root + "/"))]
    assert below == []  # before: every rank file and shard (3 x 12 per checkpoint, 3 x (4 + 6) exports)
    # Nor any log: before this, every attempt's record and log files (12 ranks x 2 streams + node files each).
    assert [u for u in storage.listed if "/logs/" in u] == []
    assert len(storage.listed) <= 2  # at most the one-object probes of marin.step_exists
    assert all(a.log_prefix and a.log_prefix.endswith(f"/{a.attempt_id}/logs") for a in layout.attempts)
    assert len(layout.attempts) == 2 and all(a.record_uri for a in layout.attempts)


def test_the_log_scan_plan_finds_every_log_the_old_discovery_listed_in_pages(tmp_path: Path) -> None:
    run = write_large_run(tmp_path, ranks=12, attempts=3, exports=1, log_bytes_total=64 * 1024, shards=1)
    storage = LocalStorage()
    layout = discover(storage, str(run))
    attempts_root = layout.attempts_root
    assert attempts_root is not None
    old = {  # what _read_attempts used to collect: every file under `<id>/logs/` of each attempt directory
        str(path) for path in Path(attempts_root).glob("*/logs/**/*") if path.is_file() and is_scanned_log(str(path))
    }
    whole = logscan.plan_log_scan(storage, layout)
    assert {u for part in whole for u in part.uris} == old and len(old) > 3 * 12
    pages, cursor, listed = [], None, []
    while True:  # 7 objects a page: attempts and parts are cut across pages
        page = logscan.plan_log_scan_page(storage, layout, cursor, 7)
        pages.append(page.parts)
        listed.append(page.listed)
        if page.next is None:
            break
        cursor = page.next
    assert len(pages) > 3 and max(listed) == 7
    paged = [part for parts in pages for part in parts]
    assert sorted(p.part_id for p in paged) == [p.part_id for p in paged]  # ids in plan order across pages
    assert len({p.part_id for p in paged}) == len(paged)
    assert [u for part in paged for u in part.uris] == [u for part in whole for u in part.uris]
    assert {p.attempt_id for p in paged} == {a.attempt_id for a in layout.attempts}


def test_a_backend_without_a_children_listing_names_the_same_steps(tmp_path: Path) -> None:
    run = write_large_run(tmp_path, ranks=4, attempts=2, exports=2, log_bytes_total=16 * 1024, shards=2)
    with_children = discover(Recording(children=True), str(run))  # type: ignore[arg-type]
    walked = discover(Recording(children=False), str(run))  # type: ignore[arg-type]
    assert with_children == walked


def test_an_empty_local_step_directory_is_no_step_as_on_an_object_store(tmp_path: Path) -> None:
    """A crash between mkdir and the first write leaves an empty `global_step_<N>/` on a local disk; GCS and S3
    have no empty prefixes, so the same run uploaded would not show it. Local discovery must agree."""
    run = write_large_run(tmp_path, ranks=2, attempts=2, exports=1, log_bytes_total=8 * 1024, shards=1)
    layout = discover(LocalStorage(), str(run))
    assert layout.exports_root and layout.checkpoints_root
    (Path(layout.exports_root) / "global_step_999" / "policy").mkdir(parents=True)  # only an empty subdirectory
    (Path(layout.checkpoints_root) / "global_step_998").mkdir()
    again = discover(LocalStorage(), str(run))
    assert again.export_steps == layout.export_steps and 999 not in again.export_steps
    assert again.checkpoint_steps == layout.checkpoint_steps and 998 not in again.checkpoint_steps
    (Path(layout.exports_root) / "global_step_999" / "policy" / "config.json").write_text("{}")
    assert 999 in discover(LocalStorage(), str(run)).export_steps
