"""Outputs and baselines cut or failing part-way: a baseline CSV cut mid-row is refused, not
read as a smaller baseline."""
import pytest

from devicefit.reports.baselines import BaselineError, ConfigIdentity, SampleSet, sets_from_csv, write_baseline_csv


def _baseline(tmp_path):
    """A baseline CSV as `compare --export-baseline` writes it: three configs with samples."""
    sets = [SampleSet(ConfigIdentity(f"m{i}", "cpu", "torch", "fp32", "inference", 1, None), [10.0 + i, 11.25 + i, 12.5 + i],
                      11.25 + i, "run-1", "cpu-x") for i in range(3)]
    return write_baseline_csv(sets, tmp_path / "base.csv")


def _cut(path, text, name):
    out = path.parent / name
    out.write_bytes(text.encode())
    return out


@pytest.mark.parametrize("cut", [
    lambda last: last[: last.rindex(";") + 2],    # the last sample cut mid-number: "13.5;14.75" -> "13.5;1"
    lambda last: last[: last.rindex(",") - 1],    # p50_ms cut short: a field fewer than the header
    lambda last: last[: last.index(",", 3)],      # cut after two fields
])
def test_a_baseline_csv_cut_in_its_last_row_is_refused_naming_the_line(tmp_path, cut):
    """A copy interrupted mid-row read as a smaller valid baseline: a short row's missing fields
    were filled with None (a row with no samples compared by its cut p50), and a sample list cut
    mid-number made a regression out of nothing; the configs after the cut were "new"."""
    path = _baseline(tmp_path)
    *head, last = path.read_text().splitlines(keepends=True)
    damaged = _cut(path, "".join(head) + cut(last.rstrip("\r\n")), "cut.csv")
    with pytest.raises(BaselineError, match=r"cut\.csv line 4 is cut short"):
        sets_from_csv(damaged)


def test_a_short_row_inside_a_baseline_csv_is_refused(tmp_path):
    path = _baseline(tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    lines[2] = lines[2][: lines[2].rindex(",")] + "\r\n"
    with pytest.raises(BaselineError, match=r"line 3 is cut short or damaged: it has 11 fields where the header has 12"):
        sets_from_csv(_cut(path, "".join(lines), "short.csv"))


def test_a_whole_baseline_csv_without_its_final_line_end_is_read(tmp_path):
    """A file whose last row is whole but has lost its final newline (an editor's save) is still
    the same baseline."""
    path = _baseline(tmp_path)
    whole = sets_from_csv(path)
    trimmed = sets_from_csv(_cut(path, path.read_text().rstrip("\r\n"), "nonl.csv"))
    assert [(s.identity, s.samples_ms, s.p50_ms) for s in trimmed] == [(s.identity, s.samples_ms, s.p50_ms) for s in whole]
    assert len(trimmed) == 3
