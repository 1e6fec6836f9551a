"""The doctor's blind sets are well formed and stay apart from its corpus (they measure, they
are not fixtures: nothing asserts what the doctor answers on them)."""

from __future__ import annotations

import pytest

from tests.doctor.corpus_cases import cases
from tests.support import REPO

BLIND = REPO / "tests" / "doctor" / "blind"
SETS = sorted(p for p in BLIND.iterdir() if p.is_dir() and (p / "cases").is_dir())
HEADER = ("source", "diagnosis", "outcome", "cause-family", "cue", "message-named")


def _header(text: str) -> dict[str, str]:
    head, found, _ = text.partition("\n---\n")
    assert found, "no --- line"
    fields = {}
    for line in head.splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


@pytest.mark.parametrize("blind", SETS, ids=[p.name for p in SETS])
def test_every_case_is_a_sourced_thread_with_a_paste(blind):
    files = sorted((blind / "cases").glob("*.txt"))
    assert len(files) >= 14
    sources = []
    for path in files:
        text = path.read_text()
        fields = _header(text)
        assert set(HEADER) <= set(fields), path.name
        assert fields["source"].startswith("https://"), path.name
        # completed: a control, a thread that found nothing wrong with the job
        assert fields["outcome"] in ("failed", "degraded", "hung", "completed"), path.name
        assert fields["message-named"] in ("yes", "no"), path.name
        assert text.partition("\n---\n")[2].strip(), path.name
        sources.append(fields["source"])
    assert len(set(sources)) == len(sources)
    assert (blind / "JUDGING.md").exists() and (blind / "SOURCES.tsv").exists()


def test_no_thread_is_in_the_corpus_or_in_two_sets():
    corpus = {case.source.rstrip("/") for case in cases()}
    seen: set[str] = set()
    for blind in SETS:
        for path in (blind / "cases").glob("*.txt"):
            source = _header(path.read_text())["source"].rstrip("/")
            assert source not in corpus, path
            assert source not in seen, path
            seen.add(source)
