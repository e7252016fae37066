"""A researcher's judgement of a suspicious pass: the store's one write from the dashboard
(``Store.set_judgement`` → the ``judgements`` table), on a store that ``prl import`` made from real
R1-Zero responses (tests/data/external). The write goes through the store's writer path (its lock and
turnstile), takes only listed samples and the schema's values, and never changes a sample."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dashboard_seed import R1ZERO_RUN, import_r1zero_part  # noqa: E402

from prl.store.db import Store, StoreError, StoreLocked  # noqa: E402

LISTED = ("math500", "math500/test/algebra/435.json", 0)  # listed by fits_another (a false flag, read)
NOT_LISTED = ("math500", "math500/test/precalculus/807.json", 0)


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    return import_r1zero_part(tmp_path_factory.mktemp("judge") / "store.duckdb")


@pytest.fixture
def db(imported, tmp_path):
    """A private copy of the imported store (each test writes to its own)."""
    path = tmp_path / "store.duckdb"
    shutil.copy(imported, path)
    return str(path)


def _samples(db: str) -> list[tuple]:
    con = duckdb.connect(db, read_only=True)
    try:
        return con.execute("SELECT * FROM samples ORDER BY ALL").fetchall()
    finally:
        con.close()


def test_set_change_and_withdraw_a_judgement_without_touching_the_samples(db):
    before = _samples(db)
    store = Store(db, create=False)
    store.set_judgement(R1ZERO_RUN, *LISTED, "not_suspicious", flagged_by="fits_another", note="about its own problem")
    [row] = store.records("judgements_for_runs", run_ids=[R1ZERO_RUN])
    assert (row["problem_id"], row["judgement"], row["flagged_by"], row["note"]) == (
        LISTED[1], "not_suspicious", "fits_another", "about its own problem")
    store.set_judgement(R1ZERO_RUN, *LISTED, "confirmed")  # a second opinion replaces the first
    [row2] = store.records("judgements_for_runs", run_ids=[R1ZERO_RUN])
    assert row2["judgement"] == "confirmed" and row2["note"] is None and row2["judged_at"] >= row["judged_at"]
    store.set_judgement(R1ZERO_RUN, *LISTED, None)
    assert store.records("judgements_for_runs", run_ids=[R1ZERO_RUN]) == []
    assert _samples(db) == before


def test_only_listed_samples_and_the_schemas_values_are_taken(db):
    store = Store(db, create=False)
    with pytest.raises(StoreError, match="precalculus/807.json sample 0 is not a suspicious pass"):
        store.set_judgement(R1ZERO_RUN, *NOT_LISTED, "confirmed")
    with pytest.raises(StoreError, match="not a suspicious pass"):
        store.set_judgement("no-such-run", *LISTED, "confirmed")
    with pytest.raises(StoreError, match="'suspicious' is not one the judgements table takes"):
        store.set_judgement(R1ZERO_RUN, *LISTED, "suspicious")
    assert store.records("judgements_for_runs", run_ids=[R1ZERO_RUN]) == []  # nothing half-written


def test_a_store_from_before_the_judgements_table_gains_it_with_the_first_judgement(db):
    con = duckdb.connect(db)
    con.execute("DROP TABLE judgements")
    con.close()
    store = Store(db, create=False)
    assert store.rows("has_judgements") == [(False,)]
    from dashboard import data

    listed = data.suspicious_passes(db, [R1ZERO_RUN])  # readable: no judgements yet
    assert len(listed) == 3 and listed["judgement"].isna().all()
    store.set_judgement(R1ZERO_RUN, *LISTED, "not_suspicious")
    assert store.rows("has_judgements") == [(True,)]
    assert len(store.records("judgements_for_runs", run_ids=[R1ZERO_RUN])) == 1


HOLDER = r"""
import sys, time
from prl.store.db import Store
with Store(sys.argv[1], create=False).write() as con:  # a flow's write transaction, held a while
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
print("released", flush=True)
"""


def test_the_judgement_waits_its_turn_behind_a_writer(db):
    """A real second process holds the store's write lock: with a lock timeout shorter than the hold the
    judgement fails with StoreLocked and stores nothing; with the default wait it queues at the turnstile
    and is stored once the writer is done."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, db, "3"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(StoreLocked):
            Store(db, create=False, lock_timeout_s=0.2).set_judgement(R1ZERO_RUN, *LISTED, "confirmed")
        Store(db, create=False, lock_timeout_s=60).set_judgement(R1ZERO_RUN, *LISTED, "confirmed")
    finally:
        holder.wait(30)
    assert holder.returncode == 0
    [row] = Store(db, create=False).records("judgements_for_runs", run_ids=[R1ZERO_RUN])
    assert row["judgement"] == "confirmed"
