"""RunVerdict's parts flatten to the columns of runs.csv: the same names, in the same order."""
import math

from harness.verify.verdicts import (RUN_COLUMNS, AcceptancePart, CertificatePart, PITPart, RunVerdict, TVPart)


def test_to_row_gives_every_column_once_in_order():
    v = RunVerdict("r", "lossless", "base", 10, 40, 0.5, tv=TVPart(tv_joint=0.1), pit=PITPart(pit_ks=0.2),
                   accept=AcceptancePart(acceptance=0.7), cert=CertificatePart(certificate="certified"))
    row = v.to_row()
    assert tuple(row) == RUN_COLUMNS and len(RUN_COLUMNS) == 65
    assert (row["tv_joint"], row["pit_ks"], row["acceptance"], row["certificate"]) == (0.1, 0.2, 0.7, "certified")
    assert row["run"] == "r" and math.isnan(row["tv_best"]) and row["pit_pairs_cells"] is None


def test_columns_keep_their_historic_order():
    assert RUN_COLUMNS[:10] == ("run", "role", "scenario", "sequences", "tokens", "wall_s", "error", "n_rejected",
                                "min_p_adjusted", "min_pvalue")
    assert RUN_COLUMNS[52:59] == ("cert_worst_ratio", "cert_method", "certify_draws", "cert_scope", "cert_strongest",
                                  "cert_inconclusive_rate", "cert_inconclusive_normal")
    assert RUN_COLUMNS[59:] == ("cert_worst_bound", "cpu_s", "cpu_baseline_s", "cpu_per_sequence_us",
                                "cert_eps_sqrt_cpu", "certify_cpu_s")  # issue 42, appended


def test_standing_of_a_buggy_control_not_caught_is_inconclusive_unless_certified():
    """A buggy control neither caught nor certified shows only that the battery's power at this size is not shown
    (inconclusive, exit 4: a quick look at few draws); one *certified* lossless is the battery's failure (lossy);
    one caught passes; a sampler under test that rejected stays failed."""
    from types import SimpleNamespace as Row

    from harness.verify.outcome import command_verdict
    from harness.verify.verdicts import standing
    import pandas as pd

    def row(role, passed, certificate, error=""):
        return Row(role=role, passed=passed, certificate=certificate, error=error, efficiency="")

    assert standing(row("lossy", False, "inconclusive")) == "inconclusive"
    assert standing(row("lossy", False, "certified")) == "failed"
    assert standing(row("lossy", True, "lossy")) == "ok"
    assert standing(row("lossy", False, "inconclusive", error="boom")) == "failed"
    assert standing(row("reference", False, "lossy")) == "failed"
    assert standing(row("reference", False, "inconclusive")) == "inconclusive"
    table = pd.DataFrame([vars(row("reference", True, "certified")), vars(row("lossy", False, "inconclusive"))])
    assert command_verdict(table) == "inconclusive"
    table.loc[1, "certificate"] = "certified"
    assert command_verdict(table) == "lossy"
